"""An output that reshapes a computed value's whole buffer (schedule._Scheduler.reshaped) is returned as a view
of that buffer, not copied by a kernel of its own; where the value is read elsewhere too, or under dynamic
shapes, the copy stays. Candidates run in the Triton interpreter (fixtures/tpl_runner.py)."""
import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        {body}


def get_inputs():
    return [torch.randn(3, 5, 7, 24, dtype=torch.{dtype}), torch.randn(24, 20, dtype=torch.{dtype})]


def get_init_inputs():
    return []
"""


def render(tmp_path, body: str, dtype: str = "float32", **params) -> tuple:
    task = tmp_path / "task.py"
    task.write_text(TASK.format(body=body, dtype=dtype))
    a = analyze(str(task), small=False)
    gemm = BY_NAME["gemm"]
    p = {**gemm.default(a), **params}
    return task, base.plan(a, p), gemm.render(a, p)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_output_reshaping_a_gemm_result_is_a_view_of_its_buffer(dtype, tmp_path, runner):
    operands = {"operands": "fp32"} if dtype == "bfloat16" else {}  # the interpreter's tl.dot takes no bf16
    task, plan, source = render(tmp_path, 'return torch.einsum("bijl,lk->bijk", A, B)', dtype, **operands)
    assert [k.kind for k in plan.kernels] == ["gemm"]  # no kernel copying the GEMM's output into the result
    assert "return buf_v" in source and ".view((3, 5, 7, 20))" in source
    out = runner.run(task, source)  # the result's shape and dtype are the reference's (bf16: stored as bf16)
    assert out["error"] is None, out["error"]
    assert out["rel_errors"][0] <= (1e-5 if dtype == "float32" else 1e-2), out


def test_a_value_read_again_is_copied_into_the_reshaped_output(tmp_path, runner):
    body = "y = A.reshape(105, 24) @ B\n        return y.view(3, 5, 7, 1, 20).transpose(3, 4).reshape(3, 5, 7, 20), y.sum()"
    task, plan, source = render(tmp_path, body)
    assert "return (buf_v" in source and ".view(" not in source.split("class ModelNew")[1]
    assert len(plan.kernels) == 3  # the GEMM, its sum, and the copy of its output into the result
    out = runner.run(task, source)
    assert out["error"] is None and max(out["rel_errors"]) <= 1e-5, out


def test_a_vendor_gemm_that_would_be_the_whole_task_is_refused_in_a_sentence(tmp_path):
    """With the copy gone, the einsum is its GEMM alone: impl torch would leave the candidate no Triton work."""
    task = tmp_path / "task.py"
    task.write_text(TASK.format(body='return torch.einsum("bijl,lk->bijk", A, B)', dtype="float32"))
    a = analyze(str(task), small=False)
    gemm = BY_NAME["gemm"]
    assert base.invalid(a, {**gemm.default(a), "impl": "torch"}) == \
        "impl torch leaves no Triton kernel: the vendor GEMM would be all of the task's work"
    assert gemm.space(a)["impl"] == ["triton"]
