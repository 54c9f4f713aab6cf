"""The search, as a LangGraph StateGraph:

    START ─► retrieve ─► select ─► propose ─► evaluate ─► update ─┬─► retrieve (next round)
      │                              │            ▲               └─► terminate ─► END
      └── (resume: candidates left proposed) ─────┘
                                     └─ (nothing new proposed) ─► terminate

Fitness is Individual.fitness (1/ms for a verified-correct candidate, 0 otherwise); a failed candidate
keeps its verdict and reason, which the LLM operator shows in later prompts. Every candidate is in the
run store before it is evaluated and its result is written the moment it returns.
Termination is decided by check_limits, which raises a Finished subclass: budget, time, plateau, floor.

    graph = build_graph()
    graph.invoke(InputState(archive, pending), context=run, config={"recursion_limit": ...})
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from agent.context import Run
from agent.interfaces import Individual
from agent.llm import LLMError
from agent.state import InputState, State
from knowledge.errors import KBError
from tools.executor import sharing_baselines
from tools.results import EvalJob, EvalResult

IMPROVEMENT = 1.01  # a new best must be at least 1% faster than the old one to count as progress
# The floor (tools/profile.py floor_ms) divides a task's bytes by copy bandwidth, and a copy both reads and writes.
# A one-way task (its inputs ONE_WAY times the bytes of its outputs or more: row sums, losses; or its outputs as
# many times its inputs: an upsampling convolution) streams one direction only, which HBM serves faster (an H200,
# session 35, 4 GB: copying 4.27 TB/s, reading alone 4.65, writing alone 4.69; 1 GB: 4.22, 4.45, 4.64), so its
# kernels can pass that floor (issue 19: read-mostly reductions reached 94% of it, where the search used to stop).
# The floor of their own access pattern is STREAM_GAIN times faster; the stop waits for the margin of that one.
ONE_WAY, STREAM_GAIN = 8, 1.09


class Finished(Exception):
    """The search is over; str() says why, in a few words."""


class BudgetSpent(Finished): ...


class TimeUp(Finished): ...


class Plateau(Finished): ...


class FloorReached(Finished): ...


class TaskUnusable(Exception):
    """The evaluator found the task unable to judge any candidate (it does not load, its reference fails, its
    outputs do not tell input sets apart, or rounding decides them): no candidate can ever pass."""


def spent(individuals: list[Individual]) -> int:
    """Candidates that count against the evaluation budget: those with code (a model's reply without usable
    code is kept as an `error` candidate, but nothing was evaluated)."""
    return sum(1 for i in individuals if i.source)


def check_limits(state: State, run: Run) -> None:
    cfg = run.config
    if spent(state.archive + state.pending + state.fresh) >= cfg.budget:
        raise BudgetSpent(f"evaluation budget of {cfg.budget} spent")
    if run.elapsed() >= cfg.time_limit_s:
        raise TimeUp(f"time limit of {cfg.time_limit_s:g} s reached")
    if cfg.plateau and state.stale >= cfg.plateau:
        raise Plateau(f"no better candidate in the last {state.stale} evaluations")
    best = best_of(state.archive)
    t = best.result.timing if best is not None else None
    # torch.compile faster than the best shows the floor's margin is not this kernel's to keep: search on
    if t is not None and not t.interpreted and t.floor_fraction is not None \
            and t.floor_fraction >= floor_bar(run.task.analysis, cfg.floor_margin) \
            and (t.compile_ms is None or t.ms <= t.compile_ms):
        raise FloorReached(f"best is at {t.floor_fraction:.0%} of the speed-of-light floor"
                           + (" (one-way: its own floor is faster)" if one_way(run.task.analysis) else ""))


def floor_bar(analysis: dict, margin: float) -> float:
    """The floor_fraction (floor_ms / ms) at which a best is at its floor: within `margin` of the copy-bandwidth
    floor, or of STREAM_GAIN times it for a one-way task (`analysis`: agent/analysis.py's JSON form)."""
    return (STREAM_GAIN if one_way(analysis) else 1.0) / (1.0 + margin)


def one_way(analysis: dict) -> bool:
    """Whether the task reads ONE_WAY times the bytes it writes or more (inputs and parameters, outputs), or
    writes ONE_WAY times the bytes it reads or more."""
    def size(t: dict) -> int:
        bits = re.search(r"\d+$", t.get("dtype", ""))
        return math.prod(t.get("shape", [])) * (int(bits.group()) // 8 if bits else 1)

    analysis = analysis or {}
    written = sum(size(t) for t in analysis.get("outputs", []))
    read = sum(size(t) for t in analysis.get("inputs", []) + analysis.get("params", []))
    return read > 0 and written > 0 and max(read, written) >= ONE_WAY * min(read, written)


def best_of(archive: list[Individual]) -> Individual | None:
    correct = [i for i in archive if i.fitness > 0]
    return max(correct, key=lambda i: (i.fitness, -i.id)) if correct else None


# --- nodes -----------------------------------------------------------------------------------------
def retrieve(state: State, runtime: Runtime[Run]) -> dict:
    """Docs and similar verified kernels for the prompts; fetched again only when the best changes."""
    run = runtime.context
    key = state.best_id if state.best_id is not None else 0
    if run.knowledge is None or state.retrieved_for == key:
        return {}
    cfg = run.config
    try:
        found = run.knowledge.context_for_task(run.task.source, run.task.arch, k_docs=cfg.k_docs,
                                               k_kernels=cfg.k_kernels, budget_chars=cfg.prompt_chars // 2)
    except KBError as e:
        run.say(f"knowledge: {e}; searching without retrieval")
        run.knowledge = None
        return {}
    return {"retrieved": found.docs + found.kernels, "retrieved_for": key}


def select(state: State, runtime: Runtime[Run]) -> dict:
    run = runtime.context
    return {"parents": run.policy.select(state.archive, run.config.parents), "round": state.round + 1}


def propose(state: State, runtime: Runtime[Run]) -> dict:
    """Asks the operators in turn (a different one leads each round) until one proposes something new;
    each proposal is stored before it is evaluated. A proposal without code (a model's reply that had none)
    is stored with an `error` verdict at once and goes straight to the archive."""
    run = runtime.context
    n = min(run.config.batch_size, run.config.budget - spent(state.archive + state.pending))
    seen = {i.source for i in state.archive + state.pending}
    lead = (state.round - 1) % max(len(run.operators), 1)
    for op in run.operators[lead:] + run.operators[:lead]:
        if hasattr(op, "observe"):  # operators that learn from measured results (ParamOperator)
            op.observe(state.archive)
        if hasattr(op, "inform"):  # the LLM operator: what its prompts show beyond the parent
            op.inform(state.archive, state.retrieved, state.baselines)
        shares = [(p, n // len(state.parents) + (j < n % len(state.parents)))
                  for j, p in enumerate(state.parents)] if state.parents else [(None, n)]
        stored, failed = [], []
        for parent, count in shares:
            if count == 0:
                continue
            try:
                proposals = op.propose(run.task, [parent] if parent else [], count)
            except LLMError as e:
                run.say(f"llm: {e}; the LLM operator is off for the rest of this run")
                run.operators.remove(op)
                break
            for p in proposals[:count]:
                if p.source in seen:
                    continue
                ind = run.store.add_proposed(run.run_id, p, parent.id if parent else None,
                                             prompt=getattr(p, "prompt", ""))
                if p.source:
                    seen.add(p.source)
                    stored.append(ind)
                else:
                    failed.append(_no_code(run, ind, p.note))
        if stored or failed:
            return {"pending": stored, "fresh": failed}
        if not run.operators:
            break
    return {"pending": []}


def _no_code(run: Run, ind: Individual, reason: str) -> Individual:
    result = EvalResult(verdict="error", reason=f"no usable code: {reason}", device="none")
    run.store.record_result(run.run_id, ind.id, result)
    run.say(f"#{ind.id} {ind.operator}: error (no evaluation spent): {result.reason[:160]}")
    return replace(ind, result=result)


def evaluate(state: State, runtime: Runtime[Run]) -> dict:
    """Evaluates the pending candidates together, the first alone until the run has its eager and
    torch.compile baselines (tools.executor.sharing_baselines); each result is stored as soon as it returns."""
    run, cfg = runtime.context, runtime.context.config
    if not state.pending:  # only candidates without code this round: they already have their verdicts
        return {}
    run.say(f"evaluating {' '.join(f'#{i.id}' for i in state.pending)}")

    def job(i: Individual, baselines) -> EvalJob:
        return EvalJob(task=run.spec, candidate=i.source, timeout_s=cfg.eval_timeout_s, trials=cfg.trials,
                       seed=cfg.seed, trial_seed=cfg.trial_seed, baselines=baselines)

    done, baselines, broken = [], state.baselines, None
    for i, result in sharing_baselines(run.executor, state.pending, job, baselines):
        ind = replace(i, result=result)
        run.store.record_result(run.run_id, ind.id, result)
        done.append(ind)
        baselines = baselines or result.baselines
        broken = broken or (result.reason if result.task_error else None)
        run.say(progress_line(ind, spent(state.archive) + len(done), cfg.budget))
    if broken:
        raise TaskUnusable(broken)
    return {"pending": [], "fresh": sorted(state.fresh + done, key=lambda i: i.id), "baselines": baselines}


def update(state: State, runtime: Runtime[Run]) -> dict:
    """Adds the round's candidates to the archive, tracks the best, writes a new best back to knowledge."""
    run = runtime.context
    archive = state.archive + state.fresh
    old = next((i for i in state.archive if i.id == state.best_id), None)
    best = best_of(archive)
    improved = best is not None and (old is None or best.fitness > old.fitness * IMPROVEMENT)
    if improved:
        run.say(f"best so far: #{best.id} ({best.operator}) {best.result.timing.ms:.4g} ms"
                + (" (interpreter)" if best.result.timing.interpreted else ""))
        if run.knowledge is not None:
            meta = {"task": run.task.name, "arch": run.task.arch, "parent_id": best.parent_id, "run": run.run_id,
                    "candidate": best.id, "operator": best.operator, "params": best.params}
            try:
                run.knowledge.write_back(best.source, meta, best.result)
            except KBError as e:  # the run store has the candidate; the library can be rebuilt later
                run.say(f"knowledge: {e}")
    return {"archive": archive, "fresh": [], "best_id": best.id if improved else state.best_id,
            "stale": 0 if improved else state.stale + spent(state.fresh)}


def terminate(state: State, runtime: Runtime[Run]) -> dict:
    run = runtime.context
    try:
        check_limits(state, run)
        why = [f"{op.name}: {op.last_reason}" for op in run.operators if getattr(op, "last_reason", None)]
        reason = "the operators proposed nothing new" + (f" ({'; '.join(why)})" if why else "")
    except Finished as e:
        reason = str(e)
    run.store.set_status(run.run_id, "finished", reason)
    run.say(f"stopped: {reason}")
    return {"stop": reason}


def progress_line(ind: Individual, n: int, budget: int) -> str:
    r = ind.result
    origin = f" <- #{ind.parent_id}" if ind.parent_id is not None else ""
    figure = ""
    if r.timing is not None:
        figure = f" {r.timing.ms:.4g} ms" + (" (interpreter)" if r.timing.interpreted else "")
        if r.timing.floor_fraction is not None:
            figure += f", {r.timing.floor_fraction:.0%} of floor"
    why = "" if r.correct else f": {r.reason[:120]}"
    return f"[{n}/{budget}] #{ind.id} {ind.operator}{origin}: {r.verdict}{figure}{why}"


# --- routing -----------------------------------------------------------------------------------------
def route_start(state: State, runtime: Runtime[Run]) -> Literal["evaluate", "retrieve", "terminate"]:
    if state.pending:  # a resumed run: finish what was proposed before proposing more
        return "evaluate"
    try:
        check_limits(state, runtime.context)
    except Finished:
        return "terminate"
    return "retrieve"


def route_after_propose(state: State) -> Literal["evaluate", "terminate"]:
    return "evaluate" if state.pending or state.fresh else "terminate"


def route_after_update(state: State, runtime: Runtime[Run]) -> Literal["retrieve", "terminate"]:
    try:
        check_limits(state, runtime.context)
    except Finished:
        return "terminate"
    return "retrieve"


# --- builder -----------------------------------------------------------------------------------------
def build_graph():
    builder = StateGraph(State, input_schema=InputState, context_schema=Run)
    for node in (retrieve, select, propose, evaluate, update, terminate):
        builder.add_node(node)
    builder.add_conditional_edges(START, route_start)
    builder.add_edge("retrieve", "select")
    builder.add_edge("select", "propose")
    builder.add_conditional_edges("propose", route_after_propose)
    builder.add_edge("evaluate", "update")
    builder.add_conditional_edges("update", route_after_update)
    builder.add_edge("terminate", END)
    return builder.compile(name="kernelwright-search")


def run_search(run: Run, archive: list[Individual], pending: list[Individual]) -> State:
    """Runs the graph to its end and returns the final state."""
    limit = 8 * max(run.config.budget, 1) + 32  # each round is five steps and proposes at least once
    out = build_graph().invoke(InputState(archive=archive, pending=pending), context=run,
                               config={"recursion_limit": limit})
    return State(**out)
