"""fp32 judged against the math where its tolerance is out of PyTorch's own reach (tools/verify.py: judge): an
fp32 output that misses the tolerance passes when it is within the rule of tools/compare.py against a float64
run of the reference, as accurate as PyTorch's fp32 result give or take 3x; one less accurate still fails. And
where rounding decides PyTorch's own result (fp32 against float64, bf16 against fp32), no result is judged."""
import copy

import pytest
import torch

from tools.compare import TOLERANCES, Failed, compare
from tools.verify import CHAOTIC, Checked, Setup, judge, nudged_outputs


class IllConditioned(torch.nn.Module):
    """x @ a @ inverse(a) for an `a` of condition number 1e4: fp32 rounding of the large intermediate shows in
    the small result, about 1e-4 of it, five times the fp32 bound."""

    def __init__(self, n: int = 64):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g))
        s = torch.logspace(0, 4, n, dtype=torch.float64)
        self.a = torch.nn.Parameter((q * s) @ q.T)
        self.b = torch.nn.Parameter((q / s) @ q.T)

    def forward(self, x):
        return (x @ self.a) @ self.b


def setup_for(model: torch.nn.Module) -> Setup:
    return Setup(None, model, None, torch.device("cpu"), None, TOLERANCES[torch.float32], [], None)


def test_pytorchs_own_fp32_result_misses_the_fp32_bound_here():
    model, x = IllConditioned(), torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    exact = model.double()(x.double())
    fp32 = model.float()(x)
    assert (fp32.double() - exact).norm() / exact.norm() > 5 * TOLERANCES[torch.float32][2]


def test_an_fp32_output_as_accurate_as_pytorch_passes_against_float64():
    model, x = IllConditioned().float(), torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    setup = setup_for(model)
    expected = model(x)
    exact = copy.deepcopy(model).double()(x.double()).float()  # the math on the same weights, rounded once
    with pytest.raises(Failed, match="bound 2e-05"):
        compare(exact, expected, setup.tolerance, Checked())  # the tolerance alone rejects the exact answer
    checked = Checked()
    judge(setup, [x], exact, expected, checked)
    assert checked.rel_err < 1e-6  # its error is measured against the float64 run


def test_an_fp32_output_less_accurate_than_pytorch_still_fails():
    model, x = IllConditioned().float(), torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    expected = model(x)
    exact = copy.deepcopy(model).double()(x.double())
    off = (exact + 4 * (expected.double() - exact).std() * torch.randn(exact.shape, dtype=torch.float64,
                                                                      generator=torch.Generator().manual_seed(5)))
    with pytest.raises(Failed, match="less accurate than PyTorch in float32: relative error against the float64"):
        judge(setup_for(model), [x], off.float(), expected, Checked())


def test_a_well_conditioned_fp32_task_keeps_its_tolerance():
    """Where PyTorch's fp32 is accurate, the float64 run holds a candidate to about that accuracy: an output off
    by 1e-4 fails either way."""
    model, x = torch.nn.Linear(64, 32).float(), torch.randn(128, 64)
    expected = model(x)
    with pytest.raises(Failed, match="less accurate than PyTorch in float32"):
        judge(setup_for(model), [x], expected * (1 + 1e-4), expected, Checked())


def test_a_wrong_shape_is_not_a_question_of_accuracy():
    model, x = torch.nn.Linear(64, 32).float(), torch.randn(128, 64)
    setup = setup_for(model)
    with pytest.raises(Failed) as e:
        judge(setup, [x], model(x)[:, :31], model(x), Checked())
    assert "shape (128, 31)" in str(e.value) and "float64" not in str(e.value)
    assert torch.float64 not in setup.golden  # no float64 run was made


class Chaotic(torch.nn.Module):
    """A batch norm over two samples that a saturated sigmoid made equal to within fp32's rounding, with a tiny eps:
    in fp32 it divides by rounding (tests/tools/fixtures/task_chaotic.py, where the evaluator judges it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(8)
        self.fc, self.bn = torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16, eps=1e-30)

    def forward(self, x):
        return self.bn(self.fc(torch.sigmoid(x.abs() + 15.0)))


@pytest.mark.parametrize("dtype, wider", [(torch.float32, torch.float64), (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("result", ["zeros", "the math rounded once"])
def test_where_rounding_decides_the_output_no_result_is_judged(result, dtype, wider):
    """PyTorch's own output is off the wider run (float64 for fp32, fp32 for bf16) by CHAOTIC or more:
    within 3x of that, zeros would pass, and so would the wider run rounded once. Neither is a verdict: the task
    cannot judge a result on such inputs."""
    model, x = Chaotic().to(dtype), torch.rand(2, 16, generator=torch.Generator().manual_seed(9)).to(dtype)
    expected = model(x)
    exact = copy.deepcopy(model).to(wider)(x.to(wider))
    assert (expected.to(wider) - exact).norm() / exact.norm() > CHAOTIC
    out = torch.zeros_like(expected) if result == "zeros" else exact.to(dtype)
    setup = Setup(None, model, None, torch.device("cpu"), None, TOLERANCES[dtype], [], None)
    with pytest.raises(Failed, match="rounding decides it, not the inputs") as e:
        judge(setup, [x], out, expected, Checked())
    assert (e.value.verdict, e.value.task_error) == ("error", True)
    assert f"against a {str(wider).removeprefix('torch.')} run" in str(e.value)


class CancellingLoss(torch.nn.Module):
    """A scalar that fp32 rounds at 1e5's spacing (0.0078) where it is about 0.02."""

    def forward(self, x):
        return (x.mean() * 0.04 + 1e5) - 1e5


def test_a_loss_whose_rounding_is_a_tenth_of_it_judges_no_result():
    """A one-element fp32 output is held to 10x PyTorch's error in norm, not 3x (compare.py), so zeros pass it
    from a tenth: PyTorch's loss here is 17% off the math, and the task cannot judge."""
    x = torch.rand(64, generator=torch.Generator().manual_seed(0))
    model = CancellingLoss()
    expected, exact = model(x), model(x.double())
    assert 0.1 < abs(float(expected) - float(exact)) / abs(float(exact)) < CHAOTIC
    compare(torch.zeros_like(expected), expected, TOLERANCES[torch.float32], Checked(), golden=exact)  # zeros pass
    with pytest.raises(Failed, match=r"1/10 of the result or more, so 10x that, the rule's bound"):
        judge(setup_for(model), [x], torch.zeros_like(expected), expected, Checked())


def test_a_lucky_sample_of_pytorchs_rounding_is_checked_against_a_second():
    """PyTorch's result happens to be near exact (here: the float64 answer itself rounded, a sample of one), so
    a candidate's rounding fails against it; the reference run again on inputs and weights nudged by an ulp is
    far off, so the task cannot judge, and says both figures. On a well-conditioned task the second sample is
    small, and a wrong result fails as before (test_an_fp32_output_less_accurate_than_pytorch_still_fails)."""
    model, x = Chaotic(), torch.rand(2, 16, generator=torch.Generator().manual_seed(9))
    lucky = copy.deepcopy(model).double()(x.double()).float()
    with pytest.raises(Failed, match=r"relative error of \S+ against a float64 run \((\S+) with its inputs and "
                                     r"weights moved by up to an ulp\)") as e:
        judge(setup_for(model), [x], model(x), lucky, Checked())
    assert e.value.verdict == "error"


def test_a_bf16_failure_gets_no_nudged_samples():
    """bf16 inputs are exact, and a nudge of a bf16 unit roundoff moves the math as much as PyTorch's own
    rounding (times the condition number): a bf16 failure against PyTorch's result stands as it is."""
    model = Chaotic().to(torch.bfloat16)
    x = torch.rand(2, 16, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    lucky = copy.deepcopy(model).float()(x.float()).to(torch.bfloat16)
    setup = Setup(None, model, None, torch.device("cpu"), None, TOLERANCES[torch.bfloat16], [], None)
    with pytest.raises(Failed, match="less accurate than PyTorch in bfloat16") as e:
        judge(setup, [x], model(x), lucky, Checked())
    assert e.value.verdict == "incorrect" and setup.nudged is None


def test_a_result_as_accurate_as_a_second_sample_of_pytorchs_rounding_passes():
    """An ill-conditioned product (PyTorch's fp32 1e-4 off float64) where PyTorch's result happens to be exact
    (the float64 answer rounded): PyTorch's real fp32 result fails against that sample, and meets the rule
    against PyTorch on inputs and weights nudged by an ulp, an equally good rounding, so it passes. Four times
    PyTorch's error still fails (test_an_fp32_output_less_accurate_than_pytorch_still_fails)."""
    model, x = IllConditioned().float(), torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    lucky = copy.deepcopy(model).double()(x.double()).float()
    setup = setup_for(model)
    with pytest.raises(Failed, match="less accurate than PyTorch"):
        compare(model(x), lucky, setup.tolerance, Checked(), golden=copy.deepcopy(model).double()(x.double()))
    checked = Checked()
    judge(setup, [x], model(x), lucky, checked)
    assert 1e-5 < checked.own_rel_err < CHAOTIC  # the second sample's error, recorded


def test_the_second_sample_moves_the_inputs_and_weights_by_about_an_ulp():
    model, x = torch.nn.Linear(64, 32).float(), torch.randn(128, 64)
    setup, weight, given = setup_for(model), model.weight.detach().clone(), x.clone()
    wider = copy.deepcopy(model).double()(x.double())
    nudged = nudged_outputs(setup, [x], 0)
    assert 0 < ((nudged.double() - wider).norm() / wider.norm()).item() < 1e-6
    assert not torch.equal(nudged, nudged_outputs(setup, [x], 1))  # another seed, other moves
    assert torch.equal(model.weight, weight) and torch.equal(x, given)  # the reference and inputs are not moved


def _near_pytorch(model, x, worst: float):
    """The float64 answer plus noise of PyTorch's own size, one element of which is off by `worst` times PyTorch's
    RMS error: accumulated rounding spread as a kernel with another summation order spreads it."""
    expected = model(x)
    exact = copy.deepcopy(model).double()(x.double())
    sigma = (expected.double() - exact).pow(2).mean().sqrt()
    off = exact + sigma * torch.randn(exact.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    i = int((expected.double() - exact).abs().argmin())  # where PyTorch happens to be nearly exact
    off.view(-1)[i] = exact.view(-1)[i] + worst * sigma
    return off.float(), expected


def test_one_element_a_few_times_pytorchs_rounding_passes():
    """An fp32 kernel as accurate as PyTorch in norm, with one element 5x PyTorch's RMS error where PyTorch is
    nearly exact (3x was the bound until AlexNet's GEMMs on an H200 showed such an element)."""
    model, x = IllConditioned().float(), torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    out, expected = _near_pytorch(model, x, worst=5.0)
    checked = Checked()
    judge(setup_for(model), [x], out, expected, checked)
    assert checked.rel_err < 3 * checked.own_rel_err


def test_one_wrong_element_still_fails():
    model, x = IllConditioned().float(), torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    out, expected = _near_pytorch(model, x, worst=40.0)
    with pytest.raises(Failed, match="1 of 16384 elements beyond 10x PyTorch's error"):
        judge(setup_for(model), [x], out, expected, Checked())


def test_a_channel_of_larger_rounding_is_held_to_its_own_scale():
    """PyTorch's fp32 error is 30x larger in one channel of 64 (a batch norm over a channel of small variance).
    A kernel as accurate as PyTorch everywhere passes: at each element PyTorch's error counts at least as its
    RMS over that element's neighbours. Against the RMS over the whole output, hundreds of that channel's
    elements were past 10x it. A kernel 30x off in a quiet channel still fails."""
    gen = torch.Generator().manual_seed(7)
    exact = torch.randn(64, 4096, dtype=torch.float64, generator=gen)
    scale = torch.full((64, 1), 1e-6, dtype=torch.float64)
    scale[5] = 3e-5
    expected = (exact + scale * torch.randn(exact.shape, dtype=torch.float64, generator=gen)).float()
    out = exact + scale * torch.randn(exact.shape, dtype=torch.float64, generator=gen)
    checked = Checked()
    compare(out.float(), expected, TOLERANCES[torch.float32], checked, golden=exact)
    assert checked.rel_err < 1.5 * checked.own_rel_err
    out[9] = exact[9] + 30 * scale[5] * torch.randn(4096, dtype=torch.float64, generator=gen)
    with pytest.raises(Failed, match=r"\d+ of 262144 elements beyond 10x PyTorch's error"):
        compare(out.float(), expected, TOLERANCES[torch.float32], Checked(), golden=exact)


@pytest.mark.parametrize("times, passes", [(5.0, True), (12.0, False)])
def test_a_one_element_loss_is_held_to_10x_pytorchs_error(times, passes):
    """A loss that PyTorch's fp32 gets 0.5% off (a sum that cancels): one sample of PyTorch's error is all there
    is, and an equally accurate kernel is 3x further off one time in five; 10x bounds it."""
    exact = torch.tensor(0.25, dtype=torch.float64)
    expected = (exact * (1 + 5e-3)).float()
    out = (exact * (1 - times * 5e-3)).float()
    if passes:
        compare(out, expected, TOLERANCES[torch.float32], Checked(), golden=exact)
    else:
        with pytest.raises(Failed, match=r"bound 10x"):
            compare(out, expected, TOLERANCES[torch.float32], Checked(), golden=exact)


def test_a_mostly_zero_output_is_held_to_the_rounding_of_its_nonzero_elements():
    """99% exact zeros (a min(x, 0) before GELU, as in 93_ConvTranspose2d_Add_Min_GELU_Multiply) and rounding at
    the rest: a kernel whose rounding there is as large as PyTorch's, but independent of it, passes. The zeros
    round nowhere; counted in the RMS of PyTorch's error they shrank it tenfold, and elements of the candidate
    where PyTorch happened to be near exact read as 10x past it. A kernel 30x off at its nonzero elements fails."""
    gen = torch.Generator().manual_seed(11)
    exact = torch.randn(64, 4096, dtype=torch.float64, generator=gen)
    exact[torch.rand(exact.shape, generator=gen) < 0.99] = 0.0
    nonzero = exact != 0

    def rounded(scale: float) -> torch.Tensor:
        return torch.where(nonzero, exact + scale * torch.randn(exact.shape, dtype=torch.float64, generator=gen), 0.0)

    expected, out = rounded(1e-6).float(), rounded(1e-6).float()
    checked = Checked()
    compare(out, expected, TOLERANCES[torch.float32], checked, golden=exact)
    assert checked.rel_err < 1.5 * checked.own_rel_err
    with pytest.raises(Failed, match=r"\d+ of 262144 elements beyond 10x PyTorch's error"):
        compare(rounded(3e-5).float(), expected, TOLERANCES[torch.float32], Checked(), golden=exact)


@pytest.mark.parametrize("offsets, passes", [((25.0,), True), ((25.0, 25.0), False), ((300.0,), False)])
def test_a_large_output_may_have_a_few_elements_past_10x_but_none_past_100x(offsets, passes):
    """10 million outputs as accurate as PyTorch's in norm: one element (one in ten million) may be between 10x
    and 100x PyTorch's error, as tf32x3's rounding put a few of level 2's 100's 868 million; a second fails, as
    does one element 300x off, and the failure says how far the worst is."""
    gen = torch.Generator().manual_seed(12)
    exact = torch.randn(10_000_000, dtype=torch.float64, generator=gen)
    expected = (exact + 1e-6 * torch.randn(exact.shape, dtype=torch.float64, generator=gen)).float()
    out = exact + 1e-6 * torch.randn(exact.shape, dtype=torch.float64, generator=gen)
    for i, times in enumerate(offsets):
        at = 1_000_003 * (i + 1)
        out[at] = exact[at] + times * 1e-6
    if passes:
        compare(out.float(), expected, TOLERANCES[torch.float32], Checked(), golden=exact)
    else:
        with pytest.raises(Failed, match=r"(1|2) of 10000000 elements beyond 10x PyTorch's error \+ 2u "
                                         r"\(at most 1 may be, within 100x: (0|1) are not\), the worst ") as e:
            compare(out.float(), expected, TOLERANCES[torch.float32], Checked(), golden=exact)
        assert 10 < float(str(e.value).split("the worst ")[1].rstrip(".x")) < max(offsets)
