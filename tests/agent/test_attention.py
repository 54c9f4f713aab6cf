"""Scaled-dot-product attention as one flash-attention kernel, in the interpreter at irregular sizes (37 queries,
53 keys, head size 48, fixtures/attention_kinds.py): the call traces to one node, the candidate launches the
attention kernel instead of matmul + softmax + matmul, and it matches the reference, plain and causal, with a
boolean mask (a query that sees nothing gives 0), a computed additive mask, grouped-query heads, head size 96,
inside nn.MultiheadAttention, and in bfloat16 through the real evaluator. Attention written out as
softmax(q @ k^T * c) @ v becomes the same kernel, unless its weights are returned.

    python -m pytest -q tests/agent/test_attention.py
"""
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, matching
from agent.templates.base import plan

FIXTURES = Path(__file__).parent / "fixtures"


def task_of(kind: str, folder: Path) -> Path:
    """attention_kinds.py with `kind` set in its source (a candidate embeds the task's source as it is)."""
    path = folder / f"attention_{kind}.py"
    path.write_text((FIXTURES / "attention_kinds.py").read_text().replace('kind = "plain"', f'kind = "{kind}"'))
    return path


def lowered(kind: str, folder: Path):
    """(task path, analysis) of a kind whose attention is one node and one attention kernel, no softmax pass."""
    task = task_of(kind, folder)
    a = analyze(str(task), small=True)
    assert [o.target for o in a.ops if o.kind == "attention"] == ["kernelwright.attention.default"]
    assert a.family == "attention" and a.total_flops > 0
    kinds = [k.kind for k in plan(a).kernels]
    assert kinds.count("attention") == 1
    assert not any(n.op == "reduce" for n in plan(a).program.nodes)  # no softmax outside the kernel
    return task, a


def run_ok(runner, task: Path, source: str, bound: float = 1e-5) -> None:
    assert "_attention_kernel" in source.split("class ModelNew")[1]  # launched, not only defined
    runner.run_ok(task, source, bound)


@pytest.mark.parametrize("kind", ["plain", "causal", "bool_mask", "additive", "gqa", "head96"])
def test_attention_is_one_kernel_and_matches(kind, runner, tmp_path):
    task, a = lowered(kind, tmp_path)
    assert [t.NAME for t in matching(a)] == ["attention"]
    t = BY_NAME["attention"]
    variants = t.variants(a)
    assert len({(p["BLOCK_M"], p["BLOCK_N"]) for p in variants}) > 1
    for params in variants[:2]:  # the default, and a key step of 32 (two steps over 53 keys)
        source = t.render(a, params)
        if kind == "causal":  # a program stops at its last query's diagonal
            assert "tl.minimum(53, (pid_m + 1) * BLOCK_M)" in source
        run_ok(runner, task, source)


def test_multi_head_attention_module(runner, tmp_path):
    """Projections around the attention (GEMM kernels), the heads strided views of their output."""
    task, a = lowered("mha", tmp_path)
    t = matching(a)[0]
    run_ok(runner, task, t.render(a, t.default(a)))


@pytest.mark.parametrize("kind", ["handwritten", "weights"])
def test_written_out_attention(kind, runner, tmp_path):
    """The GEMM, softmax, GEMM chain is matched in the lowered program; returned weights keep it as it is."""
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    kinds = [k.kind for k in plan(a).kernels]
    assert kinds.count("attention") == (1 if kind == "handwritten" else 0), kinds
    t = matching(a)[0]
    source = t.render(a, t.default(a))
    if kind == "handwritten":
        run_ok(runner, task, source)
        return
    out = runner.run(task, source)
    assert out["error"] is None and len(out["rel_errors"]) == 2 and max(out["rel_errors"]) <= 1e-5, out


def test_bfloat16_passes_the_evaluator(tmp_path, warm_executor):
    """Causal bf16 through the real evaluator. Products of fp32 operands: the interpreter's tl.dot reads
    bfloat16 as integers (a GPU runs the default's bf16 tensor-core products)."""
    from tools.results import EvalJob, TaskSpec
    task, a = lowered("bf16", tmp_path)
    t = BY_NAME["attention"]
    assert t.space(a)["operands"] == ["input", "fp32"] and t.default(a)["operands"] == "input"
    source = t.render(a, {**t.default(a), "operands": "fp32", "BLOCK_N": 32})
    assert ".to(tl.float32)" in source and "tl.minimum(53, (pid_m + 1) * BLOCK_M)" in source
    job = EvalJob(TaskSpec(path=str(task), small=True), source, trials=1, profile=False, timeout_s=120)
    result = warm_executor.submit(job).result()
    assert result.verdict == "correct", result.reason
