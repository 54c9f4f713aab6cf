"""`kernelwright optimize` with no LLM configured: the template and parameter operators only, on a tiny
elementwise task in the Triton interpreter. It must stay within its budget, say once that no LLM is used,
and leave a best.py that the evaluator accepts as correct."""
import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.runstore import RunStore
from tools.results import EvalJob, TaskSpec

TASK = str(Path(__file__).parent / "fixtures" / "task_scale_shift.py")


@pytest.mark.slow
def test_optimize_without_llm_finishes_within_budget_and_writes_a_correct_best(tmp_path, capsys, monkeypatch,
                                                                               warm_executor):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELWRIGHT_KB_DIR", str(tmp_path / "kb"))
    out = tmp_path / "out"
    assert main(["optimize", TASK, "--budget", "3", "--out", str(out), "--policy", "tree"]) == 0
    printed = capsys.readouterr().out

    assert printed.count("No LLM configured") == 1
    assert "template and parameter operators only" in printed
    assert "[3/3]" in printed and "[4/" not in printed
    assert "stopped: evaluation budget of 3 spent" in printed

    report = json.loads((out / "report.json").read_text())
    assert report["evaluated"] == 3 and report["llm"] is None and report["policy"] == "tree"
    assert sum(report["counts"].values()) == 3 and report["counts"]["correct"] >= 1
    assert report["best"]["interpreted"] is True and report["best"]["speedup_vs_eager"] is None
    assert report["slower_than_eager"] is None  # interpreter times: no claim either way
    operators = {n["operator"] for n in report["lineage"]["nodes"]}
    assert operators <= {"template", "param"}
    assert (out / "lineage.dot").read_text().startswith("digraph")
    final = report["final_check"]  # the best again: 6 trials from a fresh seed, 2 deep sets on a CPU
    assert final["candidate"] == report["best"]["id"] and final["deep"]["sets"] == 2 and final["demoted"] == []
    assert {"setup", "verify", "deep"} <= set(final["phases"])  # where its seconds went, in the worker

    best = (out / "best.py").read_text()
    result = warm_executor.submit(EvalJob(TaskSpec(TASK, name="scale_shift"), best, timeout_s=120, trials=1,
                                          profile=False)).result()
    assert result.correct, result.reason


def gpu_run(tmp_path, ms: float, eager_ms: float, shapes: list | None = None):
    """A finished run whose only correct candidate took `ms` on a GPU against eager's `eager_ms` (results as
    the evaluator writes them on a GPU; this machine has none), verified at `shapes` (ShapeChecks) if given."""
    from agent.context import Run, RunConfig
    from agent.interfaces import Proposal, TaskContext
    from agent.runstore import RunStore
    from tools.results import EvalResult, Timing
    store = RunStore(tmp_path / "run.sqlite")
    run_id = store.create_run(TASK, RunConfig().to_json())
    source = (Path(__file__).parent / "fixtures" / "scale_shift_good.py").read_text()
    cand = store.add_proposed(run_id, Proposal(source, "template"), None)
    timing = Timing(ms=ms, eager_ms=eager_ms, compile_ms=0.8, floor_ms=0.1, speedup_vs_eager=eager_ms / ms,
                    speedup_vs_compile=0.8 / ms, floor_fraction=0.1 / ms, spread_pct=0.5, interpreted=False)
    store.record_result(run_id, cand.id, EvalResult("correct", "Correct on every trial.", device="NVIDIA H200",
                                                    timing=timing, kernel_ms={"_row_kernel0": ms},
                                                    shapes=shapes or []))
    task = TaskContext("scale_shift", "", {}, "cuda:NVIDIA H200 (sm_90)", "sm_90")
    return Run(config=RunConfig(), run_id=run_id, task=task, spec=TaskSpec(TASK, name="scale_shift"), executor=None,
               policy=None, operators=[], store=store), source


def test_a_best_kernel_slower_than_eager_is_said_plainly_and_marked(tmp_path, capsys):
    from agent.optimize import write_outputs
    from tools.rules import check_source
    run, source = gpu_run(tmp_path, ms=2.0, eager_ms=1.0)
    best = write_outputs(run, tmp_path / "out", "evaluation budget of 1 spent", None, None)
    printed = capsys.readouterr().out
    assert best is not None and "No faster kernel; keep PyTorch." in printed and "(0.50x)" in printed
    first, rest = (tmp_path / "out" / "best.py").read_text().split("\n", 1)
    assert first.startswith("# SLOWER THAN EAGER PYTORCH: 0.50x (2 ms against 1 ms on NVIDIA H200)")
    assert rest == source and check_source(first + "\n" + rest, Path(TASK).read_text()) is None  # still a candidate eval accepts
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["slower_than_eager"] is True and report["best"]["speedup_vs_eager"] == 0.5
    assert report["best"]["kernel_ms"] == {"_row_kernel0": 2.0} and "compile_error" not in report["best"]


def test_a_faster_kernel_is_written_as_it_is(tmp_path, capsys):
    from agent.optimize import write_outputs
    run, source = gpu_run(tmp_path, ms=0.5, eager_ms=1.0)
    write_outputs(run, tmp_path / "out", "evaluation budget of 1 spent", None, None)
    assert "2.00x eager" in capsys.readouterr().out
    assert (tmp_path / "out" / "best.py").read_text() == source
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["slower_than_eager"] is False and report["best"]["shapes"] is None


def test_the_report_gives_the_best_kernels_speedups_at_each_shape_set(tmp_path, capsys):
    from agent.optimize import write_outputs
    from tools.results import ShapeCheck
    shapes = [ShapeCheck({"rows": 64}, "correct", "Correct on every trial.", ms=0.5, eager_ms=1.0, compile_ms=0.8),
              ShapeCheck({"rows": 1}, "correct", "Correct on every trial.", ms=0.5, eager_ms=0.25)]
    run, _ = gpu_run(tmp_path, ms=0.5, eager_ms=1.0, shapes=shapes)
    write_outputs(run, tmp_path / "out", "evaluation budget of 1 spent", None, None)  # through the run store's JSON
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("per shape set:")
    assert lines[at + 1:at + 4] == ["  rows=64: 0.5000 ms, 2.00x vs eager, 1.60x vs torch.compile",
                                    "  rows=1: 0.5000 ms, 0.50x vs eager, n/a vs torch.compile",
                                    "  geomean over the 2 shape sets with GPU times: 1.00x vs eager, 1.60x vs "
                                    "torch.compile"]
    figures = json.loads((tmp_path / "out" / "report.json").read_text())["best"]["shapes"]
    assert [s["shapes"] for s in figures["sets"]] == [{"rows": 64}, {"rows": 1}] and figures["timed"] == 2
    assert figures["sets"][1]["vs_eager"] == 0.5 and figures["sets"][1]["vs_compile"] is None
    assert figures["geomean"]["eager"] == pytest.approx(1.0) and figures["geomean"]["compile"] == pytest.approx(1.6)


def test_why_no_candidate_was_correct_is_the_commonest_failure():
    from agent.interfaces import Individual
    from agent.optimize import common_failure
    from tools.results import EvalResult
    results = [EvalResult("incorrect", "Incorrect: first."), EvalResult("crash", "The candidate crashed: x."),
               EvalResult("incorrect", "Incorrect: latest."), EvalResult("correct", "Correct on every trial.")]
    archive = [Individual(i, "", "template", None, result=r) for i, r in enumerate(results)]
    assert common_failure(archive) == "Incorrect: latest."
    assert common_failure(archive[3:]) is None


def test_a_best_that_fails_the_final_check_is_demoted_and_the_next_best_reported(tmp_path, capsys, warm_executor):
    """A wrong kernel stored as the fastest correct one (as a cheat that got through the search's trials would
    be) fails the final check: it is demoted in the run store, with the check's verdict, and the next best,
    which passes, is the one reported."""
    from dataclasses import replace

    from agent.interfaces import Proposal
    from agent.optimize import best_of_store, final_check, final_check_line
    from tools.results import EvalResult, Timing
    run, good = gpu_run(tmp_path, 2.0, 1.0)
    wrong = run.store.add_proposed(run.run_id, Proposal(
        (Path(__file__).parent / "fixtures" / "scale_shift_wrong.py").read_text(), "template"), None).id
    run.store.record_result(run.run_id, wrong, EvalResult("correct", "Correct on every trial.", device="NVIDIA H200",
                                                          timing=Timing(1.0, 1.0, 0.8, 0.1, 1.0, 0.8, 0.1, 0.5, False)))
    run = replace(run, executor=warm_executor, say=print)
    assert best_of_store(run.store, run.run_id).id == wrong

    final = final_check(run)
    assert final["candidate"] == 1 and final["demoted"][0]["id"] == wrong, final
    assert final["demoted"][0]["verdict"] == "incorrect" and final["deep"]["sets"] == 2
    assert f"final check: #{wrong} failed" in capsys.readouterr().out
    assert final_check_line(final).startswith(f"final check: #1 passed 6 more trials from a fresh seed and 2 deep "
                                              f"input sets (worst relative error ")
    assert f"; it demoted #{wrong} (incorrect: " in final_check_line(final)
    demoted = next(i for i in run.store.archive(run.run_id) if i.id == wrong)
    assert demoted.fitness == 0 and demoted.result.reason.startswith("the final check (6 trials from a fresh seed")
    assert best_of_store(run.store, run.run_id).source == good


def test_a_task_that_cannot_judge_a_result_stops_the_search_with_exit_2(tmp_path, capsys, monkeypatch):
    """Rounding decides the chaotic fixture's output (tools/verify.py: CHAOTIC): the first evaluation says so,
    the search stops with one sentence and exit 2, and the run store keeps why."""
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    task, out = str(Path(__file__).parents[1] / "tools" / "fixtures" / "task_chaotic.py"), tmp_path / "out"
    assert main(["optimize", task, "--budget", "3", "--no-knowledge", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "The task could not be used: The task cannot judge a result on these inputs" in err
    assert "as far off as a zero output" in err
    store = RunStore(out / "run.sqlite")
    (record,) = store.runs()
    store.close()
    assert (record.status, record.stop_reason) == ("finished", "the task cannot judge a candidate")
