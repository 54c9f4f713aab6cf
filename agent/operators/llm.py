"""The LLM operator: a tool-calling model that reads the parent, searches the knowledge store, writes a
kernel, tests and profiles it through the real evaluator, and submits a candidate.

Each proposal is one short conversation that ends with a typed exception: Submitted (a candidate)
or NoCandidate (the model gave up, ran out of turns, or replied without code). Endpoint failures
surface as agent.llm.LLMError, one line, for the search graph to report.

The strategy instructions in the system prompt are evolved (StrategyPool): every candidate keeps the
strategy it was produced under, strategies are scored by how their candidates fared, and new ones are
drawn by score and mutated (a snippet swapped, added or dropped, or two strategies crossed).
"""
from __future__ import annotations

import ast
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Callable

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from agent.context import RunConfig
from agent.interfaces import Executor, Individual, KnowledgeStore, Proposal, Retrieved, TaskContext
from agent.llm import ChatClient, LLMError, LLMTimeUp
from agent.policies import kernel_features
from agent.prompts import (ParentView, ProposalPrompt, load_strategies, render_nudge, render_proposal,
                           render_system)
from agent.replies import finish_reason, strip_reasoning
from tools.results import Baselines, EvalJob, EvalResult, TaskSpec
from tools.rules import check_source


@dataclass
class LLMProposal(Proposal):
    prompt: str = ""  # the rendered proposal prompt, kept in the run store


class Submitted(Exception):
    def __init__(self, source: str, note: str):
        super().__init__(note)
        self.source, self.note = source, note


class NoCandidate(Exception):
    """The conversation ended without a candidate; the message says why, in one line."""


MAX_FRUITLESS = 3  # conversations in a row without usable code before the operator stops asking


def _tool(name: str, purpose: str, **props: dict) -> dict:
    required = [k for k, v in props.items() if not v.pop("optional", False)]
    return {"type": "function", "function": {"name": name, "description": purpose, "parameters": {
        "type": "object", "properties": props, "required": required}}}


TOOLS = [
    _tool("read_parent", "Return the parent kernel's source and its profile (verdict, time, floor, registers)."),
    _tool("search_knowledge", "Search the knowledge store: hardware/optimization docs or verified kernels.",
          query={"type": "string"}, kind={"type": "string", "enum": ["doc", "kernel"], "optional": True}),
    _tool("write_kernel", "Save the full candidate file (ModelNew + @triton.jit kernels) as the draft.",
          source={"type": "string"}),
    _tool("compile_kernel", "Check the draft parses and defines ModelNew and a @triton.jit kernel (no run)."),
    _tool("test_kernel", "Run the evaluator on the draft: load, run, compare with the reference."),
    _tool("profile_kernel", "Run the evaluator on the draft with timing and compile figures."),
    _tool("submit_candidate", "Submit the draft (or the given source) as this attempt's candidate.",
          note={"type": "string", "optional": True}, source={"type": "string", "optional": True}),
]
TOOL_PURPOSES = [(t["function"]["name"], t["function"]["description"]) for t in TOOLS]


# --- what the model is told about a result ------------------------------------------------------
def suggest_bottleneck(result: EvalResult, analysis: dict) -> str:
    if not result.correct:
        return "correctness: fix the failure above before anything else"
    spills = [k for k in (result.compile.kernels if result.compile else []) if k.spills]
    if spills:
        return f"register spills in {spills[0].name}: smaller tiles or fewer stages"
    if result.torch_ops:
        return f"work still done outside Triton: {', '.join(result.torch_ops[:4])}"
    t = result.timing
    if t is None or t.floor_fraction is None:
        return "no floor figure (interpreted or unprofiled): aim for one fused pass over memory"
    bound = str(analysis.get("roofline") or analysis.get("bound") or "")
    if t.floor_fraction < 0.3:
        what = "compute: tile for tl.dot" if "compute" in bound else "memory traffic: coalesce, fuse, read once"
        return f"far from the floor ({t.floor_fraction:.0%}); {what}"
    if t.floor_fraction < 0.7:
        return f"{t.floor_fraction:.0%} of the floor: tune block sizes, num_warps and num_stages"
    return f"{t.floor_fraction:.0%} of the floor: close to the speed of light, only small gains left"


def profile_lines(result: EvalResult | None, analysis: dict) -> list[str]:
    if result is None:
        return ["not evaluated"]
    lines = []
    t = result.timing
    if t is not None:
        where = "interpreter on a CPU, not a GPU time" if t.interpreted else result.device
        line = f"time: {t.ms:.4g} ms ({where})"
        if t.speedup_vs_eager is not None:
            line += f"; {t.speedup_vs_eager:.2f}x eager PyTorch"
        lines.append(line)
        if t.floor_ms is not None and t.floor_fraction is not None:
            lines.append(f"speed-of-light floor {t.floor_ms:.4g} ms; reaches {t.floor_fraction:.0%} of it")
    if result.max_abs_err is not None:
        lines.append(f"max abs error vs reference: {result.max_abs_err:.3g}")
    for k in (result.compile.kernels if result.compile else [])[:3]:
        figures = [f"{n} {v}" for n, v in (("registers", k.registers), ("spills", k.spills),
                                           ("num_warps", k.num_warps), ("num_stages", k.num_stages)) if v is not None]
        lines.append(f"kernel {k.name}: {', '.join(figures) or 'no figures'}")
    if result.torch_ops:
        lines.append(f"torch ops outside Triton: {', '.join(result.torch_ops[:6])}")
    lines.append(f"suggested bottleneck: {suggest_bottleneck(result, analysis)}")
    return lines


def describe_result(result: EvalResult) -> str:
    return "\n".join([f"verdict: {result.verdict}" + (f" ({result.reason})" if result.reason else "")]
                     + profile_lines(result, {})[:-1])


def failed_siblings(archive: list[Individual], parent: Individual | None, limit: int = 4) -> list[str]:
    """Errors of failed candidates sharing this proposal's parent (or, with no parent, failed roots)."""
    pid = parent.id if parent else None
    failed = [i for i in archive if i.parent_id == pid and i.result is not None and not i.result.correct]
    return [f"#{i.id} ({i.operator}): {i.result.verdict}: {i.result.reason[:600]}"
            for i in sorted(failed, key=lambda i: -i.id)[:limit]]


def analysis_lines(analysis: dict, limit: int = 16) -> list[str]:
    """The traced reference (agent/analysis.py) in a few lines: tensors, ops, then the scalar figures."""
    def tensors(key: str) -> str:
        return ", ".join(f"{t['name']} {t['shape']} {t['dtype']}" for t in analysis.get(key) or [])

    lines = [f"{key}: {tensors(key)}" for key in ("inputs", "params", "outputs") if analysis.get(key)]
    ops = analysis.get("ops") or []
    if ops:
        shown = [f"{o['target']} ({o['kind']}) -> {o['shape']}" for o in ops if o.get("kind") != "view"][:8]
        lines.append("ops: " + "; ".join(shown) + (f"; ... {len(ops)} in all" if len(ops) > 8 else ""))
    lines += [f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in analysis.items()
              if isinstance(v, (str, int, float, bool)) and len(str(v)) < 200]
    return lines[:limit]


# --- meta-prompt evolution -------------------------------------------------------------------------
class StrategyPool:
    """Strategies are 2-3 snippets of strategies.md, written one per line as '[key] text'."""

    def __init__(self, seed: int = 0, snippets: dict[str, str] | None = None):
        self.snippets = snippets or load_strategies()
        self.order = list(self.snippets)
        self.rng = random.Random(seed)

    def text(self, keys) -> str:
        keys = sorted(set(keys), key=self.order.index)
        return "\n".join(f"[{k}] {self.snippets[k]}" for k in keys)

    def keys(self, strategy: str) -> tuple[str, ...]:
        return tuple(k for k in re.findall(r"^\[([\w-]+)\]", strategy, flags=re.M) if k in self.snippets)

    def scores(self, archive: list[Individual]) -> dict[tuple, float]:
        """Per strategy: (correct + improved-on-parent + 1) / (candidates + 2)."""
        by_id = {i.id: i for i in archive}
        tally: dict[tuple, list[int]] = {}
        for ind in archive:
            keys = self.keys(ind.strategy)
            if not keys or ind.result is None:
                continue
            parent = by_id.get(ind.parent_id)
            improved = ind.fitness > (parent.fitness if parent else 0.0)
            t = tally.setdefault(keys, [0, 0, 0])
            t[0] += 1
            t[1] += ind.result.correct
            t[2] += improved
        return {k: (c + i + 1) / (n + 2) for k, (n, c, i) in tally.items()}

    def _pick(self, scores: dict[tuple, float]) -> tuple:
        keys = sorted(scores)
        return self.rng.choices(keys, weights=[scores[k] for k in keys])[0]

    def next(self, archive: list[Individual]) -> str:
        scores = self.scores(archive)
        if not scores or self.rng.random() < 0.25:
            first = ["correct-first"] if not any(i.fitness > 0 for i in archive) and "correct-first" in self.order \
                else []
            rest = [k for k in self.order if k not in first]
            return self.text(first + self.rng.sample(rest, 2 - len(first)))
        keys = list(self._pick(scores))
        unused = [k for k in self.order if k not in keys]
        r = self.rng.random()
        if r < 0.4 and unused:  # swap one snippet
            keys[self.rng.randrange(len(keys))] = self.rng.choice(unused)
        elif r < 0.6 and unused and len(keys) < 3:  # add one
            keys.append(self.rng.choice(unused))
        elif r < 0.6 and len(keys) > 1:  # drop one
            keys.pop(self.rng.randrange(len(keys)))
        elif r < 0.8:  # cross with another scored strategy
            pool = sorted(set(keys) | set(self._pick(scores)), key=self.order.index)
            keys = self.rng.sample(pool, min(len(keys), len(pool)))
        return self.text(keys)  # r >= 0.8: the chosen strategy unchanged


# --- the tools ------------------------------------------------------------------------------------
class Workbench:
    """The tools of one conversation: a draft, the parent, the knowledge store and the evaluator."""

    def __init__(self, op: "LLMOperator", task: TaskContext, parent: Individual | None):
        self.op, self.task, self.parent = op, task, parent
        self.draft: str | None = None
        self.evals_left = op.config.max_draft_evals

    def call(self, name: str, args: dict) -> str:
        method = getattr(self, f"tool_{name}", None)
        if method is None:
            return f"error: no tool named {name!r}; the tools are {', '.join(n for n, _ in TOOL_PURPOSES)}"
        try:
            return method(**args)
        except TypeError as e:
            return f"error: bad arguments for {name}: {e}"

    def tool_read_parent(self) -> str:
        if self.parent is None:
            return "There is no parent yet: write a first kernel from the reference."
        lines = profile_lines(self.parent.result, self.task.analysis)
        return f"# parent #{self.parent.id}\n{self.parent.source}\n# profile\n" + "\n".join(lines)

    def tool_search_knowledge(self, query: str, kind: str = "doc") -> str:
        if self.op.knowledge is None:
            return "The knowledge store is not available in this run."
        if kind not in ("doc", "kernel"):
            return "error: kind must be 'doc' or 'kernel'"
        found = self.op.knowledge.retrieve(query, kind=kind, k=3, where=None, budget_chars=6000)
        self.op.searches += 1
        return "\n\n".join(f"## {r.id}\n{r.text}" for r in found) or "nothing found"

    def tool_write_kernel(self, source: str) -> str:
        self.draft = source
        return f"draft saved ({len(source.splitlines())} lines). " + self.tool_compile_kernel()

    def tool_compile_kernel(self) -> str:
        if self.draft is None:
            return "error: no draft yet; call write_kernel first"
        try:
            tree = ast.parse(self.draft)
        except SyntaxError as e:
            return f"error: the draft does not parse: line {e.lineno}: {e.msg}"
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        if "ModelNew" not in classes:
            return "error: the draft defines no class ModelNew"
        if "triton.jit" not in self.draft:
            return "error: the draft has no @triton.jit kernel"
        broken = check_source(self.draft, self.task.source)
        if broken:
            return f"error: the evaluator will reject the draft: {broken}"
        return "the draft parses and defines ModelNew with a @triton.jit kernel"

    def _evaluate(self, profile: bool) -> str:
        check = self.tool_compile_kernel()
        if check.startswith("error"):
            return check
        if self.evals_left <= 0:
            return "error: no evaluator runs left for this candidate; submit it or fix it by reading"
        self.evals_left -= 1
        self.op.draft_evals += 1
        return describe_result(self.op.evaluate(self.draft, profile=profile))

    def tool_test_kernel(self) -> str:
        return self._evaluate(profile=False)

    def tool_profile_kernel(self) -> str:
        return self._evaluate(profile=True)

    def tool_submit_candidate(self, note: str = "", source: str | None = None) -> str:
        source = source or self.draft
        if not source:
            return "error: nothing to submit; call write_kernel first or pass source"
        raise Submitted(source, note or "submitted by the model")


# --- the operator -------------------------------------------------------------------------------------
class LLMOperator:
    name = "llm"

    def __init__(self, chat: ChatClient, config: RunConfig, executor: Executor, spec: TaskSpec,
                 knowledge: KnowledgeStore | None = None, say: Callable[[str], None] = lambda line: None,
                 deadline: float | None = None):
        self.chat, self.config, self.executor, self.spec, self.knowledge = chat, config, executor, spec, knowledge
        self.say = say
        self.deadline = deadline  # time.monotonic() at which the run's time limit falls; None: no limit
        self.fruitless = 0  # conversations in a row that ended without usable code
        self.strategies = StrategyPool(config.seed)
        self.archive: list[Individual] = []
        self.retrieved: list[Retrieved] = []
        self.baselines: Baselines | None = None
        self.draft_evals = self.searches = self.conversations = 0

    def inform(self, archive: list[Individual], retrieved: list[Retrieved], baselines: Baselines | None) -> None:
        """What the search knows now: called by the graph before each propose."""
        self.archive, self.retrieved, self.baselines = archive, retrieved, baselines

    def evaluate(self, source: str, profile: bool) -> EvalResult:
        job = EvalJob(task=self.spec, candidate=source, timeout_s=self.config.eval_timeout_s,
                      trials=self.config.trials if profile else 1, seed=self.config.seed, profile=profile,
                      baselines=self.baselines)
        return self.executor.submit(job).result()

    def prompt(self, task: TaskContext, parent: Individual | None) -> str:
        view = None
        if parent is not None:
            r = parent.result
            view = ParentView(parent.id, parent.source, r.verdict if r else "not evaluated",
                              r.reason if r else "", profile_lines(r, task.analysis))
        p = ProposalPrompt(task_name=task.name, device=task.device, task_source=task.source,
                           analysis=analysis_lines(task.analysis), parent=view,
                           siblings=failed_siblings(self.archive, parent),
                           kernels=[r for r in self.retrieved if r.kind == "kernel"][:self.config.k_kernels],
                           docs=[r for r in self.retrieved if r.kind == "doc"][:self.config.k_docs])
        return render_proposal(p, self.config.prompt_chars)

    def propose(self, task: TaskContext, parents: list[Individual], n: int) -> list[Proposal]:
        """n proposals; a conversation without usable code is one too, with no source and the reason as its
        note (the search records it as an `error` that costs no evaluation). After MAX_FRUITLESS of those in
        a row the operator raises LLMError, which takes it out of the search."""
        if self.fruitless >= MAX_FRUITLESS:
            raise LLMError(f"its last {self.fruitless} conversations gave no usable code")
        parent = parents[0] if parents else None
        out: list[Proposal] = []
        for _ in range(n):
            strategy = self.strategies.next(self.archive)
            prompt = self.prompt(task, parent)
            replies: list[str] = []
            try:
                done = self.converse(task, parent, strategy, prompt, replies)
            except NoCandidate as e:
                self.fruitless += 1
                self.say(f"llm: no candidate ({e})")
                out.append(LLMProposal(source="", operator=self.name, strategy=strategy, note=str(e)[:300],
                                       prompt=transcript(prompt, replies)))
                continue
            self.fruitless = 0
            out.append(LLMProposal(source=done.source, operator=self.name, strategy=strategy,
                                   features=kernel_features(done.source), note=done.note[:200],
                                   prompt=transcript(prompt, replies)))
        return out

    def conversation_deadline(self) -> float | None:
        """A conversation may use half the run's time left, so the other operators keep theirs."""
        if self.deadline is None:
            return None
        now = time.monotonic()
        return now + max(self.deadline - now, 0.0) / 2

    def converse(self, task: TaskContext, parent: Individual | None, strategy: str, prompt: str,
                 replies: list[str] | None = None) -> Submitted:
        """One conversation, ended by Submitted (returned) or NoCandidate. Each model reply is appended to
        `replies` as text, for the run store."""
        self.conversations += 1
        bench = Workbench(self, task, parent)
        messages = [SystemMessage(render_system(strategy, TOOL_PURPOSES, self.config.max_draft_evals)),
                    HumanMessage(prompt)]
        replies = [] if replies is None else replies
        reminders, cut_retries, deadline = 2, 1, self.conversation_deadline()
        try:
            for _ in range(self.config.max_turns):
                try:
                    reply = self.chat.invoke(messages, tools=TOOLS, deadline=deadline)
                except LLMTimeUp as e:
                    if e.partial:
                        replies.append(f"{e.partial}\n[dropped at the deadline]")
                    raise NoCandidate(f"the conversation's share of the time limit ran out ({e})") from None
                messages.append(reply)
                replies.append(reply_record(reply))
                messages += _bad_calls(reply)
                for call in reply.tool_calls:
                    messages.append(ToolMessage(bench.call(call["name"], call["args"]), tool_call_id=call["id"]))
                if reply.tool_calls:
                    continue
                code = code_block(reply.text)
                if code:
                    raise Submitted(code, "a code block in the model's reply")
                if finish_reason(reply) == "length":
                    if cut_retries == 0:
                        raise NoCandidate("the model's reply was cut at its length limit twice")
                    cut_retries -= 1
                    messages.append(HumanMessage(render_nudge(
                        "Your reply was cut off at its length limit. Write less: one tool call, or only the "
                        "kernel file in one ```python block.", reminders)))
                    continue
                if reply.invalid_tool_calls:
                    continue
                if reminders == 0:
                    raise NoCandidate("the model replied without code or a tool call"
                                      + ("" if reply.text.strip() else " (its replies were empty)"))
                reminders -= 1
                messages.append(HumanMessage(render_nudge("Your reply had no tool call and no code.", reminders)))
            raise NoCandidate(f"no candidate after {self.config.max_turns} replies")
        except Submitted as done:
            return done


def _bad_calls(reply) -> list[ToolMessage]:
    """An answer to each tool call of the reply whose arguments were not valid JSON."""
    return [ToolMessage(f"error: the arguments of {bad.get('name')} are not a valid JSON object "
                        f"({bad.get('error') or 'unparseable'}); call it again", tool_call_id=bad.get("id") or "")
            for bad in reply.invalid_tool_calls]


def reply_record(reply) -> str:
    """A model reply as text for the run store: its text, its tool calls, and how it ended."""
    calls = [f"[tool call] {c['name']}({json.dumps(c['args'])[:4000]})" for c in reply.tool_calls]
    calls += [f"[unparseable tool call] {c.get('name')}: {str(c.get('args'))[:400]}" for c in reply.invalid_tool_calls]
    usage = getattr(reply, "usage_metadata", None) or {}
    ending = f"[finish: {finish_reason(reply) or 'unknown'}, {usage.get('output_tokens', '?')} tokens]"
    return "\n".join([reply.text or "[no text]"] + calls + [ending])


def transcript(prompt: str, replies: list[str]) -> str:
    """The prompt and every model reply of a conversation, as the run store keeps them."""
    return "\n\n".join([prompt] + [f"--- model reply {k} ---\n{r}" for k, r in enumerate(replies, 1)])


def code_block(text: str) -> str | None:
    """The last fenced Python block of a reply that defines ModelNew, if any."""
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", strip_reasoning(text), flags=re.S)
    blocks = [b for b in blocks if "class ModelNew" in b]
    return blocks[-1] if blocks else None
