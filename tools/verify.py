"""Correctness: the trials a candidate must pass, and the runtime anti-cheat rules.

    checked = verify(setup, trials=4)   # raises Failed; checked.seed is the trial seed it drew

First the task must tell input sets apart: two draws of inputs must give reference outputs that a constant
output could not match (`discriminating`); where they do not, the inputs are widened (signed, scaled, other
seeds), and where nothing helps the task cannot judge a candidate. Then each trial draws inputs from a seed the
candidate cannot predict, with the patterns of tools/inputs.py; calls the candidate, then the reference;
changes part of the inputs in place; calls the candidate again, then the reference. Both outputs must be plain
torch.Tensors in the reference's structure, shape, dtype and device, share no memory with the inputs, leave
the inputs unchanged, and be right by the rule of tools/compare.py (bf16 and fp16 outputs against a golden run
of the reference in fp32); where rounding decides the reference's own result (CHAOTIC), the task cannot judge
one. The last trial calls the candidate with grad enabled, on inputs that require grad.

Memory: a trial holds the inputs, at most two outputs (three with the golden run) and the task's parameters
(the reference's, the candidate's, and an fp32 copy of the reference for a low-precision task; a float64 run,
made only for an fp32 output that missed its tolerance, takes twice the task's footprint more), never a second
copy of the inputs on the GPU once they are large (what catches mutation is then a keyed hash of their bits), and
comparisons walk the tensors in pieces (tools/compare.py). A candidate that fails the rule against a wider run
adds a copy of the reference and, for each nudged sample, a nudged copy of the inputs and the sample's outputs
(a run that does not fit leaves the failure as it was)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import torch
from torch.utils._pytree import tree_flatten

from tools.compare import (LOW_FACTOR, LOW_PRECISION, TF32_TOLERANCE, TOLERANCES, Failed, _pieces,  # noqa: F401
                           compare, exact, fingerprint, norm_factor, tensors)
from tools.clean import precision_flags
from tools.guard import LaunchRecorder, OpRecorder
from tools.inputs import WIDENINGS, Draw, change_part, draw_seed, make_inputs, trial_draw, with_finite_mask
from tools.rules import DECLARABLE_OPS, RUNTIME_REASONS, op_base
from tools.task import output_fault
from tools.ties import TIE_OPS, IndexOrder

HASH_ABOVE_BYTES = 256 << 20  # inputs larger than this in all are checked for mutation by a hash, not a copy
# A product over a long axis raises its inputs' scale to the power of the axis length: scaled or patterned
# inputs only overflow it, and the order of a kernel's partial products then decides which elements overflow
# first, not its accuracy (KernelBench's cumprod over 32768 elements at x4.5). Its trials use the task's own
# inputs, scale 1, no patterns (fresh seeds and the in-place change still apply).
# Binary cross-entropy is bounded too, by its domain: PyTorch raises on an input or a target outside [0, 1],
# where a shifted or scaled probability lands.
SCALE_BOUND_OPS = {"cumprod", "prod", "binary_cross_entropy"}
# PyTorch's own error against a wider run is one sample of what rounding does to the task's result. Where it is
# CHAOTIC of the result or more in norm, the rule's bound (LOW_FACTOR times it) is as far off the math as a zero
# output: rounding decides the result, not the inputs, and the rule cannot tell a result from none, so the task
# cannot judge one on such inputs (KernelBench's EfficientNetB2 at batch 2, whose batch norms divide by
# differences a saturated sigmoid left at rounding's size: PyTorch's fp32 output 2% to 80% off a float64 run, by
# the draw; zeros passed). PyTorch's error may be large and still judge: a bf16 scan that accumulates in bf16
# is 10% off an fp32 run on scaled inputs, and a kernel that accumulates in fp32 is right. Where a candidate
# fails the rule against a float64 run, the sample may have been a lucky one (24_EfficientNetB2's failing draw:
# 2% off, where others were 40-80%): the reference runs again on its inputs and weights each moved by up to one
# unit in the last place, up to NUDGES times. Each such sample is PyTorch's own result on inputs within rounding
# of the task's, as good a rounding as the first: one CHAOTIC or more off is the same task error, and a
# candidate within the rule of one passes. A small fp32 output (a loss) is held to 10x in norm, not 3x
# (compare.norm_factor), so for a task with one the line is a tenth.
CHAOTIC = 1 / LOW_FACTOR
NUDGES = 3  # nudged samples of PyTorch's rounding, at most, before an fp32 candidate's failure stands. Not for
# bf16 or fp16 outputs: their inputs are given exactly (the fp32 run takes the same values), and a nudge of a
# unit roundoff there moves the math as much as PyTorch's own rounding, times the task's condition number (a
# layer norm over inputs shifted far from 0: hundreds of times), so a sample would be off by far more than
# PyTorch is and free a sloppy kernel, or call a well-posed task chaotic.


@dataclass
class Checked:
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    own_rel_err: float | None = None  # PyTorch's own relative error against a wider run, the largest over the
    # outputs and trials judged against one (None: none was)
    torch_ops: list[str] = field(default_factory=list)
    reference_ops: list[str] = field(default_factory=list)
    ignored: int | None = None  # a target the reference's loss skips (nll_loss's ignore_index): masked trials hold it
    seed: int = 0  # the trial seed this evaluation drew
    widen: str = ""  # the widening of tools/inputs.py the task needed to tell a constant apart, if any
    constant: bool = False  # the reference's function is constant (discriminating): reproducing it is correct
    kernel_ms: dict[str, float] = field(default_factory=dict)  # on a GPU: each kernel's device time in one
    # forward under the profiler (tools/gpu_checks.py: kernel_times), the largest first


@dataclass
class Setup:
    """Everything a trial needs, built once by the worker."""

    task: object  # the task module
    reference: torch.nn.Module
    candidate: torch.nn.Module
    device: torch.device
    dtype: torch.dtype | None
    tolerance: tuple[float, float, float]
    declared_ops: list[str]
    launches: LaunchRecorder
    scale_inputs: bool = True
    explicit_tolerance: bool = False  # atol/rtol given for the task: bf16/fp16 outputs judged by them too
    golden: dict = field(default_factory=dict)  # dtype: the reference in that dtype, made at its first use for
    # a wider run (False: it cannot run in that dtype)
    no_golden: str = ""  # why a wider run failed (its exception, one line), where one did
    nudged: torch.nn.Module | None = None  # a copy of the reference for nudged_outputs, made at its first use
    precision: dict[str, object] = field(default_factory=dict)  # the evaluator's precision flags, set at verify()

    @property
    def own_tolerances(self) -> dict[torch.dtype, tuple[float, float, float]]:
        """The tolerance of an output whose dtype is not the task's, by its dtype: float64's own (whatever a task
        list's cast or TF32 set for the other outputs, a float64 one computed in float32 is off by 1e-7), and
        bf16's or fp16's where no wider run judges it (a task that makes its own bf16 tensors has fp32's
        tolerance for the rest); none where the task gives its atol or rtol."""
        if self.explicit_tolerance:
            return {}
        return {d: TOLERANCES[d] for d in (torch.float64, *LOW_PRECISION)}


def verify(setup: Setup, trials: int, seed: int | None = None) -> Checked:
    """Raises Failed at the first trial a candidate fails, naming the trial and the seed (None: a fresh one
    from the operating system, drawn now that the candidate is loaded)."""
    checked = Checked(seed=draw_seed() if seed is None else seed)
    setup.precision = setup.precision or precision_flags()
    checked.widen = discriminating(setup, checked.seed, checked, trials)
    setup.scale_inputs = scales_inputs(setup, checked)
    for t in range(trials):
        draw, grad = trial_draw(checked.seed, t, setup.scale_inputs, checked.widen), t == trials - 1
        try:
            trial(setup, draw, checked, grad, first=(t == 0))
        except Failed as e:
            where = (f"trial {t + 1} of {trials}: {draw.describe()}" + (", grad enabled" if grad else "")
                     + f"; trial seed {checked.seed}")
            hint = (" If the task needs its inputs as get_inputs() draws them, set scale_inputs = false for it in "
                    "a task list." if e.task_error and (draw.pattern, draw.scale) != ("plain", 1.0) else "")
            raise e.reworded(f"{str(e).rstrip('.')} ({where}).{hint}") from None
    if setup.device.type == "cuda":  # what only a GPU shows: its activity trace, races (tools/gpu_checks.py)
        from tools.gpu_checks import check_activity, check_repeatable
        draw = trial_draw(checked.seed, 0, setup.scale_inputs, checked.widen)
        try:
            inputs = make_inputs(setup, draw)
            checked.kernel_ms = check_activity(setup, inputs)
            check_repeatable(setup, inputs)
        except Failed as e:
            raise e.reworded(f"{str(e).rstrip('.')} ({draw.describe()}; trial seed {checked.seed}).") from None
    return checked


def scales_inputs(setup: Setup, checked: Checked) -> bool:
    """Whether the trials scale and pattern the inputs: not where the reference runs an op whose result is
    bounded by its inputs' scale (SCALE_BOUND_OPS)."""
    return setup.scale_inputs and not SCALE_BOUND_OPS & {op_base(o) for o in checked.reference_ops}


def discriminating(setup: Setup, seed: int, checked: Checked | None = None, trials: int = 0) -> str:
    """The widening under which the reference's outputs on two input sets differ by more than the tolerance,
    so that a constant output cannot pass ("" when the task's own inputs do, or the first `trials` trials'
    draws differ so: a mean loss over many rows barely moves between two draws of one kind, and moves with
    the trials' scales and patterns); Failed('error') when none does. With `checked`, the ATen ops the
    reference ran are recorded there."""
    for widen in WIDENINGS:
        first = reference_outputs(setup, make_inputs(setup, Draw(seed * 1000 + 900, widen=widen)), checked)
        if _moved(setup, first, make_inputs(setup, Draw(seed * 1000 + 901, widen=widen)))[0]:
            return widen
    if checked is not None and trials_differ(setup, seed, trials, scales_inputs(setup, checked)):
        return ""
    if constant_function(setup, seed):
        if checked is not None:
            checked.constant = True
        return ""
    raise Failed("error", "The task cannot discriminate: its reference's output moves by less than the tolerance "
                          "across input sets, even on inputs made signed, scaled by 100 and by 0.01 or drawn from "
                          "other seeds, so a constant output would pass; no verdict and no speedup are given",
                 task_error=True)


def trials_differ(setup: Setup, seed: int, trials: int, scaled: bool) -> bool:
    """Whether the reference's outputs on two consecutive trials' draws differ by more than the tolerance."""
    last = None
    for t in range(trials):
        inputs = trial_inputs(setup, trial_draw(seed, t, scaled, ""))
        if last is None:
            last = reference_outputs(setup, inputs)
            continue
        moved, last = _moved(setup, last, inputs)
        if moved:
            return True
    return False


def _moved(setup: Setup, first, inputs: list) -> tuple[bool, object]:
    """(whether the reference's outputs on `inputs` differ from `first` by more than the tolerance, judged
    against the wider run where there is one; those outputs). Takes `inputs` and lets them go."""
    second = reference_outputs(setup, inputs)
    golden = golden_outputs(setup, inputs, second)
    del inputs[:]
    try:
        compare(first, second, setup.tolerance, Checked(), golden, setup.own_tolerances)
    except Failed:
        return True, second
    return False, second


def constant_function(setup: Setup, seed: int) -> bool:
    """Whether the reference computes a constant: its outputs on two input sets are equal bit for bit, in its
    own dtype and in a wider run (float64 for fp32 outputs, fp32 for bf16 and fp16), so that a result which
    only rounds to a constant (x * 1e-12 + 0.5 in fp32) does not count, while one that is constant in the math
    (x minus its mean over a dimension of size 1 is zero) does: a kernel that writes that constant is right."""
    runs = []
    for s in (seed * 1000 + 902, seed * 1000 + 903):
        inputs = make_inputs(setup, Draw(s, widen="other seeds"))
        out = reference_outputs(setup, inputs)
        wide = golden_outputs(setup, inputs, out, torch.float64)
        wide = golden_outputs(setup, inputs, out) if wide is None else wide
        if wide is None:
            return False
        runs.append(tensors(out) + tensors(wide))
    return all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(*runs))


def trial_inputs(setup: Setup, draw: Draw) -> list:
    """A trial's inputs: a masked draw keeps its ignored targets only where the reference takes them, and -inf,
    then its rows of zeros and quiet values, only where the reference stays finite."""
    inputs = make_inputs(setup, draw)
    if draw.pattern != "masked":
        return inputs
    try:
        finite = _finite(setup, inputs)
    except Failed:
        if draw.ignored is None:
            raise
        return trial_inputs(setup, replace(draw, ignored=None))  # its integers are more than a loss's targets
    if not finite:
        with_finite_mask(inputs)
        if not _finite(setup, inputs):
            inputs = make_inputs(setup, replace(draw, quiet_rows=False))
            with_finite_mask(inputs)
    return inputs


def _finite(setup: Setup, inputs: list) -> bool:
    """Whether the reference's floating outputs on `inputs` are all finite."""
    outputs = tensors(reference_outputs(setup, inputs))
    return all(bool(torch.isfinite(p).all()) for p in outputs if p.is_floating_point())


def trial(setup: Setup, draw: Draw, checked: Checked, grad: bool, first: bool) -> None:
    """Candidate, then reference; part of the inputs changed in place; candidate, then reference. Each output
    is checked, then let go, as soon as it can be."""
    inputs = trial_inputs(setup, draw if checked.ignored is None else replace(draw, ignored=checked.ignored))
    if grad:
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.requires_grad_(True)
    prints, state = None, list(setup.reference.state_dict().values())
    for call in (1, 2):
        if call == 2:
            change_part(inputs, draw.seed)
        snapshot, held = _snapshot(inputs), _snapshot(state)
        out = run_recorded(setup, setup.candidate, inputs, checked, grad)
        _check_unchanged(inputs, snapshot, "mutates-input")
        _check_unchanged(state, held, "writes-reference")  # only a kernel writing past its own tensors can
        del snapshot, held
        _check_plain_tensors(out)
        _check_no_alias(out, inputs)
        expected = reference_outputs(setup, inputs, checked if first and call == 1 else None)
        try:
            with torch.no_grad():
                _check_structure(out, expected)
                judge(setup, inputs, out, expected, checked)
        except Failed as e:
            if call == 1:
                raise
            if prints[0] == fingerprint(out) and prints[1] != fingerprint(expected):
                raise Failed("rejected", RUNTIME_REASONS["stale-output"]) from None
            raise e.reworded(f"on the second call, after part of its inputs changed in place, {e}") from None
        if call == 1:
            with torch.no_grad():
                prints = fingerprint(out), fingerprint(expected)
        del out, expected
    _check_torch_work(setup, checked)


def reference_outputs(setup: Setup, inputs: list, checked: Checked | None = None):
    """The reference's outputs; with `checked`, the ATen ops it ran are recorded there."""
    recorder = OpRecorder(setup.launches, poison=False)
    try:
        with torch.no_grad(), recorder:
            expected = setup.reference(*inputs)
        _sync(setup.device)
    except Exception as e:  # the task's own code: no candidate can be judged on it
        lines = str(e).strip().splitlines() or [""]
        raise Failed("error", f"The task's reference failed on the evaluator's inputs ({type(e).__name__}: "
                              f"{lines[-1][:200]})", task_error=True) from None
    fault = output_fault(expected)
    if fault:
        raise Failed("error", fault, task_error=True)
    if checked is not None:
        checked.reference_ops = recorder.compute_ops()
        checked.ignored = min(recorder.ignored, default=None)
    return expected


def golden_outputs(setup: Setup, inputs: list, expected, dtype: torch.dtype = torch.float32):
    """The reference module and its inputs cast to `dtype` and run again: float32 when an output is bf16 or
    fp16, float64 when one is fp32 or an integer (and no explicit atol/rtol says otherwise); None otherwise, and
    where the reference cannot run in that dtype (it fixes its own dtypes, or the copy does not fit): such a task
    is judged by the dtype's tolerances against PyTorch's result, and a failure there says so, and why
    (`no_golden`: a GPU short of memory for the copy has made an honest kernel look wrong)."""
    judged = LOW_PRECISION if dtype == torch.float32 else (torch.float32,)
    integer = dtype == torch.float64  # and a float64 run for integer outputs (their ties)
    if setup.explicit_tolerance or setup.golden.get(dtype) is False or not any(
            r.dtype in judged or integer and exact(r) for r in tensors(expected)):
        return None
    try:
        if dtype not in setup.golden:
            setup.golden[dtype] = copy.deepcopy(setup.reference).to(dtype)
        with torch.no_grad():
            golden = setup.golden[dtype](*[x.detach().to(dtype) if isinstance(x, torch.Tensor) and
                                           x.is_floating_point() else x for x in inputs])
        _sync(setup.device)
    except Exception as e:
        setup.golden[dtype] = False
        setup.no_golden = f"the {str(dtype).replace('torch.', '')} run failed ({type(e).__name__}: " \
                          f"{(str(e).strip().splitlines() or [''])[0][:160]})"
        return None
    if tree_flatten(golden)[1] != tree_flatten(expected)[1]:
        return None
    return golden


def judge(setup: Setup, inputs: list, out, expected, checked: Checked) -> None:
    """Raises Failed where `out` is not an acceptable answer to `inputs`: bf16 and fp16 outputs against an fp32
    run; fp32 outputs within their tolerance of the reference or, failing that, within the rule of
    tools/compare.py against a float64 run, which PyTorch's own fp32 result must meet too. Where the reference
    sorts or selects (tools/ties.py), its runs with ties broken by index are an answer too."""
    try:
        _judge(setup, inputs, out, expected, checked)
    except Failed as e:
        if not TIE_OPS & {op_base(o) for o in checked.reference_ops}:
            raise
        with torch.no_grad(), IndexOrder():
            ordered = setup.reference(*inputs)
            try:
                _judge(setup, inputs, out, ordered, checked)
            except Failed:
                raise e from None


def _judge(setup: Setup, inputs: list, out, expected, checked: Checked) -> None:
    golden, figures = golden_outputs(setup, inputs, expected), (checked.max_abs_err, checked.rel_err)
    run = "float32"  # the wider run's dtype: fp32 for bf16 and fp16 outputs, float64 for fp32 ones below
    try:
        compare(out, expected, setup.tolerance, checked, golden, setup.own_tolerances)
    except Failed as e:
        if golden is not None and e.own_rel_err is not None:  # a bf16 or fp16 output less accurate than PyTorch's
            _judgeable(e.own_rel_err, run, golden)  # no nudged samples: see NUDGES
            raise
        outs, refs, wider = tensors(out), tensors(expected), None
        if golden is None and len(outs) == len(refs) and any(
                r.dtype == torch.float32 or exact(r) for r in refs) and all(
                y.shape == r.shape and y.dtype == r.dtype for y, r in zip(outs, refs)):  # a question of accuracy
            wider = golden_outputs(setup, inputs, expected, torch.float64)
        if wider is None and setup.no_golden and any(r.dtype in LOW_PRECISION for r in refs):
            raise e.reworded(f"{str(e).rstrip('.')}; judged against PyTorch's own result within the dtype's "
                             f"tolerance, since {setup.no_golden}.") from None
        if wider is None:
            raise
        checked.max_abs_err, checked.rel_err = figures  # the errors recorded are those against the float64 run
        try:
            compare(out, expected, setup.tolerance, checked, wider, setup.own_tolerances)
        except Failed as math:
            failure = Failed("incorrect", f"{str(e).rstrip('.')}; and against a float64 run, {math}",
                             rel_err=math.rel_err, own_rel_err=math.own_rel_err)
            if math.own_rel_err is None:
                raise failure from None
            return _second_opinion(setup, inputs, out, wider, failure, checked)
        golden, run = wider, "float64"
    if golden is not None:
        _judgeable(checked.own_rel_err, run, golden)


def _second_opinion(setup: Setup, inputs: list, out, wider, failure: Failed, checked: Checked) -> None:
    """`out`, an fp32 result, failed the rule against the float64 run `wider`, PyTorch's result being one sample
    of rounding (`failure`, PyTorch's error in it). The reference runs again on its inputs and weights nudged by
    up to an ulp, up to NUDGES times: a sample CHAOTIC or more off is a task error (_judgeable); a sample `out`
    meets the rule against makes it as good as one of PyTorch's results; otherwise `failure` stands."""
    _judgeable(failure.own_rel_err, "float64", wider)
    errors = []
    for i in range(NUDGES):
        sample = nudged_outputs(setup, inputs, i)
        if sample is None:
            break
        errors.append(max((_relative_error(y, g) for y, g in zip(tensors(sample), tensors(wider))
                           if y.dtype == torch.float32 and g.dtype == torch.float64), default=0.0))
        _judgeable(failure.own_rel_err, "float64", wider, errors[-1])
        attempt = Checked()
        try:
            compare(out, sample, setup.tolerance, attempt, wider, setup.own_tolerances)
        except Failed:
            continue
        checked.max_abs_err, checked.rel_err = (max(checked.max_abs_err, attempt.max_abs_err),
                                                max(checked.rel_err, attempt.rel_err))
        checked.own_rel_err = max(checked.own_rel_err or 0.0, attempt.own_rel_err or 0.0)
        return
    if not errors:
        raise failure
    raise failure.reworded(f"{str(failure).rstrip('.')}; and against PyTorch's result on its inputs and weights "
                           f"moved by up to an ulp, {len(errors)} times (its relative errors against the float64 run "
                           f"{', '.join(f'{x:.1e}' for x in errors)})") from None


def _judgeable(own: float | None, run: str, golden, nudged: float | None = None) -> None:
    """Raises Failed('error') where PyTorch's own result is CHAOTIC or more off the wider run `golden` (its dtype
    `run`) in norm, as computed or on nudged inputs (`nudged`): there rounding decides the result. Where the run
    has an fp32 output held to more than LOW_FACTOR in norm (compare.norm_factor), the line is 1 over that."""
    factor = max((norm_factor(torch.float32, g.numel()) for g in tensors(golden) if g.dtype == torch.float64),
                 default=LOW_FACTOR)
    if max(own or 0.0, nudged or 0.0) < 1 / factor:
        return
    second = f" ({nudged:.1e} with its inputs and weights moved by up to an ulp)" if nudged else ""
    raise Failed("error", f"The task cannot judge a result on these inputs: PyTorch's own output has a relative error "
                          f"of {own or 0:.1e} against a {run} run{second}, 1/{factor:g} of the result or more, so "
                          f"{factor:g}x that, the rule's bound, is as far off as a zero output: rounding decides it, "
                          f"not the inputs; no verdict and no speedup are given", task_error=True)


def nudged_outputs(setup: Setup, inputs: list, seed: int):
    """The reference's outputs on its inputs and weights, each element moved by up to one unit in the last place
    of its dtype (the moves drawn from `seed`): another sample of what rounding does to its result. None where
    that run fails (the first sample stands; the task's own failure shows in its trials)."""
    gen = torch.Generator(device=setup.device).manual_seed(seed)
    try:
        if setup.nudged is None:
            setup.nudged = copy.deepcopy(setup.reference)
        with torch.no_grad():
            for mine, theirs in zip(setup.nudged.state_dict().values(), setup.reference.state_dict().values()):
                mine.copy_(_nudge(theirs, gen))
            out = setup.nudged(*[_nudge(x, gen) for x in inputs])
        _sync(setup.device)
    except Exception:  # noqa: BLE001
        return None
    return out


def _nudge(x, gen: torch.Generator):
    """A floating tensor with each element moved by up to one unit in the last place, at random; others as they are."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
        return x
    wide = x.detach().to(torch.promote_types(x.dtype, torch.float32))
    factors = torch.rand(wide.shape, generator=gen, device=wide.device, dtype=wide.dtype)  # one tensor, in place:
    factors.mul_(2).sub_(1).mul_(torch.finfo(x.dtype).eps / 2).add_(1)  # 1 +- a unit roundoff (at most an ulp)
    return factors.mul_(wide).to(x.dtype)


def _relative_error(y: torch.Tensor, g: torch.Tensor) -> float:
    """||y - g|| / ||g|| over the elements where both are finite, piece by piece."""
    diff_sq = gold_sq = torch.zeros((), dtype=torch.float64, device=g.device)
    for a, b in _pieces(y, g):
        keep = torch.isfinite(a) & torch.isfinite(b)
        b64 = torch.where(keep, b.double(), 0.0)
        d = torch.where(keep, a.double() - b64, 0.0)
        diff_sq, gold_sq = diff_sq + d @ d, gold_sq + b64 @ b64
    return (diff_sq / gold_sq).sqrt().item() if gold_sq > 0 else 0.0


def run_recorded(setup: Setup, model, inputs: list, checked: Checked, grad: bool = False):
    """Runs the candidate under the op recorder (with grad enabled or not); poisons its allocations; enforces
    the launch rules."""
    launches, foreign = setup.launches.count, setup.launches.foreign_streams
    recorder = OpRecorder(setup.launches)
    with torch.set_grad_enabled(grad), recorder:
        out = model(*inputs)
    _sync(setup.device)
    if setup.launches.count == launches:
        raise Failed("rejected", RUNTIME_REASONS["no-kernel"])
    if setup.launches.foreign_streams > foreign:
        raise Failed("rejected", RUNTIME_REASONS["side-stream"])
    changed = [k for k, v in precision_flags().items() if setup.precision and setup.precision[k] != v]
    if changed:
        raise Failed("rejected", RUNTIME_REASONS["precision-flags"].format(flags=", ".join(changed)))
    checked.torch_ops = sorted(set(checked.torch_ops) | set(recorder.compute_ops()))
    if not checked.reference_ops:  # the task only moves data: that movement is the kernels' work
        for i, y in enumerate(tensors(out)):
            op = recorder.copies.get(y.untyped_storage().data_ptr()) if y.numel() else None
            if op is not None:
                raise Failed("rejected", RUNTIME_REASONS["copied-output"].format(which=i, op=op))
    return out


def _check_plain_tensors(out) -> None:
    """Every tensor the candidate returns is a torch.Tensor itself, not a subclass that computes on access."""
    leaves, _ = tree_flatten(out)
    for i, y in enumerate(leaves):
        if isinstance(y, torch.Tensor) and type(y) is not torch.Tensor:
            raise Failed("rejected", RUNTIME_REASONS["output-type"].format(which=i, type=type(y).__name__))


def _check_structure(out, expected) -> None:
    """The candidate returns what the reference returns: the same nesting of tensors, on the same device."""
    (ys, out_spec), (rs, ref_spec) = tree_flatten(out), tree_flatten(expected)
    if _nesting(out_spec) != _nesting(ref_spec):
        raise Failed("incorrect", f"it returned {_kind(out)} where the reference returns {_kind(expected)}.")
    for i, (y, r) in enumerate(zip(ys, rs)):
        if isinstance(r, torch.Tensor) and isinstance(y, torch.Tensor) and y.device != r.device:
            raise Failed("incorrect", f"output {i} is on {y.device}, the reference's on {r.device}.")


def _nesting(spec) -> tuple:
    """A pytree spec as plain tuples, a namedtuple's type as its name and fields: the candidate's copy of the
    task's namedtuple class is another class object of the same name and fields."""
    children = tuple(_nesting(c) for c in (spec.children() if hasattr(spec, "children") else spec.children_specs))
    named = next((k for k in (spec.type, spec.context) if isinstance(k, type) and issubclass(k, tuple) and
                  hasattr(k, "_fields")), None)  # pytree keeps the class as the type or as the context
    if named is not None:
        return (named.__qualname__, tuple(named._fields)), children
    return spec.type, spec.context, children


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return "a Tensor"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _check_torch_work(setup: Setup, checked: Checked) -> None:
    """The candidate may keep only declared vendor GEMM/convolution ops in PyTorch, and not all the work."""
    declared = {op_base(o) for o in setup.declared_ops}
    undeclarable = sorted(declared - DECLARABLE_OPS)
    if undeclarable:
        raise Failed("rejected", RUNTIME_REASONS["undeclarable"].format(ops=", ".join(undeclarable)))
    undeclared = [o for o in checked.torch_ops if op_base(o) not in declared]
    if undeclared:
        raise Failed("rejected", RUNTIME_REASONS["torch-compute"].format(ops=", ".join(undeclared)))
    reference = {op_base(o) for o in checked.reference_ops}
    if checked.torch_ops and reference <= {op_base(o) for o in checked.torch_ops}:
        raise Failed("rejected", RUNTIME_REASONS["all-in-torch"].format(ops=", ".join(checked.torch_ops)))


def _snapshot(inputs: list) -> list:
    """What to compare the inputs with after the candidate ran: a copy of each, or, when the inputs are large,
    a keyed hash of each one's bits computed on its device (a second copy on the GPU would double the inputs'
    memory, and a copy through the host took seconds per GiB)."""
    held = [x for x in inputs if isinstance(x, torch.Tensor)]
    if sum(x.numel() * x.element_size() for x in held) > HASH_ABOVE_BYTES:
        key = draw_seed()
        return [BitsHash(x, key) if isinstance(x, torch.Tensor) else x for x in inputs]
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _check_unchanged(inputs: list, snapshot: list, rule: str) -> None:
    for i, (x, x0) in enumerate(zip(inputs, snapshot)):
        if not isinstance(x, torch.Tensor):
            continue
        if isinstance(x0, BitsHash):
            same = x0.matches(x)
        else:
            same = x.shape == x0.shape and x.dtype == x0.dtype and all(
                torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in _pieces(x.detach(), x0))
        if not same:
            raise Failed("rejected", RUNTIME_REASONS[rule].format(which=i))


class BitsHash:
    """Two hashes of a tensor's bits, each sum(h[i] * w[i]) mod P over its 16-bit halves h (bytes for 1-byte
    dtypes), with weights w drawn from `key`, which the evaluator draws from the operating system after the
    candidate is loaded. Two halves differ by less than P, so any change of the bits escapes one hash with
    probability 1/P, both with 1/P^2. Computed in pieces on the tensor's device, in exact integers."""

    P = (1 << 31) - 1  # a prime; a product of a 16-bit half and a weight stays under 2^47

    def __init__(self, x: torch.Tensor, key: int):
        self.shape, self.dtype, self.key = x.shape, x.dtype, key
        self.sums = self._sums(x)

    def matches(self, x: torch.Tensor) -> bool:
        return x.shape == self.shape and x.dtype == self.dtype and self._sums(x) == self.sums

    def _sums(self, x: torch.Tensor) -> tuple[int, int]:
        g = torch.Generator(device=x.device).manual_seed(self.key)
        sums = [torch.zeros((), dtype=torch.long, device=x.device) for _ in range(2)]
        for (a,) in _pieces(x.detach()):
            bits = a.contiguous().view(torch.int8 if a.element_size() == 1 else torch.int16).long()
            for k in range(2):
                w = torch.randint(0, self.P, bits.shape, generator=g, device=x.device)
                sums[k] = (sums[k] + w.mul_(bits).remainder_(self.P).sum()).remainder_(self.P)
        return int(sums[0].item()), int(sums[1].item())


def _check_no_alias(out, inputs: list) -> None:
    held = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    for i, y in enumerate(tensors(out)):
        if y.untyped_storage().data_ptr() in held:
            raise Failed("rejected", RUNTIME_REASONS["aliases-input"].format(which=i))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
