"""The search graph's shape, its termination rules, its propose node, and its evaluate node's order of work."""
import time
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from agent.context import Run, RunConfig
from agent.graph import (BudgetSpent, FloorReached, Plateau, TimeUp, build_graph, check_limits, evaluate, propose,
                         route_after_update, route_start)
from agent.interfaces import Individual, Proposal, TaskContext
from agent.llm import LLMError
from agent.policies import GreedyPolicy
from agent.runstore import RunStore
from agent.state import State
from tools.results import EvalResult, TaskSpec, Timing

FIX = Path(__file__).parent / "fixtures"


def _done(i: int, ms: float, floor_fraction: float | None = None, interpreted: bool = False,
          compile_ms: float | None = None) -> Individual:
    t = Timing(ms, 1.0, compile_ms, 0.1, 1.0 / ms, None, floor_fraction, 1.0, interpreted)
    return Individual(i, f"src{i}", "template", None, result=EvalResult("correct", "ok", timing=t))


class Scripted:
    """A test operator that hands out fixed proposals (or raises), recording what it was asked."""

    def __init__(self, name: str, proposals: list[Proposal] | Exception):
        self.name, self.proposals, self.asked = name, proposals, []

    def propose(self, task, parents, n):
        self.asked.append(([p.id for p in parents], n))
        if isinstance(self.proposals, Exception):
            raise self.proposals
        return self.proposals[:n]


def _run(tmp_path, operators, **config) -> Run:
    store = RunStore(tmp_path / "run.sqlite")
    cfg = RunConfig(**config)
    task = TaskContext("t", "src", {}, "cpu", "cpu")
    return Run(config=cfg, run_id=store.create_run("t.py", cfg.to_json()), task=task, spec=TaskSpec("t.py"),
               executor=None, policy=GreedyPolicy(), operators=operators, store=store, say=lambda s: None)


def test_graph_has_the_search_nodes_in_order():
    g = build_graph().get_graph()
    assert {"retrieve", "select", "propose", "evaluate", "update", "terminate"} <= set(g.nodes)
    edges = {(e.source, e.target) for e in g.edges}
    assert {("retrieve", "select"), ("select", "propose"), ("propose", "evaluate"), ("evaluate", "update"),
            ("update", "retrieve"), ("update", "terminate"), ("propose", "terminate"),
            ("__start__", "evaluate")} <= edges


def test_limits_end_the_search_with_typed_reasons(tmp_path):
    run = _run(tmp_path, [], budget=3, plateau=2, floor_margin=0.1)
    rt = Runtime(context=run)
    archive = [_done(1, 2.0), _done(2, 1.0, floor_fraction=0.5)]
    check_limits(State(archive=archive), run)  # nothing reached yet
    assert route_after_update(State(archive=archive), rt) == "retrieve"
    with pytest.raises(BudgetSpent, match="budget of 3"):
        check_limits(State(archive=archive, pending=[_done(3, 1.0)]), run)
    with pytest.raises(Plateau):
        check_limits(State(archive=archive, stale=2), run)
    with pytest.raises(FloorReached, match="91%"):
        check_limits(State(archive=[_done(1, 1.0, floor_fraction=0.91)]), run)
    with pytest.raises(FloorReached, match="95%"):
        check_limits(State(archive=[_done(1, 1.0, floor_fraction=0.95, compile_ms=1.0)]), run)
    # near the floor but slower than torch.compile (an H200's RMSNorm over 16384x8192 in bf16, 0.134 against
    # 0.129 ms): the search goes on
    check_limits(State(archive=[_done(1, 1.0, floor_fraction=0.95, compile_ms=0.96)]), run)
    # an interpreter time is never compared with the floor
    check_limits(State(archive=[_done(1, 1.0, floor_fraction=0.99, interpreted=True)]), run)
    run.started = time.monotonic() - run.config.time_limit_s
    with pytest.raises(TimeUp):
        check_limits(State(archive=archive), run)
    assert route_after_update(State(archive=archive), rt) == "terminate"


def test_a_resumed_run_evaluates_its_leftovers_first(tmp_path):
    run = _run(tmp_path, [], budget=2)
    rt = Runtime(context=run)
    left = Individual(2, "x", "llm", None)
    assert route_start(State(archive=[_done(1, 1.0)], pending=[left]), rt) == "evaluate"
    assert route_start(State(archive=[_done(1, 1.0)]), rt) == "retrieve"
    assert route_start(State(archive=[_done(1, 1.0), _done(2, 1.0)]), rt) == "terminate"


def test_propose_stores_new_proposals_skips_duplicates_and_survives_a_dead_endpoint(tmp_path):
    broken = Scripted("llm", LLMError("cannot reach the LLM endpoint at http://x (ConnectError)"))
    offline = Scripted("template", [Proposal("src1", "template"), Proposal("new", "template", params={"B": 8})])
    said = []
    run = _run(tmp_path, [broken, offline], budget=10, batch_size=2)
    run.say = said.append
    state = State(archive=[_done(1, 1.0)], parents=[_done(1, 1.0)], round=1)
    out = propose(state, Runtime(context=run))
    assert [i.source for i in out["pending"]] == ["new"]  # "src1" is already in the archive
    assert out["pending"][0].parent_id == 1 and out["pending"][0].params == {"B": 8}
    assert [i.id for i in run.store.pending(run.run_id)] == [out["pending"][0].id]  # stored before evaluation
    assert run.operators == [offline]  # the dead LLM operator is dropped, the run goes on
    assert said == ["llm: cannot reach the LLM endpoint at http://x (ConnectError); "
                    "the LLM operator is off for the rest of this run"]
    assert broken.asked == [([1], 2)] and offline.asked == [([1], 2)]


def test_propose_with_nothing_new_ends_the_search(tmp_path):
    run = _run(tmp_path, [Scripted("template", [Proposal("src1", "template")])], budget=10)
    state = State(archive=[_done(1, 1.0)], parents=[_done(1, 1.0)])
    assert propose(state, Runtime(context=run)) == {"pending": []}


def test_candidates_go_one_at_a_time_until_one_brings_the_baselines(tmp_path):
    """A first candidate that fails before its timing brings no baselines: the next goes alone and measures
    them, and the one after is timed against those, not measuring them again (on an H200 each doing so in the
    same worker recompiled the reference's graph)."""
    from tools.executor import ExecutorConfig, LocalExecutor
    fixtures = Path(__file__).parents[1] / "tools" / "fixtures"
    run = _run(tmp_path, [], batch_size=3)
    run.spec = TaskSpec(str(fixtures / "task_softmax.py"))
    pending = [run.store.add_proposed(run.run_id, Proposal((fixtures / "candidates" / name).read_text(), "template"),
                                      None) for name in ("zeros_output.py", "honest.py", "honest.py")]
    with LocalExecutor(ExecutorConfig(workers_per_device=2)) as run.executor:
        out = evaluate(State(pending=pending), Runtime(context=run))
    first, second, third = out["fresh"]
    assert first.result.verdict == "incorrect" and first.result.baselines is None
    assert second.result.correct and third.result.correct
    assert third.result.baselines == second.result.baselines == out["baselines"]
