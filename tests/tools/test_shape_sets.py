"""Verification over shape sets (issue 16, TaskSpec.shape_sets, `--shapes`): the evaluator re-instantiates the
task at each set of its shape globals, runs the normal trials there and reports a verdict per set; a kernel right
only at its tuned batch fails, and a candidate that takes its fallback at another batch is reported as such."""
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME
from tools.executor import ExecutorConfig, LocalExecutor
from tools.results import EvalJob, EvalResult, TaskSpec
from tools.task import TaskError, check_spec, parse_shape_sets

TASK = (Path(__file__).resolve().parents[1] / "agent" / "fixtures" / "shapes_bias_relu.py").read_text()

SETS = [{"batch_size": 1}, {"batch_size": 7}, {"batch_size": 33}]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shapes")
    task = folder / "task.py"
    task.write_text(TASK)
    analysis = analyze(str(task), small=True, arch="cpu")
    t = BY_NAME["elementwise"]
    dynamic = t.render(analysis, {**t.default(analysis), "shapes": "dynamic"})
    static = t.render(analysis, t.default(analysis))
    grid = "(kw_batch * 111 + 1023) // 1024"
    assert grid in dynamic
    baked = dynamic.replace(grid, "(12 * 111 + 1023) // 1024")  # the grid of the tuned batch: 2048 elements
    spec = TaskSpec(str(task), shape_sets=SETS)
    jobs = [EvalJob(spec, source, trials=2, profile=False) for source in (dynamic, static, baked)]
    with LocalExecutor(ExecutorConfig(workers_per_device=3)) as ex:
        return [EvalResult.from_json(r.to_json()) for r in ex.map(jobs)]  # through the wire format


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
