"""The SQLite run store: candidates written as they happen, read back after a reopen, lineage exported."""
import json
import sqlite3

import pytest

from agent.interfaces import Proposal
from agent.runstore import RunNotFound, RunStore
from tools.results import EvalResult, Timing


def _correct(ms: float) -> EvalResult:
    t = Timing(ms=ms, eager_ms=None, compile_ms=None, floor_ms=None, speedup_vs_eager=None,
               speedup_vs_compile=None, floor_fraction=None, spread_pct=1.0, interpreted=True)
    return EvalResult("correct", "Correct on every trial.", device="cpu", interpreted=True, timing=t)


def test_candidates_survive_a_reopen_with_results_and_lineage(tmp_path):
    path = tmp_path / "run.sqlite"
    store = RunStore(path)
    run = store.create_run("/tasks/relu.py", {"budget": 4})
    a = store.add_proposed(run, Proposal("src-a", "template", params={"BLOCK": 256}, features={"tile": "medium"}),
                           parent_id=None)
    b = store.add_proposed(run, Proposal("src-b", "llm", strategy="[fuse] fuse it"), parent_id=a.id,
                           prompt="the prompt")
    c = store.add_proposed(run, Proposal("src-c", "param"), parent_id=a.id)
    store.record_result(run, a.id, _correct(2.0))
    store.record_result(run, b.id, EvalResult("incorrect", "Incorrect: max abs error 0.5."))
    store.close()

    store = RunStore(path)  # a new process would see exactly this
    assert [i.id for i in store.archive(run)] == [1, 2]
    assert [i.id for i in store.pending(run)] == [3]
    first, second = store.archive(run)
    assert first.params == {"BLOCK": 256} and first.features == {"tile": "medium"}
    assert first.result.timing.ms == 2.0 and first.fitness == pytest.approx(0.5)
    assert second.parent_id == 1 and second.strategy == "[fuse] fuse it" and second.fitness == 0.0
    assert second.result.reason.startswith("Incorrect")
    assert store.prompt(run, 2) == "the prompt"
    counts = store.counts(run)
    assert counts["correct"] == 1 and counts["incorrect"] == 1 and counts["proposed"] == 1 and counts["crash"] == 0

    lineage = store.lineage(run)
    assert [n["id"] for n in lineage["nodes"]] == [1, 2, 3]
    assert {(e["from"], e["to"]) for e in lineage["edges"]} == {(1, 2), (1, 3)}
    json.dumps(lineage)  # plain JSON
    dot = store.lineage_dot(run)
    assert dot.startswith("digraph") and "c1 -> c2;" in dot and "c1 -> c3;" in dot and "palegreen" in dot


def test_a_candidate_is_evaluated_at_most_once(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    run = store.create_run("/t.py", {})
    ind = store.add_proposed(run, Proposal("x", "template"), parent_id=None)
    store.record_result(run, ind.id, _correct(1.0))
    with pytest.raises(ValueError, match="not awaiting evaluation"):
        store.record_result(run, ind.id, _correct(0.5))
    assert store.archive(run)[0].result.timing.ms == 1.0


def test_ids_are_per_run_and_rows_are_committed_immediately(tmp_path):
    path = tmp_path / "run.sqlite"
    store = RunStore(path)
    r1, r2 = store.create_run("/a.py", {}), store.create_run("/b.py", {})
    assert store.add_proposed(r1, Proposal("a", "t"), None).id == 1
    assert store.add_proposed(r1, Proposal("b", "t"), 1).id == 2
    assert store.add_proposed(r2, Proposal("c", "t"), None).id == 1
    # another connection (as a killed process leaves it) sees every row without a close or commit call
    rows = sqlite3.connect(path).execute("SELECT run_id, id, status FROM candidates ORDER BY run_id, id").fetchall()
    assert sorted(rows) == sorted([(r1, 1, "proposed"), (r1, 2, "proposed"), (r2, 1, "proposed")])
    store.set_status(r1, "finished", "budget spent")
    assert store.run(r1).status == "finished" and store.run(r1).stop_reason == "budget spent"
    assert [r.id for r in store.runs()] == [r1, r2]
    with pytest.raises(RunNotFound):
        store.run("nope")
