"""optimize --shapes: the search builds shape-general kernels where the plan has them, so its candidates pass
at every shape set (the evaluator verifies each: tests/tools/test_shape_sets.py)."""
import json

from agent.cli import main as run
from agent.interfaces import TaskContext
from agent.operators.template import TemplateOperator

TASK = """
import torch
import torch.nn as nn

batch_size = 12
features = 37


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
"""


def test_the_template_operator_builds_shape_general_kernels_for_shape_sets():
    task = TaskContext("softmax", TASK, {"small": True, "shapes": {}, "shape_sets": [{"batch_size": 7}]}, "cpu", "cpu")
    general = TemplateOperator().propose(task, [], 2)
    static = TemplateOperator().propose(TaskContext("softmax", TASK, {"small": True, "shapes": {}}, "cpu", "cpu"),
                                        [], 2)
    assert general and all(p.params["shapes"] == "dynamic" for p in general)
    assert static and not any("shapes" in p.params for p in static)


def test_optimize_with_shapes_finds_a_kernel_right_at_each(tmp_path, monkeypatch, capsys):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    task = tmp_path / "softmax.py"
    task.write_text(TASK)
    out = tmp_path / "out"
    assert run(["optimize", str(task), "--shapes", "batch_size=1,7", "--budget", "1", "--no-knowledge",
                "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["best"]["verdict"] == "correct"
    assert "'shapes': 'dynamic'" in (out / "best.py").read_text()
    figures = report["best"]["shapes"]
    assert [s["shapes"]["batch_size"] for s in figures["sets"]] == [12, 1, 7]
    timed = not report["best"]["interpreted"]  # GPU times at each set; none in the interpreter
    assert figures["timed"] == (3 if timed else 0) and ("per shape set:" in capsys.readouterr().out) == timed
