"""Verification over shape sets (issue 16, TaskSpec.shape_sets, `--shapes`): the evaluator re-instantiates the
task at each set of its shape globals, runs the normal trials there and reports a verdict per set; a kernel right
only at its tuned batch fails, and a candidate that takes its fallback at another batch is reported as such. On a
GPU each set is timed against its own eager and torch.compile baselines; on a CPU none is."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME
from tools.cli_eval import summary
from tools.results import Baselines, EvalJob, EvalResult, ShapeCheck, TaskSpec, Timing
from tools.score import shape_speedups
from tools.task import TaskError, check_spec, parse_shape_sets

TASK = (Path(__file__).resolve().parents[1] / "agent" / "fixtures" / "shapes_bias_relu.py").read_text()

SETS = [{"batch_size": 1}, {"batch_size": 7}, {"batch_size": 33}]


def candidates(folder: Path) -> tuple[Path, str, str, str]:
    """The task file, and three elementwise-template candidates for it: shape-general, built for the task's own
    batch (it takes its fallback at the others), and shape-general but with the tuned batch's grid baked in."""
    task = folder / "task.py"
    task.write_text(TASK)
    analysis = analyze(str(task), small=True, arch="cpu")
    t = BY_NAME["elementwise"]
    dynamic = t.render(analysis, {**t.default(analysis), "shapes": "dynamic"})
    static = t.render(analysis, t.default(analysis))
    grid = "(kw_batch * 111 + 1023) // 1024"
    assert grid in dynamic
    baked = dynamic.replace(grid, "(12 * 111 + 1023) // 1024")  # the grid of the tuned batch: 2048 elements
    return task, dynamic, static, baked


@pytest.fixture(scope="module")
def results(tmp_path_factory, warm_executor):
    task, dynamic, static, baked = candidates(tmp_path_factory.mktemp("shapes"))
    spec = TaskSpec(str(task), shape_sets=SETS)
    jobs = [EvalJob(spec, source, trials=2, profile=False) for source in (dynamic, static, baked)]
    jobs.append(EvalJob(spec, dynamic, trials=1))  # profiled
    return [EvalResult.from_json(r.to_json()) for r in warm_executor.map(jobs)]  # through the wire format


def test_a_dynamic_kernel_is_verified_at_every_shape_set(results):
    r = results[0]
    assert r.verdict == "correct" and "3 more shape sets" in r.reason, r.reason
    assert [c.shapes for c in r.shapes] == [{"batch_size": 12}] + SETS
    assert all(c.verdict == "correct" and not c.fallback for c in r.shapes)


def test_a_static_candidate_is_reported_as_taking_its_fallback(results):
    r = results[1]
    assert r.verdict == "rejected" and r.reason.startswith("At batch_size=1: It took its fallback"), r.reason
    own, *others = r.shapes
    assert own.verdict == "correct" and not own.fallback
    assert all(c.verdict == "rejected" and c.fallback for c in others)
    assert "x of shape (12, 3, 37)" in others[0].reason  # the guard it broke, from its warning


def test_a_kernel_right_only_at_small_batches_fails_where_it_is_wrong(results):
    r = results[2]
    assert r.verdict == "incorrect" and r.reason.startswith("At batch_size=33:"), r.reason
    assert [c.verdict for c in r.shapes] == ["correct", "correct", "correct", "incorrect"]
    assert not any(c.fallback for c in r.shapes)


def test_shapes_option_values(tmp_path):
    assert parse_shape_sets(["batch_size=1,7,64"]) == [{"batch_size": 1}, {"batch_size": 7}, {"batch_size": 64}]
    assert parse_shape_sets(["batch_size=1,7", "dim=33"]) == [{"batch_size": 1, "dim": 33},
                                                              {"batch_size": 7, "dim": 33}]
    assert parse_shape_sets(None) == []
    for bad in (["batch_size"], ["batch_size=a"], ["=1"], ["b=1,2", "d=1,2,3"], ["b=1", "b=2"]):
        with pytest.raises(TaskError):
            parse_shape_sets(bad)
    task = tmp_path / "task.py"
    task.write_text(TASK)
    check_spec(TaskSpec(str(task), shape_sets=SETS))
    with pytest.raises(TaskError, match="not a global"):
        check_spec(TaskSpec(str(task), shape_sets=[{"batchsize": 3}]))


def test_on_a_cpu_nothing_is_timed_at_the_shape_sets(results):
    r = results[3]
    if not r.timing.interpreted:
        pytest.skip("a GPU times every shape set: test_on_a_gpu_each_shape_set_is_timed_against_its_baselines")
    assert r.correct and len(r.shapes) == 4, r.reason
    assert all(c.ms is None and c.eager_ms is None and c.compile_ms is None for c in r.shapes)
    text = summary(r)
    assert "batch_size=33: CORRECT" in text and "vs eager" not in text and "geomean" not in text


def gpu_result(on_gpu: bool = True) -> EvalResult:
    """An evaluation at the task's own batch and two more as a GPU writes it (fabricated: this machine has none;
    the last set has no torch.compile time); `on_gpu` False: as the interpreter writes it, with no times."""
    t = (lambda ms, eager, compiled: dict(ms=ms, eager_ms=eager, compile_ms=compiled)) if on_gpu else (
        lambda *_: {})
    checks = [ShapeCheck({"batch_size": 12}, "correct", "Correct on every trial.", rel_err=1e-7, **t(0.5, 1.0, 0.8)),
              ShapeCheck({"batch_size": 1}, "correct", "Correct on every trial.", rel_err=2e-7, **t(0.25, 1.0, 0.5)),
              ShapeCheck({"batch_size": 64}, "correct", "Correct on every trial.", **t(2.0, 1.0, None))]
    timing = Timing(0.5, 1.0, 0.8, 0.1, 2.0, 1.6, 0.2, 0.5, interpreted=not on_gpu)
    at_shapes = {"batch_size=1": [1.0, 0.5], "batch_size=64": [1.0, None]} if on_gpu else {}
    return EvalResult("correct", "Correct on every trial at the task's own shapes and at 2 more shape sets.",
                      device="NVIDIA H200" if on_gpu else "cpu (Triton interpreter)", interpreted=not on_gpu,
                      verified_on="gpu" if on_gpu else "interpreter", timing=timing, shapes=checks,
                      baselines=Baselines(1.0, 0.8, "NVIDIA H200", at_shapes=at_shapes))


def test_per_shape_speedups_and_their_geomean_over_the_timed_sets():
    figures = shape_speedups(gpu_result().shapes)
    assert [(s["vs_eager"], s["vs_compile"]) for s in figures["sets"]] == [(2.0, 1.6), (4.0, 2.0), (0.5, None)]
    assert figures["timed"] == 3 and figures["geomean"]["eager"] == pytest.approx(4.0 ** (1 / 3))
    assert figures["geomean"]["compile"] == pytest.approx(3.2 ** 0.5)  # over the two sets with a compile time
    cpu = shape_speedups(gpu_result(on_gpu=False).shapes)
    assert cpu["timed"] == 0 and cpu["geomean"] == {"eager": None, "compile": None}
    fallback = shape_speedups([replace(gpu_result().shapes[0], verdict="rejected", fallback=True)])
    assert fallback["timed"] == 0  # no kernel ran there: no speedup, whatever was recorded


def test_eval_summary_gives_each_shape_sets_speedups_and_their_geomean():
    lines = summary(gpu_result()).splitlines()
    assert ("  batch_size=12: CORRECT (relative error 1.00e-07); 0.5000 ms, 2.00x vs eager, 1.60x vs torch.compile"
            in lines)
    assert "  batch_size=64: CORRECT; 2.0000 ms, 0.50x vs eager, n/a vs torch.compile" in lines
    assert "  geomean over the 3 shape sets with GPU times: 1.59x vs eager, 1.79x vs torch.compile" in lines
    cpu = summary(gpu_result(on_gpu=False))
    assert "  batch_size=1: CORRECT (relative error 2.00e-07)" in cpu.splitlines()
    assert "vs eager" not in cpu and "geomean" not in cpu  # interpreter times are never speedups


def test_shape_times_and_baselines_round_trip_through_json():
    r = gpu_result()
    back = EvalResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back == r and back.shapes[2].compile_ms is None and back.baselines.at_shapes["batch_size=1"] == [1.0, 0.5]
    old = r.to_json()  # a result written before shape sets were timed
    for c in old["shapes"]:
        del c["ms"], c["eager_ms"], c["compile_ms"]
    del old["baselines"]["at_shapes"]
    assert EvalResult.from_json(old).shapes[0].ms is None


@pytest.mark.gpu
def test_on_a_gpu_each_shape_set_is_timed_against_its_baselines(tmp_path):
    from tools.evaluate import evaluate
    task, dynamic, _, _ = candidates(tmp_path)
    spec = TaskSpec(str(task), shape_sets=SETS)
    first = evaluate(EvalJob(spec, dynamic, trials=2))
    assert first.correct and not first.timing.interpreted, first.reason
    assert all(c.ms > 0 and c.eager_ms > 0 for c in first.shapes)
    assert (first.shapes[0].ms, first.shapes[0].eager_ms) == (first.timing.ms, first.timing.eager_ms)
    assert sorted(first.baselines.at_shapes) == ["batch_size=1", "batch_size=33", "batch_size=7"]
    known = replace(first.baselines, at_shapes={k: [123.0, None] for k in first.baselines.at_shapes})
    again = evaluate(EvalJob(spec, dynamic, trials=2, baselines=known))  # later in the run: measured once
    assert again.correct and [c.eager_ms for c in again.shapes[1:]] == [123.0] * 3, again.reason
    assert "geomean over the 4 shape sets with GPU times" in summary(again)


def test_a_worker_verifies_shape_sets_for_one_job_after_another(tmp_path, warm_executor):
    """Each job loads the task at each shape set under a module name of its own (kw_task_shapes0, ...); the
    next job in the same worker must not find the last one's there, or the clean check rejects its candidate
    for a module replaced in sys.modules."""
    task, dynamic, _, _ = candidates(tmp_path)
    jobs = [EvalJob(TaskSpec(str(task), shape_sets=SETS[:1]), dynamic, trials=1, profile=False) for _ in range(3)]
    verdicts = [(r.verdict, r.reason) for r in warm_executor.map(jobs)]  # one worker slot
    assert all(v == "correct" for v, _ in verdicts), verdicts
