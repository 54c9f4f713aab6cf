"""bf16 and fp16 outputs are judged against the math: a candidate passes when its error against a golden fp32
run of the reference is within a small factor of PyTorch's own error in the dtype (tools/compare.py)."""
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from tools.compare import LOW_FACTOR, LOW_FLOOR, TOLERANCES, UNIT_ROUNDOFF, Failed, compare
from tools.results import EvalJob, TaskSpec
from tools.verify import Checked

FIXTURES = Path(__file__).parent / "fixtures"

# candidate, task, the task list's dtype (None: the task's own tensors decide), verdict, fragments of the reason:
# from fixtures/cases.toml
CASES = [(c["candidate"], c["task"], c.get("dtype"), c["verdict"], c["reason"])
         for c in tomllib.loads((FIXTURES / "cases.toml").read_text())["case"]
         if c["test"] == "test_low_precision.py::test_verdict"]


@pytest.fixture(scope="module")
def results(warm_executor):
    jobs = [EvalJob(TaskSpec(str(FIXTURES / task), dtype=dtype), (FIXTURES / "candidates" / candidate).read_text(),
                    trials=3, profile=False) for candidate, task, dtype, _, _ in CASES]
    return warm_executor.map(jobs)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_verdict(results, i):
    _, _, _, verdict, fragments = CASES[i]
    r = results[i]
    assert (r.verdict, all(f in r.reason for f in fragments)) == (verdict, True), r.reason


def test_a_bf16_task_is_judged_by_its_tensors_dtype(results):
    """task_scan_bf16_loop makes bf16 tensors itself: the error figure is bf16's rounding, against the fp32 run."""
    r = results[0]
    u = UNIT_ROUNDOFF[torch.bfloat16]
    assert 0.1 * u < r.rel_err < LOW_FLOOR * u, r.rel_err


def _bf16_case(n: int = 4096, seed: int = 0):
    """A long running sum: the fp32 run, PyTorch's bf16 result (fp32 accumulator) and the inputs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, n, generator=g).bfloat16()
    golden = torch.cumsum(x.float(), -1)
    return x, golden, torch.cumsum(x, -1)


def test_rounding_once_passes_even_by_truncation():
    """An fp32 result rounded to bf16 by truncation (Triton's interpreter) errs by up to 2u: inside the floor."""
    x, golden, reference = _bf16_case()
    truncated = (golden.view(torch.int32) & ~0xFFFF).view(torch.float32).bfloat16()  # exact: low bits dropped
    assert torch.all(truncated.float().abs() <= golden.abs())
    compare(truncated, reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)
    compare(golden.bfloat16(), reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)


def test_a_bf16_accumulator_fails_where_pytorch_keeps_fp32():
    x, golden, reference = _bf16_case(n=512)
    acc = torch.zeros(x.shape[0], dtype=torch.bfloat16)
    sloppy = torch.empty_like(x)
    for j in range(x.shape[1]):
        acc = (acc.float() + x[:, j].float()).bfloat16()
        sloppy[:, j] = acc
    checked = Checked()
    with pytest.raises(Failed, match="less accurate than PyTorch in bfloat16") as e:
        compare(sloppy, reference, TOLERANCES[torch.bfloat16], checked, golden=golden)
    assert e.value.verdict == "incorrect"
    own = (reference.double() - golden.double()).norm() / golden.double().norm()
    assert checked.rel_err > LOW_FACTOR * own


def test_one_bad_element_fails():
    """The rule holds at every element, not only in norm."""
    x, golden, reference = _bf16_case()
    bad = golden.bfloat16().clone()
    bad[2, 77] += 0.5 * bad.float().abs().max().bfloat16()
    with pytest.raises(Failed, match=r"1 of \d+ elements beyond"):
        compare(bad, reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)


def test_fp32_outputs_keep_the_tolerance_rule():
    """A golden run changes nothing for an fp32 output: it must agree with the reference as before."""
    r = torch.randn(50, 50)
    golden = r.double().float()
    compare(r + 1e-7 * r, r, TOLERANCES[torch.float32], Checked(), golden=golden)
    with pytest.raises(Failed, match=r"bound 2e-05"):
        compare(r * 1.001, r, TOLERANCES[torch.float32], Checked(), golden=golden)


def test_nan_where_pytorch_is_finite_fails_in_low_precision():
    x, golden, reference = _bf16_case()
    bad = golden.bfloat16()
    bad[0, 0] = float("nan")
    with pytest.raises(Failed, match="NaN or Inf"):
        compare(bad, reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)


def test_an_integer_output_may_break_ties_as_the_wider_run_does():
    """An argmax over bf16 logits decides near-ties by their rounding: a kernel that keeps fp32 logits gives the fp32
    run's token where PyTorch's bf16 gives another. Each element must still be one run's or the other's."""
    ref, wide = torch.tensor([3, 1, 4, 1]), torch.tensor([3, 2, 4, 0])
    compare(torch.tensor([3, 2, 4, 1]), ref, TOLERANCES[torch.bfloat16], Checked(), golden=wide)
    with pytest.raises(Failed, match="differs from the reference and the wider run in 1 of 4 elements"):
        compare(torch.tensor([3, 2, 5, 1]), ref, TOLERANCES[torch.bfloat16], Checked(), golden=wide)
    with pytest.raises(Failed, match="differs from the reference in 1 of 4 elements"):
        compare(torch.tensor([3, 2, 4, 1]), ref, TOLERANCES[torch.bfloat16], Checked())


def test_a_result_that_leans_one_way_fails_though_every_element_is_within_the_floor():
    """Scaled by 1.005 or shifted by 0.5% of its mean magnitude, a bf16 result is 1.3 units of roundoff off:
    inside the elementwise floor of 2 units, but every element errs the same way, and rounding does not."""
    x, golden, reference = _bf16_case()
    compare(golden.bfloat16(), reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)
    with pytest.raises(Failed, match=r"leans one way: its errors add up to the run scaled by 1\+5\.0e-03"):
        compare((golden * 1.005).bfloat16(), reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)
    shifted = (golden + 0.005 * golden.abs().mean()).bfloat16()
    with pytest.raises(Failed, match=r"leans one way: its errors add up to the run shifted by \+5\.0e-03"):
        compare(shifted, reference, TOLERANCES[torch.bfloat16], Checked(), golden=golden)


def test_the_worker_s_interpreter_rounds_to_bf16_as_a_gpu_does():
    """Triton's interpreter truncates an fp32 value stored to bf16 (a lean of about 0.7 units, always toward
    0); the worker's (tools/forkserver.py) rounds to nearest even, as a GPU's `cvt.rn` and PyTorch do."""
    probe = """
import torch, triton, triton.language as tl
from tools.forkserver import _round_like_a_gpu

@triton.jit
def store(x, y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 1.0, mask=offs < n)

x = torch.randn(1000)
x[:3] = torch.tensor([float("inf"), float("nan"), 1 + 2**-8 + 2**-10])
before, after = torch.empty(1000, dtype=torch.bfloat16), torch.empty(1000, dtype=torch.bfloat16)
store[(1,)](x, before, 1000, BLOCK=1024)
_round_like_a_gpu()
store[(1,)](x, after, 1000, BLOCK=1024)
rounded = x.bfloat16()
print(int((before.view(torch.int16) != rounded.view(torch.int16)).sum()), torch.equal(after[3:], rounded[3:]),
      after[:3].tolist())
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).parents[2])
    assert run.returncode == 0, run.stderr[-2000:]
    truncated, equal, specials = run.stdout.split(" ", 2)
    assert int(truncated) > 300 and equal == "True", run.stdout
    assert specials.strip().startswith("[inf, nan, 1.0078125]"), run.stdout


def test_a_few_elements_may_be_past_3x_pytorchs_error_but_within_10x():
    """Over a large bf16 output, 1 element in 10,000 may err past 3x PyTorch's error (an intermediate's rounding,
    magnified where a norm cancels); none past 10x, and no more than that share."""
    g = torch.randn(4, 50000, generator=torch.Generator().manual_seed(1))
    reference = g.bfloat16()
    u, own = UNIT_ROUNDOFF[torch.bfloat16], (reference.double() - g.double())
    rms, own_rms = g.double().pow(2).mean().sqrt(), own.pow(2).mean().sqrt()

    def off_by(times: float, count: int) -> torch.Tensor:
        out = g.double().clone()
        at = torch.arange(count) * 997
        flat = out.view(-1)
        flat[at] += 2 * u * (flat[at].abs() + rms) + times * (own.view(-1)[at].abs() + own_rms)
        return out.bfloat16()

    compare(off_by(6.0, 10), reference, TOLERANCES[torch.bfloat16], Checked(), golden=g)  # 10 of 200,000
    with pytest.raises(Failed, match=r"30 of 200000 elements beyond 3x PyTorch's error \+ 2u \(at most 20 may be"):
        compare(off_by(6.0, 30), reference, TOLERANCES[torch.bfloat16], Checked(), golden=g)
    with pytest.raises(Failed, match=r"within 10x: 1 are not"):
        compare(off_by(15.0, 1), reference, TOLERANCES[torch.bfloat16], Checked(), golden=g)
