"""Where the low-precision rule fails, its two figures reach the result: the candidate's relative error against
the fp32 golden run and PyTorch's own bf16 error against it (Failed, then EvalResult, then its JSON); a kernel
that passes carries both too."""
from pathlib import Path

import pytest
import torch

from tools.compare import LOW_FACTOR, TOLERANCES, Failed, compare
from tools.results import EvalJob, EvalResult, TaskSpec
from tools.verify import Checked

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def results(warm_executor) -> dict[str, EvalResult]:
    """The sandboxed workers' results for two scans of the cumsum task cast to bf16 (three trials, no profile)."""
    names = ("scan_bf16_acc.py", "scan_fp32.py")
    jobs = [EvalJob(TaskSpec(str(FIXTURES / "task_cumsum.py"), dtype="bfloat16"),
                    (FIXTURES / "candidates" / name).read_text(), trials=3, trial_seed=7, profile=False)
            for name in names]
    return dict(zip(names, warm_executor.map(jobs)))


def test_a_failing_bf16_candidate_carries_both_figures(results):
    r = results["scan_bf16_acc.py"]
    assert r.verdict == "incorrect" and "less accurate than PyTorch in bfloat16" in r.reason, r.reason
    assert r.rel_err is not None and r.own_rel_err is not None
    assert r.rel_err > LOW_FACTOR * r.own_rel_err > 0
    assert f"{r.rel_err:.2e}" in r.reason and f"{r.own_rel_err:.2e}" in r.reason  # the sentence's own figures


def test_a_correct_bf16_kernel_carries_pytorchs_error_too(results):
    r = results["scan_fp32.py"]
    assert r.verdict == "correct", r.reason
    assert r.own_rel_err is not None and 0 < r.own_rel_err and r.rel_err <= LOW_FACTOR * r.own_rel_err + 1e-2


def test_failed_from_compare_holds_the_figures():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 512, generator=g).bfloat16()
    golden, reference = torch.cumsum(x.float(), -1), torch.cumsum(x, -1)
    sloppy = (golden + 0.05 * golden.abs().mean() * torch.randn(golden.shape, generator=g)).bfloat16()
    checked = Checked()
    with pytest.raises(Failed) as e:
        compare(sloppy, reference, TOLERANCES[torch.bfloat16], checked, golden=golden)
    assert (e.value.rel_err, e.value.own_rel_err) == (checked.rel_err, checked.own_rel_err)
    again = e.value.reworded("told again")
    assert (again.verdict, again.rel_err, again.own_rel_err) == ("incorrect", checked.rel_err, checked.own_rel_err)
    assert Failed("rejected", "no figures").rel_err is None


def test_old_results_load_without_the_new_figure():
    old = {"correct": False, "verdict": "incorrect", "reason": "Incorrect: x.", "rel_err": 0.5}
    r = EvalResult.from_json(old)
    assert (r.rel_err, r.own_rel_err) == (0.5, None)
    assert EvalResult.from_json(EvalResult("incorrect", "x", rel_err=0.1, own_rel_err=0.02).to_json()).own_rel_err \
        == 0.02
