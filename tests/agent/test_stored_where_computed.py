"""A returned value that is pointwise of the task's inputs (a residual add returned beside the norm of it) is
stored by the kernel that computes it anyway (schedule._Scheduler.reader), not by a flat kernel of its own that
reads those inputs again. Candidates run in the Triton interpreter (fixtures/tpl_runner.py)."""
import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(300))

    def forward(self, x, residual):
        {body}


def get_inputs():
    return [torch.randn(6, 300), torch.randn(6, 300)]


def get_init_inputs():
    return []
"""
ADD_RMSNORM = ("h = x + residual\n"
               "        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight, h")


def analyzed(tmp_path, body: str):
    task = tmp_path / "task.py"
    task.write_text(TASK.format(body=body))
    return task, analyze(str(task), small=False)


def test_each_rowwise_form_stores_the_residual_sum_where_it_normalizes_it(tmp_path, runner):
    task, a = analyzed(tmp_path, ADD_RMSNORM)
    rowwise = BY_NAME["rowwise"]
    forms = rowwise.variants(a) + [{**rowwise.variants(a)[1], "BLOCK_R": 128, "tail_first": 0}]  # chunks, a tail
    assert {p["mode"] for p in forms} == {"one_pass", "looped"}
    for p in forms:
        kernels = base.plan(a, p).kernels
        assert len(kernels) == 1 and len(kernels[0].stores) == 2, p  # the norm and h, in one pass over x, residual
        runner.run_ok(task, rowwise.render(a, p))


def test_a_column_sum_stores_the_product_it_sums(tmp_path, runner):
    task, a = analyzed(tmp_path, "h = x * residual\n        return h, h.sum(0)")
    template = BY_NAME["axis_reduce"]
    p = template.variants(a)[0]
    kernels = base.plan(a, p).kernels
    assert [len(k.stores) for k in kernels] == [2]
    runner.run_ok(task, template.render(a, p))


@pytest.mark.parametrize("body", ["return x + residual, (x * 2.0).sum(-1)",  # read by no kernel
                                  "h = x + residual\n        return h, h.reshape(6, 3, 100).sum(-1)"])  # another shape
def test_a_value_no_kernel_computes_at_its_every_element_keeps_its_own_kernel(body, tmp_path, runner):
    task, a = analyzed(tmp_path, body)
    rowwise = BY_NAME["rowwise"]
    p = rowwise.variants(a)[0]
    kernels = base.plan(a, p).kernels
    assert sorted(len(k.stores) for k in kernels) == [1, 1]
    runner.run_ok(task, rowwise.render(a, p))
