"""Comparing a candidate's outputs with the reference's: the correctness rule.

    compare(out, expected, TOLERANCES[torch.float32], checked)                  # fp32: within a tolerance
    compare(out, expected, TOLERANCES[torch.bfloat16], checked, golden=gold)    # bf16/fp16: against fp32

fp32 (and fp64) outputs must agree with the reference within the dtype's tolerance. bf16 and fp16 outputs are
judged against the math, not against PyTorch's own rounding: `golden` is the reference module run in fp32 on
the same rounded inputs, and a candidate passes when its error against that run is within LOW_FACTOR times
PyTorch's own error in the output's dtype plus LOW_FLOOR units of roundoff, in norm and at every element (but
ELEMENT_OUTLIERS' few, up to OUTLIER_FACTOR), with errors that do not lean one way (BIAS_FLOOR). An
fp32 output that misses its tolerance gets the same rule against a float64 run (tools/verify.py: judge), with
ELEMENT_FACTOR at each element (ELEMENT_OUTLIERS' few elements of a large output up to OUTLIER_FACTOR): a deep
network's rounding grows with depth, in PyTorch's fp32 forward as in any kernel's. At each element PyTorch's
error counts at least as its RMS over the element's WINDOW neighbours. Integer outputs are exact: each element
PyTorch's or, where there is one, the wider run's (an argmax over rounded values breaks ties as that run does).

Memory: comparisons walk the tensors in pieces (PIECES), so their float64 temporaries take under a byte per
output element (a fifth of an fp32 output), never the eight of a copy."""
from __future__ import annotations

import math
from typing import Iterator

import torch
from torch.utils._pytree import tree_flatten

# dtype: (atol as a fraction of the reference's RMS, rtol, bound on ||out - ref|| / ||ref||)
TOLERANCES = {
    torch.float64: (1e-9, 1e-9, 1e-10),
    torch.float32: (1e-4, 1e-4, 2e-5),
    torch.float16: (1e-2, 1e-2, 2e-3),
    torch.bfloat16: (2e-2, 2e-2, 1e-2),
}
TF32_TOLERANCE = (1e-2, 1e-2, 2e-3)
UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}  # half the
# spacing of numbers at 1. LOW_PRECISION: the dtypes judged against an fp32 run whenever there is one.
LOW_PRECISION = (torch.bfloat16, torch.float16)
# The rule against a wider run g: |candidate - g| <= LOW_FACTOR * (|PyTorch in the dtype - g| + the RMS of that)
# + LOW_FLOOR * u * (|g| + its RMS) at every element, and the same with norms. The floor holds any kernel that computes
# in fp32 and rounds once: round-to-nearest errs by at most u|x|, truncation (Triton's interpreter converts
# fp32 to bf16 that way) by under 2u|x|, and the RMS term covers fp32 reassociation where values cancel. The
# factor says "about as accurate as PyTorch": a kernel that rounds where PyTorch does lands near 1x, or near 2x
# where the interpreter truncates, so 3 leaves headroom for that; an accumulator in bf16 or fp16 where PyTorch
# keeps fp32 is off by tens of times PyTorch's error over a few hundred terms and fails. The RMS of PyTorch's error
# covers elements where PyTorch happens to land on the exact value and an equally accurate kernel does not.
LOW_FACTOR, LOW_FLOOR = 3.0, 2.0
# At each element an fp32 output is held to ELEMENT_FACTOR times PyTorch's error against a float64 run, not 3x:
# there the error is a long sum's accumulated rounding, not one rounding, and its size at an element follows
# that sum's terms, which a single sample of PyTorch's error and the output's RMS error only estimate. Over a
# million outputs a kernel as accurate as PyTorch in norm lands a few elements past 3x (seen: AlexNet's 4096-term
# GEMMs on an H200, 1 element of 1,024,000, its norm error 0.57x PyTorch's). An element 10x past PyTorch's is a
# wrong element, not rounding.
ELEMENT_FACTOR = {torch.float32: 10.0}
# Over a billion outputs, though, rounding alone lands a few elements past 10x: level 2's
# 100_ConvTranspose3d_Clamp_Min_Divide in tf32x3 on an H200 (session 56), its norm error 0.87-0.94x PyTorch's,
# had 4-11 of 868,710,400 elements at 11.9-18x on masked inputs (none past 20x; 8x on plain ones), and one
# seed in eight refused it. So an fp32 output may have ELEMENT_OUTLIERS' fraction of its elements (rounded
# down: none below ten million) between ELEMENT_FACTOR and OUTLIER_FACTOR times PyTorch's error, and none past
# that. A wrong element (a tap or a term missed, a stale value) is off by about a term, thousands of times
# PyTorch's rounding.
# A bf16 or fp16 output whose error is an intermediate's rounding, magnified where the reference cancels, is
# the same case at 3x: a batch norm over a GEMM's bf16 output (level 2's 33 and 39, its norm error 0.58-0.72x
# PyTorch's, on an H100 in session 73) had 3 to 979 of 8-67 million elements at 3.1-5.4x, and a layer norm's
# and a softmax's after a transposed convolution 14 of 268 million at 6.5x and 1 of 17 million at 7.4x: along a
# row, a window's neighbours are other channels, each magnified by its own spread. So a bf16 or fp16 output may
# have 1e-4 of its elements (none below ten thousand) past 3x PyTorch's error, and none past 10x.
ELEMENT_OUTLIERS = {torch.float32: 1e-7, torch.bfloat16: 1e-4, torch.float16: 1e-4}
OUTLIER_FACTOR = {torch.float32: 100.0, torch.bfloat16: 10.0, torch.float16: 10.0}
# PyTorch's error at one element is one sample of that element's rounding; its RMS over the WINDOW elements
# around it (a row's or a channel's neighbours, whose sums have like terms) estimates the size that rounding
# can have there. The bound takes the larger of that and the RMS over the whole output, so a channel whose
# rounding is 30x the rest (batch norm over a channel of small variance, a clamp's kink) is held to its own
# scale. Never tighter than before, and only where PyTorch's own result is locally as far off: a candidate
# cannot move that. (52_Conv2d_Activation_BatchNorm, refused at thousands of elements with its norm error 1.5x
# PyTorch's, looked like a case for more slack; it was our own tanh and softplus losing their digits near 0.)
# Exact zeros of both runs (a clamp's or a ReLU's flat region: 93_ConvTranspose2d_Add_Min_GELU_Multiply's output
# is mostly zeros) count in neither RMS: there nothing rounds, and counting them shrank PyTorch's error until an
# element 2 units of roundoff off in the candidate, and exact in PyTorch, read as 10x past it.
WINDOW = 256
# A kernel that computes in fp32 and rounds to nearest errs at each element by at most u|x|, so its errors'
# sum is at most u times the sum of |x|, and their dot product with x at most u times x's squared norm,
# however they fall: a rounding has no lean. A kernel that rounds where PyTorch does leans as PyTorch does.
# So a bf16 or fp16 output may lean at most BIAS_FLOOR units past PyTorch's lean, either way (scaled or
# shifted). Not an fp32 output judged against a float64 run: there the error is a long sum's accumulated
# rounding, which leans as the sum's terms do. A result scaled by 1.01 is 2.6 units in bf16, inside the
# elementwise floor of LOW_FLOOR units, and past this one. (The Triton interpreter truncates to bf16, about 0.7
# units of lean; tools/forkserver.py makes it round as a GPU does.)
BIAS_FLOOR = 1.0
# An fp32 output of fewer than WINDOW elements (a loss) is held to ELEMENT_FACTOR in norm too, where one sample
# of PyTorch's error is all there is to go on: the ratio of two equally accurate results' errors at one element
# exceeds 3 one time in five (98_KLDivLoss: 3.3x, where PyTorch's own was 0.5% off).
PIECES, MIN_PIECE = 64, 1 << 16  # comparisons walk a tensor in 64 pieces of at least 64Ki elements


class Failed(Exception):
    """A verification failure, the message one sentence: `verdict` 'incorrect' or 'rejected' for the candidate,
    or 'error' with `task_error` for a task that cannot judge any candidate. Where the rule against a wider run
    failed, `rel_err` is the candidate's relative error against that run and `own_rel_err` PyTorch's own
    (None elsewhere)."""

    def __init__(self, verdict: str, reason: str, task_error: bool = False, rel_err: float | None = None,
                 own_rel_err: float | None = None):
        super().__init__(reason)
        self.verdict, self.task_error = verdict, task_error
        self.rel_err, self.own_rel_err = rel_err, own_rel_err

    def reworded(self, reason: str) -> "Failed":
        """The same failure, figures included, told in another sentence (where it happened added)."""
        return Failed(self.verdict, reason, self.task_error, self.rel_err, self.own_rel_err)

    def sentence(self) -> str:
        prefix = {"rejected": "Rejected: ", "incorrect": "Incorrect: "}.get(self.verdict, "")
        return f"{prefix}{self}".rstrip(".") + "."


def compare(out, expected, tolerance: tuple[float, float, float], checked, golden=None,
            own: dict[torch.dtype, tuple[float, float, float]] | None = None) -> None:
    """Raises Failed('incorrect') where `out` is not an acceptable answer; records the errors in `checked`.
    `golden`, the reference's outputs in a wider dtype (fp32 for bf16 and fp16, float64 for fp32), switches
    those outputs to the rule against the math. `own`, where given, is the tolerance of an output of another dtype
    (float64, or bf16 and fp16 with no wider run), by its dtype."""
    outs, refs = tensors(out), tensors(expected)
    golds = tensors(golden) if golden is not None else [None] * len(refs)
    if len(outs) != len(refs):
        raise Failed("incorrect", f"it returned {len(outs)} tensors where the reference returns {len(refs)}.")
    for i, (y, r, g) in enumerate(zip(outs, refs, golds)):
        where = f"output {i}" if len(refs) > 1 else "the output"
        if y.shape != r.shape:
            raise Failed("incorrect", f"{where} has shape {tuple(y.shape)}, the reference {tuple(r.shape)}.")
        if y.dtype != r.dtype:
            raise Failed("incorrect", f"{where} has dtype {y.dtype}, the reference {r.dtype}.")
        if exact(r):
            # exact; where there is a wider run, each element PyTorch's or that run's: an argmax or a count over
            # rounded values decides ties and thresholds as the values of one run or the other fall
            wide = g is not None and g.shape == r.shape and g.dtype == r.dtype
            differ = sum(int(((a != b) & ((a != c) if wide else True)).sum().item())
                         for a, b, c in _pieces(y, r, g if wide else r))
            if differ:
                raise Failed("incorrect", f"{where} differs from the reference{' and the wider run' if wide else ''} "
                                          f"in {differ} of {r.numel()} elements.")
            continue
        if g is not None and r.dtype in UNIT_ROUNDOFF and g.element_size() > r.element_size():
            _compare_low_precision(y, r, g, where, checked)
            continue
        bad, mismatched, ref_sq, finite = _finite_pattern(y, r)
        if bad:
            raise Failed("incorrect", f"{where} has {bad} NaN or Inf elements where the reference is finite "
                                      f"(or an unwritten element).")
        if mismatched:
            raise Failed("incorrect", f"{where} differs from the reference at {mismatched} elements where the "
                                      f"reference is NaN or infinite (finite there, or another of NaN, Inf, -Inf).")
        atol_frac, rtol, rel_bound = (own or {}).get(r.dtype, tolerance)
        ref_norm = math.sqrt(ref_sq)
        rms = ref_norm / max(finite, 1) ** 0.5
        diff_sq, max_err, outside = _differences(y, r, atol_frac * max(rms, 1e-30), rtol)
        rel = math.sqrt(diff_sq) / ref_norm if ref_norm > 0 else max_err
        checked.max_abs_err = max(checked.max_abs_err, max_err)
        checked.rel_err = max(checked.rel_err, rel)
        if rel > rel_bound or outside:
            raise Failed("incorrect", f"{where} differs from the reference: relative error {rel:.2e} "
                                      f"(bound {rel_bound:.0e}), max abs error {max_err:.2e}, "
                                      f"{outside} of {r.numel()} elements out of tolerance.")


def _compare_low_precision(y: torch.Tensor, r: torch.Tensor, g: torch.Tensor, where: str, checked) -> None:
    """The rule against the math. Each NaN or Inf of the candidate must be PyTorch's or the wider run's (rounded
    to the dtype: fp16 overflows); where PyTorch alone is non-finite (its own rounding), a finite candidate is
    held to the floor. Errors are measured where the candidate and the wider run are finite."""
    u, run = UNIT_ROUNDOFF[r.dtype], f"the {_name(g.dtype)} run"
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    bad, gold_sq, count, seen, cand_sq, ref_sq, max_err = zero.long(), zero, zero, zero, zero, zero, zero
    drift = torch.zeros(5, dtype=torch.float64, device=r.device)
    lean = r.dtype in LOW_PRECISION  # an fp32 output's error is a long sum's rounding, which may lean
    for a, b, c in _pieces(y, r, g):
        bad = bad + (_unlike(a, b) & _unlike(a, c.to(r.dtype))).sum()
        keep = torch.isfinite(a) & torch.isfinite(c)
        c64 = torch.where(keep, c.double(), 0.0)
        dc = torch.where(keep, a.double() - c64, 0.0)
        dr = torch.where(keep & torch.isfinite(b), b.double() - c64, 0.0)
        if lean:
            drift = drift + torch.stack([dc @ c64, dr @ c64, dc.sum(), dr.sum(), c64.abs().sum()])
        dc, dr = dc.abs_(), dr.abs_()
        gold_sq, count, seen = gold_sq + c64 @ c64, count + keep.sum(), seen + _informative(keep, c64, dr).sum()
        cand_sq, ref_sq, max_err = cand_sq + dc @ dc, ref_sq + dr @ dr, torch.maximum(max_err, dc.max())
    if int(bad.item()):
        raise Failed("incorrect", f"{where} has {int(bad.item())} NaN or Inf elements where neither PyTorch in "
                                  f"{_name(r.dtype)} nor {run} has them (or an unwritten element).")
    gold_norm, cand_norm, ref_norm = (math.sqrt(float(v.item())) for v in (gold_sq, cand_sq, ref_sq))
    elements, informative = max(float(count.item()), 1.0), max(float(seen.item()), 1.0)
    rms, own_rms = gold_norm / informative ** 0.5, ref_norm / informative ** 0.5
    own = ref_norm / gold_norm if gold_norm > 0 else 0.0
    outside, far, worst, factor = zero.long(), zero.long(), zero, ELEMENT_FACTOR.get(r.dtype, LOW_FACTOR)
    for a, b, c in _pieces(y, r, g):
        keep = torch.isfinite(a) & torch.isfinite(c)
        c64 = c.double()
        err = torch.where(torch.isfinite(b), b.double() - c64, 0.0).abs_().nan_to_num_(0.0, 0.0, 0.0)
        scale = err.add_(_window_rms(err, _informative(keep, c64, err)).clamp_(min=own_rms))
        past = (a.double() - c64).abs_().sub_(c64.abs().add_(rms).mul_(LOW_FLOOR * u))  # beyond the floor
        outside = outside + (past > scale * factor).logical_and_(keep).sum()
        far = far + (past > scale * OUTLIER_FACTOR[r.dtype]).logical_and_(keep).sum()
        if past.numel():
            worst = torch.maximum(worst, torch.where(keep & (past > 0), past / scale, 0.0).max())
    outside, far, worst = int(outside.item()), int(far.item()), float(worst.item())
    allowed = int(r.numel() * ELEMENT_OUTLIERS.get(r.dtype, 0.0))
    rel = cand_norm / gold_norm if gold_norm > 0 else float(max_err.item())
    checked.max_abs_err = max(checked.max_abs_err, float(max_err.item()))
    checked.rel_err = max(checked.rel_err, rel)
    checked.own_rel_err = max(checked.own_rel_err or 0.0, own)
    in_norm = norm_factor(r.dtype, elements)
    if cand_norm > in_norm * ref_norm + LOW_FLOOR * u * gold_norm or outside > allowed or far:
        limit = OUTLIER_FACTOR[r.dtype]
        outliers = f" (at most {allowed} may be, within {limit:g}x: {far} are not)" if allowed else ""
        raise Failed("incorrect", f"{where} is less accurate than PyTorch in {_name(r.dtype)}: relative error "
                                  f"against {run} {rel:.2e}, PyTorch's own {own:.2e} (bound {in_norm:g}x "
                                  f"that + {LOW_FLOOR * u:.1e}), {outside} of {r.numel()} elements beyond "
                                  f"{factor:g}x PyTorch's error + {LOW_FLOOR:g}u{outliers}, the worst "
                                  f"{worst:.3g}x.", rel_err=rel, own_rel_err=own)
    if lean:
        _check_lean(drift.tolist(), float(gold_sq.item()), u, f"{where} against {run}", _name(r.dtype))


def norm_factor(dtype: torch.dtype, elements: float) -> float:
    """The rule's bound in norm, as a multiple of PyTorch's error: LOW_FACTOR, or the dtype's ELEMENT_FACTOR for an
    output of under WINDOW elements, too few to tell PyTorch's error's size from its one sample."""
    return ELEMENT_FACTOR.get(dtype, LOW_FACTOR) if elements < WINDOW else LOW_FACTOR


def _check_lean(drift: list[float], gold_sq: float, u: float, where: str, dtype: str) -> None:
    """Raises Failed where the candidate's errors lean one way past PyTorch's by more than BIAS_FLOOR units of
    roundoff: weighted by the wider run's values (a result scaled) or not (a result shifted). `drift`: the
    candidate's errors dotted with the wider run, PyTorch's, the candidate's sum of errors, PyTorch's, and the
    sum of the wider run's magnitudes."""
    mine_dot, own_dot, mine_sum, own_sum, size = drift
    for what, total, mine, own in (("scaled by 1{:+.1e}", gold_sq, mine_dot, own_dot),
                                   ("shifted by {:+.1e} of its mean magnitude", size, mine_sum, own_sum)):
        if total > 0 and abs(mine) > abs(own) + BIAS_FLOOR * u * total:
            raise Failed("incorrect", f"{where} leans one way: its errors add up to the run "
                                      f"{what.format(mine / total)}, PyTorch's in {dtype} to the run "
                                      f"{what.format(own / total)} (at most {BIAS_FLOOR:g} unit of roundoff more, "
                                      f"{BIAS_FLOOR * u:.1e}, is rounding).")


def _informative(keep: torch.Tensor, gold: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    """The elements whose PyTorch error says something about its rounding: not an exact zero of both runs (a
    clamp's or a ReLU's flat region, where nothing rounds)."""
    return keep & ((gold != 0) | (err != 0))


def _window_rms(e: torch.Tensor, informative: torch.Tensor) -> torch.Tensor:
    """The RMS of a flat tensor over consecutive windows of WINDOW elements (the last one shorter), at each
    element, taken over each window's informative elements."""
    n, pad = e.numel(), -e.numel() % WINDOW
    sums = torch.nn.functional.pad(e * e, (0, pad)).view(-1, WINDOW).sum(1)
    counts = torch.nn.functional.pad(informative.double(), (0, pad)).view(-1, WINDOW).sum(1).clamp_(min=1.0)
    return sums.div_(counts).sqrt_().repeat_interleave(WINDOW)[:n]


def _unlike(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where a's NaN and Inf elements are not b's (a finite element against a non-finite one, or another one)."""
    fin_a, fin_b = torch.isfinite(a), torch.isfinite(b)
    return (fin_a != fin_b) | ((a.nan_to_num() != b.nan_to_num()) & ~fin_b)


def exact(t: torch.Tensor) -> bool:
    """Whether an output is compared exactly: integers and booleans, neither float nor complex."""
    return not (t.is_floating_point() or t.is_complex())


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _finite_pattern(y: torch.Tensor, r: torch.Tensor) -> tuple[int, int, float, int]:
    """(elements non-finite in y where r is finite, elements where r is not finite and y differs, the sum of
    squares of r's finite elements, how many there are), piece by piece, one sync at the end."""
    bad = mismatched = finite = torch.zeros((), dtype=torch.long, device=r.device)
    ref_sq = torch.zeros((), dtype=torch.float64, device=r.device)
    for a, b in _pieces(y, r):
        fin_a, fin_b = torch.isfinite(a), torch.isfinite(b)
        bad = bad + (fin_b > fin_a).sum()
        mismatched = mismatched + (fin_a > fin_b).sum() + ((a.nan_to_num() != b.nan_to_num()) & ~fin_a & ~fin_b).sum()
        finite = finite + fin_b.sum()
        b64 = b.nan_to_num(0.0, 0.0, 0.0).double()
        ref_sq = ref_sq + b64 @ b64
    return int(bad.item()), int(mismatched.item()), float(ref_sq.item()), int(finite.item())


def _differences(y: torch.Tensor, r: torch.Tensor, atol: float, rtol: float) -> tuple[float, float, int]:
    """(sum of squared differences, largest difference, elements out of tolerance) over r's finite elements,
    y's non-finite elements being where r's are (_finite_pattern): their differences are NaN, counted as 0."""
    diff_sq = max_err = torch.zeros((), dtype=torch.float64, device=r.device)
    outside = torch.zeros((), dtype=torch.long, device=r.device)
    for a, b in _pieces(y, r):
        diff = (a.double() - b.double()).abs_().nan_to_num_(0.0, 0.0, 0.0)
        diff_sq = diff_sq + diff @ diff
        max_err = torch.maximum(max_err, diff.max())
        outside = outside + (diff > b.abs().double().mul_(rtol).add_(atol)).sum()
    return float(diff_sq.item()), float(max_err.item()), int(outside.item())


def fingerprint(value) -> tuple[float, ...]:
    """Two sums per output tensor, enough to tell a second call's output from the first's without holding it."""
    sums = []
    for t in tensors(value):
        s = w = torch.zeros((), dtype=torch.float64, device=t.device)
        for (a,) in _pieces(t):
            a64 = a.double().nan_to_num_(7.0, 11.0, -11.0) if a.is_floating_point() else a.double()
            s, w = s + a64.sum(), w + a64 @ a64
        sums += [float(s.item()), float(w.item())]
    return tuple(sums)


def _pieces(*xs: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """The same elements of tensors of one shape, in order, as flat pieces of about 1/PIECES of them (at least
    MIN_PIECE; an innermost run longer than a piece is cut too); only a piece is ever copied."""
    x = xs[0]
    for index in _slices(tuple(x.shape), max(MIN_PIECE, x.numel() // PIECES)):
        if x.numel():
            yield tuple(t[index].reshape(-1) for t in xs)


def _slices(shape: tuple[int, ...], size: int, prefix: tuple = ()) -> Iterator[tuple]:
    inner = math.prod(shape[1:])
    if not shape or math.prod(shape) <= size:
        yield prefix
    elif inner <= size:
        step = size // inner
        for i in range(0, shape[0], step):
            yield prefix + (slice(i, i + step),)
    else:
        for i in range(shape[0]):
            yield from _slices(shape[1:], size, prefix + (i,))


def tensors(value) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(value)
    return [x for x in leaves if isinstance(x, torch.Tensor)]
