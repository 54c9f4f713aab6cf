"""`kernelwright chat`: work on kernels with the agent, in a terminal.

    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=x kernelwright chat --model qwen2.5-coder
    kernelwright chat --model qwen2.5-coder --session 3f9c2a17     # pick up an earlier conversation
    kernelwright chat                                               # no model: the slash-commands only

The agent is a LangGraph graph (model -> confirm -> tools -> model ...) whose tools read a task, write,
check, test and profile a kernel, search the knowledge store, and start an `optimize` run and report its
progress. Conversations are checkpointed in SQLite ($KERNELWRIGHT_CHAT_DB, else the per-user data folder)
and resume by session id. profile_kernel and start_optimize spend GPU time, so the graph stops (LangGraph
`interrupt`) until the person confirms. Replies stream as they arrive. Slash-commands run the CLI's own
commands and work with or without a model: /eval TASK CANDIDATE, /optimize TASK [BUDGET], /kb QUERY,
/help, /quit.
Exit codes: 0 the session ended (/quit or end of input); 2 bad input (incomplete model settings, an
unreachable endpoint).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Annotated, Literal, TypedDict

from agent.replies import finish_reason


EXIT_OK, EXIT_USAGE = 0, 2
OFFLINE = ("No model is configured, so only the slash-commands work (type /help). To talk with the agent, "
           "point it at any OpenAI-compatible endpoint: set OPENAI_BASE_URL to its URL (for example "
           "http://localhost:8000/v1 for vLLM or http://localhost:11434/v1 for Ollama; leave it unset for "
           "OpenAI itself), set OPENAI_API_KEY (local servers accept any value), and start again with "
           "--model NAME.")
HELP = """Commands:
  /eval TASK CANDIDATE     verify and time a candidate kernel against a task
  /optimize TASK [BUDGET]  search for a faster kernel (default budget 8); Ctrl-C stops it, resumable
  /kb QUERY                search the knowledge store (docs and verified kernels)
  /help                    this list
  /quit                    end the session (also Ctrl-D)"""
LONG = {"profile_kernel": "profile {kernel} against {task}",
        "start_optimize": "start an optimize run on {task} with a budget of {budget} evaluations"}


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("chat", help="work on kernels with the agent in a terminal session",
                              description="An interactive session with the kernel agent and its tools; with no "
                                          "model configured, the slash-commands still work.")
    p.add_argument("--model", help="model name at OPENAI_BASE_URL (with OPENAI_API_KEY)")
    p.add_argument("--session", metavar="ID", help="resume this session (or start one with this id)")
    p.set_defaults(func=main)
    return p


def session_db() -> Path:
    if os.environ.get("KERNELWRIGHT_CHAT_DB"):
        return Path(os.environ["KERNELWRIGHT_CHAT_DB"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kernelwright" / "chat.sqlite"


# --- tools ---------------------------------------------------------------------------------------------
class ChatTools:
    """The agent's tools. Each returns text for the model; the evaluator and optimize runs are the real ones."""

    def __init__(self):
        self.runs: dict[str, object] = {}  # optimize runs started here: folder -> process

    def read_task(self, path: str) -> str:
        """Read a task file (KernelBench format) and describe what it computes: inputs, ops, FLOPs, bytes.

        Args:
            path: the task file, e.g. tasks/01_gelu.py
        """
        from agent.analysis import analyze
        from agent.operators.llm import analysis_lines
        source = Path(path).read_text()
        lines = analysis_lines(analyze(path, small=True, arch="sm_90").to_json())
        return f"{source}\n# analysis (small shapes)\n" + "\n".join(lines)

    def write_kernel(self, path: str, source: str) -> str:
        """Write a candidate kernel file (ModelNew + @triton.jit kernels) and check that it is well formed.

        Args:
            path: where to write it, e.g. kernels/gelu.py
            source: the whole file
        """
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(source)
        return f"wrote {path} ({len(source.splitlines())} lines). " + self.compile_kernel(path)

    def compile_kernel(self, kernel: str) -> str:
        """Check a kernel file without running it: it parses, defines ModelNew and a @triton.jit kernel.

        Args:
            kernel: the kernel file
        """
        import ast
        source = Path(kernel).read_text()
        try:
            tree = ast.parse(source)
        except SyntaxError as e:
            return f"error: {kernel} does not parse: line {e.lineno}: {e.msg}"
        if "ModelNew" not in {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}:
            return f"error: {kernel} defines no class ModelNew"
        return "well formed" if "triton.jit" in source else f"error: {kernel} has no @triton.jit kernel"

    def _evaluate(self, task: str, kernel: str, profile: bool) -> str:
        from agent.operators.llm import describe_result
        from tools.evaluate import evaluate
        from tools.results import EvalJob, TaskSpec
        spec = TaskSpec(path=task, name=Path(task).stem)
        return describe_result(evaluate(EvalJob(spec, Path(kernel).read_text(), trials=4 if profile else 2,
                                                profile=profile)))

    def test_kernel(self, task: str, kernel: str) -> str:
        """Run a kernel against its task in the sandboxed evaluator and compare with the reference.

        Args:
            task: the task file
            kernel: the kernel file
        """
        return self._evaluate(task, kernel, profile=False)

    def profile_kernel(self, task: str, kernel: str) -> str:
        """Verify and time a kernel: its time, the eager and torch.compile baselines, the speed-of-light floor,
        registers and spills. Spends GPU time; the person confirms first.

        Args:
            task: the task file
            kernel: the kernel file
        """
        return self._evaluate(task, kernel, profile=True)

    def search_knowledge(self, query: str, kind: Literal["doc", "kernel"] = "doc") -> str:
        """Search the knowledge store for hardware and optimization notes or verified kernels.

        Args:
            query: what to look for
            kind: "doc" or "kernel"
        """
        from knowledge.store import KnowledgeStore
        with KnowledgeStore() as store:
            found = store.retrieve(query, kind=kind, k=3, budget_chars=6000)
        return "\n\n".join(f"## {r.id}\n{r.text}" for r in found) or "nothing found"

    def start_optimize(self, task: str, budget: int = 8) -> str:
        """Start `kernelwright optimize` on a task in the background; returns its run folder. Spends GPU time;
        the person confirms first.

        Args:
            task: the task file
            budget: candidates to evaluate
        """
        import subprocess
        import time
        out = Path("runs") / f"chat-{Path(task).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        out.mkdir(parents=True, exist_ok=True)
        log = open(out / "optimize.log", "w")
        self.runs[str(out)] = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "optimize", task, "--budget", str(budget), "--out", str(out)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return f"started: run folder {out}; ask optimize_progress for its progress"

    def optimize_progress(self, run: str) -> str:
        """How an optimize run is doing: candidates by verdict, the best so far, whether it finished.

        Args:
            run: the run folder start_optimize returned
        """
        from agent.optimize import STORE_FILE, best_of_store
        from agent.runstore import RunStore
        folder = Path(run)
        if not (folder / STORE_FILE).is_file():
            tail = (folder / "optimize.log").read_text()[-400:] if (folder / "optimize.log").is_file() else ""
            return f"no run store in {run} yet. {tail}".strip()
        store = RunStore(folder / STORE_FILE)
        try:
            record = store.runs()[-1]
            counts = {v: n for v, n in store.counts(record.id).items() if n}
            best = best_of_store(store, record.id)
        finally:
            store.close()
        line = f"status {record.status} {record.stop_reason}".strip() + f"; candidates {counts or 'none yet'}"
        if best is not None and best.result.timing is not None:
            t = best.result.timing
            line += f"; best #{best.id} {t.ms:.4g} ms" + (" (interpreter)" if t.interpreted else "")
            line += f", {t.speedup_vs_eager:.2f}x eager" if t.speedup_vs_eager else ""
        return line

    def all(self) -> list:
        return [self.read_task, self.write_kernel, self.compile_kernel, self.test_kernel, self.profile_kernel,
                self.search_knowledge, self.start_optimize, self.optimize_progress]

    def call(self, name: str, args: dict) -> str:
        tool = {t.__name__: t for t in self.all()}.get(name)
        if tool is None:
            return f"error: no tool named {name!r}"
        try:
            return tool(**args)
        except Exception as e:  # a tool's failure (a missing file, a task that does not trace) goes to the model
            return f"error: {type(e).__name__}: {str(e)[:500]}"


# --- the graph -----------------------------------------------------------------------------------------
def build_agent(chat, tools: ChatTools, checkpointer, device: str):
    """model -> (tool calls?) confirm -> tools -> model; confirm interrupts before GPU-spending tools."""
    import jinja2
    from langchain_core.messages import AnyMessage, SystemMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import interrupt

    # Defined here so that langgraph loads only when a chat starts, not for every `kernelwright` command.
    ChatState = TypedDict("ChatState", {"messages": Annotated[list[AnyMessage], add_messages],
                                        "approved": bool})  # approved: the answer to the last confirmation

    schemas = [convert_to_openai_tool(t) for t in tools.all()]
    hardware = "CPU" if device == "cpu" else "GPU"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "prompts")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    system = env.get_template("chat_system.j2").render(
        device=device, tools=[(s["function"]["name"], s["function"]["description"].split("\n")[0]) for s in schemas])

    def model(state: dict) -> dict:
        return {"messages": [chat.invoke([SystemMessage(system)] + state["messages"], tools=schemas)]}

    def confirm(state: dict) -> dict:
        calls = [c for c in state["messages"][-1].tool_calls if c["name"] in LONG]
        if not calls:
            return {"approved": True}
        actions = "; ".join(LONG[c["name"]].format(**{"budget": 8, **c["args"]}) for c in calls)
        answer = interrupt({"question": f"The agent wants to {actions}. This spends {hardware} time. Go ahead?"})
        return {"approved": str(answer).strip().lower() in ("y", "yes")}

    def run_tools(state: dict) -> dict:
        out = []
        for c in state["messages"][-1].tool_calls:
            declined = c["name"] in LONG and not state["approved"]
            text = "The person declined to run this now." if declined else tools.call(c["name"], c["args"])
            out.append(ToolMessage(text, tool_call_id=c["id"], name=c["name"]))
        return {"messages": out}

    def route(state: dict) -> Literal["confirm", "__end__"]:
        return "confirm" if getattr(state["messages"][-1], "tool_calls", None) else END

    builder = StateGraph(ChatState)
    builder.add_node("model", model)
    builder.add_node("confirm", confirm)
    builder.add_node("tools", run_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route)
    builder.add_edge("confirm", "tools")
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer, name="kernelwright-chat")


class Session:
    """One conversation thread of the agent graph, shown in the terminal as it streams."""

    def __init__(self, graph, session_id: str):
        self.graph, self.config = graph, {"configurable": {"thread_id": session_id}}

    def history(self) -> list:
        return self.graph.get_state(self.config).values.get("messages", [])

    def say(self, text: str) -> None:
        from langchain_core.messages import HumanMessage
        self.run({"messages": [HumanMessage(text)]})

    def run(self, inputs) -> None:
        from langgraph.types import Command
        while True:
            try:
                self._stream(inputs)
            except KeyboardInterrupt:
                print("\n(stopped)", flush=True)
                self.cancel_pending()
                return
            pending = self.graph.get_state(self.config).interrupts
            if not pending:
                return
            inputs = Command(resume=ask(f"{pending[0].value['question']} [y/N] "))

    def resume_pending(self) -> None:
        """A session left waiting for a confirmation asks again; one cut off mid-step is closed cleanly."""
        if self.graph.get_state(self.config).interrupts:
            self.run(None)
        else:
            self.cancel_pending()

    def cancel_pending(self) -> None:
        from langchain_core.messages import AIMessage, ToolMessage
        state = self.graph.get_state(self.config)
        last = (state.values.get("messages") or [None])[-1]
        if state.next and isinstance(last, AIMessage) and last.tool_calls:
            self.graph.update_state(self.config, {"messages": [
                ToolMessage("Cancelled by the person.", tool_call_id=c["id"], name=c["name"])
                for c in last.tool_calls]}, as_node="tools")

    def _stream(self, inputs) -> None:
        speaking = False
        for mode, data in self.graph.stream(inputs, self.config, stream_mode=["messages", "updates"]):
            if mode == "messages":
                chunk, meta = data
                if meta.get("langgraph_node") == "model" and isinstance(chunk.content, str) and chunk.content:
                    print(("" if speaking else "agent> ") + chunk.content, end="", flush=True)
                    speaking = True
                continue
            if speaking:
                print(flush=True)
                speaking = False
            for node, update in data.items():
                for m in (update or {}).get("messages", []) if isinstance(update, dict) else []:
                    if node == "model":
                        for c in m.tool_calls:
                            args = ", ".join(f"{k}={_short(v)}" for k, v in c["args"].items())
                            print(f"  [tool] {c['name']}({args})", flush=True)
                        note = reply_note(m)
                        if note:
                            print(f"  ({note})", flush=True)
                    elif node == "tools":
                        print(f"  [{m.name}] {_short(m.content, 160)}", flush=True)
        if speaking:
            print(flush=True)


def reply_note(message) -> str:
    """What the person should know about a reply that did not go as asked, or ''."""
    if finish_reason(message) == "length":
        return ("the reply was cut at the model's length limit; ask for less at a time, or raise "
                "KERNELWRIGHT_LLM_MAX_TOKENS")
    if getattr(message, "invalid_tool_calls", None):
        names = ", ".join(str(c.get("name")) for c in message.invalid_tool_calls)
        return f"the model asked for {names} with arguments that are not valid JSON; nothing was run"
    if not message.tool_calls and not (message.text or "").strip():
        return "the model sent an empty reply"
    return ""


def _short(value, limit: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def ask(question: str) -> str:
    try:
        return input(question)
    except EOFError:
        return "n"


# --- the terminal loop ---------------------------------------------------------------------------------
def slash(line: str) -> bool:
    """Runs a slash-command; returns False for /quit. /eval, /optimize and /kb are the CLI's own commands."""
    words = shlex.split(line[1:]) or ["help"]
    cmd, rest = words[0], words[1:]
    if cmd in ("quit", "exit", "q"):
        return False
    if cmd == "help":
        print(HELP)
        return True
    if cmd not in ("eval", "optimize", "kb"):
        print(f"unknown command /{cmd}; type /help")
        return True
    if not rest:
        print(f"/{cmd} needs arguments; type /help")
        return True
    argv = {"eval": ["eval", *rest], "kb": ["kb", "search", " ".join(rest)],
            "optimize": ["optimize", rest[0], "--budget", rest[1] if len(rest) > 1 else "8"]}[cmd]
    from agent.cli import build_parser, run
    try:
        code = run(build_parser().parse_args(argv))
    except SystemExit as e:  # argparse already said what was wrong
        code = e.code
    except KeyboardInterrupt:
        code = 130
    print(f"(/{cmd} finished with exit code {code})", flush=True)
    return True


def main(args: argparse.Namespace) -> int:
    from agent.llm import ChatClient, LLMError, llm_config
    try:
        llm = llm_config(args.model)
        chat = ChatClient(llm) if llm else None
        if chat:
            chat.check()
    except LLMError as e:
        print(f"kernelwright: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    session = None
    if chat is None:
        print(OFFLINE)
    else:
        session, conn = open_session(chat, args.session)
    print("Type /help for the commands, /quit to leave.", flush=True)
    try:
        while True:
            try:
                line = input("you> ").strip()
            except EOFError:
                print()
                return EXIT_OK
            except KeyboardInterrupt:
                print()
                continue
            if line.startswith("/"):
                if not slash(line):
                    return EXIT_OK
            elif line and session is None:
                print("No model is configured; type /help for the commands that work offline.")
            elif line:
                try:
                    session.say(line)
                except LLMError as e:
                    print(f"kernelwright: {e}", flush=True)
    finally:
        if session is not None:
            conn.close()


def open_session(chat, session_id: str | None):
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    db = session_db()
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db, check_same_thread=False)
    device = _device()
    sid = session_id or uuid.uuid4().hex[:8]
    session = Session(build_agent(chat, ChatTools(), SqliteSaver(conn), device), sid)
    history = session.history()
    if history:
        print(f"Resumed session {sid} ({len(history)} messages); model {chat.config.model} at {chat.config.url}.")
        last = next((m for m in reversed(history) if m.type == "ai" and m.content), None)
        if last is not None:
            print(f"agent> {_short(last.content, 400)}")
        session.resume_pending()
    else:
        print(f"Session {sid}: model {chat.config.model} at {chat.config.url}; resume it with --session {sid}.")
    return session, conn


def _device() -> str:
    from tools.executor import visible_gpus
    return "cuda" if visible_gpus() else "cpu"
