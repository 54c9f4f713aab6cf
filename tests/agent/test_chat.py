"""`kernelwright chat` driven as a person would drive it: the real program in a real terminal (tmux, keys sent
and the screen read back), talking to the scripted OpenAI-compatible server, which here also streams its
replies as server-sent events. Checks streaming, tool calls, the confirmation before GPU work (yes and no),
resuming a session by id with its history, and the offline slash-commands. The replies are fixed by the test;
nothing here measures a model."""
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from openai_server import ScriptedOpenAI, messages_text, text, tool_calls

FIX = Path(__file__).parent / "fixtures"
TASK, GOOD = str(FIX / "task_scale_shift.py"), str(FIX / "scale_shift_good.py")
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux: apt-get install -y tmux")


class StreamingOpenAI(ScriptedOpenAI):
    """The scripted server, answering `"stream": true` requests as chat.completion.chunk events. A reply made
    by `gated(first, rest, gate)` sends `first`, waits for the test to set `gate`, then sends `rest`."""

    def __init__(self, script):
        super().__init__(script)
        server, base = self, self.httpd.RequestHandlerClass

        class Handler(base):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self._authorized():
                    return
                assert body.get("stream"), "the chat client must stream"
                reply = server.next_reply(body)
                if "error" in reply:
                    self._send(reply["status"], {"error": {"message": reply["error"], "type": "scripted"}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for delta in deltas(reply):
                    if isinstance(delta, threading.Event):
                        delta.wait(30)
                        continue
                    chunk = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 0,
                             "model": body.get("model"), "choices": [{"index": 0, "delta": delta[0],
                                                                      "finish_reason": delta[1]}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd.RequestHandlerClass = Handler


def deltas(reply: dict):
    msg = reply["message"]
    yield {"role": "assistant", "content": ""}, None
    parts = reply.get("parts") or ([msg["content"]] if msg.get("content") else [])
    for part in parts:
        if isinstance(part, threading.Event):
            yield part
            continue
        for i in range(0, len(part), 6):
            yield {"content": part[i:i + 6]}, None
    for i, call in enumerate(msg.get("tool_calls") or []):
        yield {"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                               "function": {"name": call["function"]["name"], "arguments": ""}}]}, None
        yield {"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}, None
    yield {}, "tool_calls" if msg.get("tool_calls") else "stop"


def gated(first: str, rest: str, gate: threading.Event) -> dict:
    reply = text(first + rest)
    reply["parts"] = [first, gate, rest]
    return reply


class Terminal:
    """The program in a detached tmux session of its own server (-L), 200x60; keys in, screen out."""

    def __init__(self, cwd: Path, env: dict, args: list[str]):
        self.sock = f"kw-chat-test-{uuid.uuid4().hex[:8]}"
        inner = shlex.join(["env", "-i", *[f"{k}={v}" for k, v in env.items()], sys.executable, "-m", "agent.cli", "chat", *args])
        self.tmux("new-session", "-d", "-s", "chat", "-x", "200", "-y", "60", "-c", str(cwd),
                  f"{inner}; echo \"[exit $?]\"; sleep 600")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], check=True, capture_output=True, text=True).stdout

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", line)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "chat", "-S", "-2000")

    def wait_for(self, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if needle in screen:
                return screen
            if "[exit " in screen:
                break
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} never appeared; the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


def base_env(tmp_path: Path) -> dict:
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "KERNELWRIGHT_CACHE") if k in os.environ}
    return {**keep, "TERM": "xterm-256color", "KERNELWRIGHT_CHAT_DB": str(tmp_path / "chat.sqlite"),
            "KERNELWRIGHT_KB_DIR": str(tmp_path / "kb")}


@pytest.mark.slow
def test_a_session_streams_calls_tools_asks_before_gpu_work_and_resumes(tmp_path):
    gate = threading.Event()
    script = [
        tool_calls(("read_task", {"path": TASK})),
        gated("It multiplies x by 3 ", "and adds 0.5, elementwise.", gate),
        tool_calls(("profile_kernel", {"task": TASK, "kernel": GOOD})),
        text("Correct, and timed in the interpreter: no speedup on a CPU."),
        tool_calls(("start_optimize", {"task": TASK, "budget": 2})),
        text("Understood; nothing was started."),
        text("We read the task and profiled your kernel: correct."),
    ]
    with StreamingOpenAI(script) as server:
        env = {**base_env(tmp_path), "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": server.key}
        term = Terminal(tmp_path, env, ["--model", "scripted-model", "--session", "s1"])
        try:
            term.wait_for("you> ")
            assert "Session s1: model scripted-model" in term.screen()
            term.type("What does the task compute?")
            term.wait_for("[tool] read_task(path=")
            screen = term.wait_for("agent> It multiplies x by 3")
            assert "adds 0.5" not in screen  # half a reply on screen: it streams
            gate.set()
            term.wait_for("and adds 0.5, elementwise.")
            assert "x * 3.0 + 0.5" in messages_text(server.requests[1])  # the tool read the file for the model

            term.type("Profile my kernel.")
            screen = term.wait_for("time. Go ahead? [y/N]")
            assert f"The agent wants to profile {GOOD} against {TASK}. This spends" in screen
            assert len(server.requests) == 3  # nothing runs until the person answers
            term.type("y")
            term.wait_for("no speedup on a CPU.")
            assert "verdict: correct" in messages_text(server.requests[3])

            term.type("Now optimize it.")
            term.wait_for("start an optimize run on")
            term.type("n")
            term.wait_for("nothing was started.")
            assert "declined" in messages_text(server.requests[5]) and not (tmp_path / "runs").exists()
            term.type("/quit")
            term.wait_for("[exit 0]")
        finally:
            term.close()

        again = Terminal(tmp_path, env, ["--model", "scripted-model", "--session", "s1"])
        try:
            screen = again.wait_for("you> ")
            assert "Resumed session s1" in screen and "nothing was started." in screen
            again.type("What have we done so far?")
            again.wait_for("profiled your kernel: correct.")
            history = messages_text(server.requests[6])
            assert "What does the task compute?" in history and "verdict: correct" in history
            again.type("/quit")
            again.wait_for("[exit 0]")
        finally:
            again.close()
    assert len(server.requests) == 7


def test_without_a_model_it_explains_and_slash_commands_work(tmp_path):
    term = Terminal(tmp_path, base_env(tmp_path), [])
    try:
        screen = term.wait_for("you> ")
        assert "No model is configured" in screen and "OPENAI_BASE_URL" in screen and "--model NAME" in screen
        term.type("/help")
        term.wait_for("/optimize TASK [BUDGET]")
        term.type("hello?")
        term.wait_for("type /help for the commands that work offline")
        term.type("/kb online softmax")
        term.wait_for("(/kb finished with exit code 0)")
        assert "[doc " in term.screen()
        term.type(f"/eval {TASK} {GOOD}")
        screen = term.wait_for("(/eval finished with exit code 0)")
        assert "CORRECT" in screen and "interpreter time" in screen
        term.type("/quit")
        term.wait_for("[exit 0]")
    finally:
        term.close()
