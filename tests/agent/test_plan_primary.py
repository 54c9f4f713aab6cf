"""The kernel a plan tunes (base.plan's primary) is the one with the most work, but a reduction beside a larger
flat kernel (a cat returned with a row's sum), which no template took as the tuned one: such a task had no
template at all. Candidates run in the Triton interpreter (fixtures/tpl_runner.py)."""
import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base, matching
from agent.templates.program import work

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return {body}


def get_inputs():
    return [torch.randn(6, 300), torch.randn(6, 300)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body, template", [("torch.cat([x, y], 1), y.sum(-1)", "rowwise"),
                                            ("x * 2.0, y[:, :150].amax(-1)", "rowwise"),
                                            ("torch.cat([x, y], 1), y.sum(0)", "axis_reduce")])
def test_a_flat_kernel_beside_a_reduction_leaves_the_reduction_to_tune(body, template, tmp_path, runner):
    task = tmp_path / "task.py"
    task.write_text(TASK.format(body=body))
    a = analyze(str(task), small=False)
    assert [t.NAME for t in matching(a)] == [template]
    plan = base.plan(a)
    assert plan.main.layout in ("row", "col") and max(plan.kernels, key=work).layout == "flat"
    chosen = BY_NAME[template]
    for p in chosen.variants(a):
        runner.run_ok(task, chosen.render(a, p))
