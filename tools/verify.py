"""Correctness: fresh seeded inputs per trial, the candidate run before and after the reference,
dtype-aware tolerances with a relative error norm, and the runtime anti-cheat rules.

Memory: a trial holds the inputs, at most two outputs and the task's parameters (the reference's and the
candidate's), never a second copy of the inputs on the GPU once they are large (the snapshot that catches
mutation goes to the host), and comparisons walk the tensors in pieces (PIECES), so their float64
temporaries take under a byte per output element (a fifth of an fp32 output), never the eight of a copy."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.utils._pytree import tree_flatten

from tools.guard import LaunchRecorder, OpRecorder
from tools.rules import DECLARABLE_OPS, RUNTIME_REASONS, op_base

# dtype: (atol as a fraction of the reference's RMS, rtol, bound on ||out - ref|| / ||ref||)
TOLERANCES = {
    torch.float64: (1e-9, 1e-9, 1e-10),
    torch.float32: (1e-4, 1e-4, 2e-5),
    torch.float16: (1e-2, 1e-2, 2e-3),
    torch.bfloat16: (2e-2, 2e-2, 1e-2),
}
TF32_TOLERANCE = (1e-2, 1e-2, 2e-3)
INPUT_SCALES = (1.0, 1.0, 4.5, 0.3, 1.7, 9.0)  # magnitude of float inputs per trial
PIECES, MIN_PIECE = 64, 1 << 16  # comparisons walk a tensor in 64 pieces of at least 64Ki elements
HOST_SNAPSHOT_BYTES = 256 << 20  # GPU inputs larger than this in all are snapshotted on the host


class Failed(Exception):
    """A verification failure: `verdict` is 'incorrect' or 'rejected', the message one sentence."""

    def __init__(self, verdict: str, reason: str):
        super().__init__(reason)
        self.verdict = verdict


@dataclass
class Checked:
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    torch_ops: list[str] = field(default_factory=list)
    reference_ops: list[str] = field(default_factory=list)


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


def make_inputs(setup: Setup, seed: int, scale: float = 1.0) -> list:
    """The task's inputs for one trial, on the device, cast and scaled. Each input is replaced in the list as
    soon as its scaled copy exists, so one input at most is held twice, and only for a moment (scaling in
    place could compound on a tensor that get_inputs() returns every time)."""
    torch.manual_seed(seed)
    with torch.device(setup.device):
        inputs = list(setup.task.get_inputs())
    for i in range(len(inputs)):
        if isinstance(inputs[i], torch.Tensor):
            inputs[i] = inputs[i].to(setup.device)
            if inputs[i].is_floating_point():
                if setup.dtype:
                    inputs[i] = inputs[i].to(setup.dtype)
                inputs[i] = inputs[i] * scale  # a copy even at 1.0: trials never share get_inputs()' tensors
    return inputs


def verify(setup: Setup, seed: int, trials: int) -> Checked:
    checked = Checked()
    for t in range(trials):
        scale = INPUT_SCALES[t % len(INPUT_SCALES)] if setup.scale_inputs else 1.0
        _trial(setup, make_inputs(setup, seed * 1000 + t, scale), checked, first=(t == 0))  # inputs die with it
    return checked


def _trial(setup: Setup, inputs: list, checked: Checked, first: bool) -> None:
    """Candidate, reference, candidate again; each output is compared, then let go, as soon as it can be."""
    snapshot = _snapshot(inputs)
    before = run_recorded(setup, setup.candidate, inputs, checked)
    _check_inputs_unchanged(inputs, snapshot)
    del snapshot
    _check_no_alias(before, inputs)
    recorder = OpRecorder(setup.launches, poison=False)
    with torch.no_grad(), recorder:
        expected = setup.reference(*inputs)
    _sync(setup.device)
    if first:
        checked.reference_ops = recorder.compute_ops()
    compare(before, expected, setup.tolerance, checked)
    del before
    after = run_recorded(setup, setup.candidate, inputs, checked)
    _check_torch_work(setup, checked)
    compare(after, expected, setup.tolerance, checked)


def run_recorded(setup: Setup, model, inputs: list, checked: Checked):
    """Runs the candidate under the op recorder; poisons its allocations; enforces the launch rules."""
    launches, foreign = setup.launches.count, setup.launches.foreign_streams
    recorder = OpRecorder(setup.launches)
    with torch.no_grad(), recorder:
        out = model(*inputs)
    _sync(setup.device)
    if setup.launches.count == launches:
        raise Failed("rejected", RUNTIME_REASONS["no-kernel"])
    if setup.launches.foreign_streams > foreign:
        raise Failed("rejected", RUNTIME_REASONS["side-stream"])
    checked.torch_ops = sorted(set(checked.torch_ops) | set(recorder.compute_ops()))
    return out


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
    """Copies of the inputs to compare with after the candidate ran: on the host when large GPU inputs
    would otherwise be held twice on the device."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    host = any(x.is_cuda for x in tensors) and sum(x.numel() * x.element_size() for x in tensors) > HOST_SNAPSHOT_BYTES
    return [(x.to("cpu", copy=True) if host else x.clone()) if isinstance(x, torch.Tensor) else x for x in inputs]


def _check_inputs_unchanged(inputs: list, snapshot: list) -> None:
    for i, (x, x0) in enumerate(zip(inputs, snapshot)):
        if not isinstance(x, torch.Tensor):
            continue
        same = x.shape == x0.shape and x.dtype == x0.dtype and all(
            torch.equal(a.nan_to_num(), b.to(a.device).nan_to_num()) for a, b in _pieces(x, x0))
        if not same:
            raise Failed("rejected", RUNTIME_REASONS["mutates-input"].format(which=i))


def _check_no_alias(out, inputs: list) -> None:
    held = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    for i, y in enumerate(_tensors(out)):
        if y.untyped_storage().data_ptr() in held:
            raise Failed("rejected", RUNTIME_REASONS["aliases-input"].format(which=i))


def compare(out, expected, tolerance: tuple[float, float, float], checked: Checked) -> None:
    outs, refs = _tensors(out), _tensors(expected)
    if len(outs) != len(refs):
        raise Failed("incorrect", f"it returned {len(outs)} tensors where the reference returns {len(refs)}.")
    atol_frac, rtol, rel_bound = tolerance
    for i, (y, r) in enumerate(zip(outs, refs)):
        where = f"output {i}" if len(refs) > 1 else "the output"
        if y.shape != r.shape:
            raise Failed("incorrect", f"{where} has shape {tuple(y.shape)}, the reference {tuple(r.shape)}.")
        if y.dtype != r.dtype:
            raise Failed("incorrect", f"{where} has dtype {y.dtype}, the reference {r.dtype}.")
        if not (r.is_floating_point() or r.is_complex()):
            if not all(torch.equal(a, b) for a, b in _pieces(y, r)):
                differ = sum(int((a != b).sum().item()) for a, b in _pieces(y, r))
                raise Failed("incorrect", f"{where} differs from the reference in {differ} of "
                                          f"{r.numel()} elements.")
            continue
        bad, mismatched, ref_sq, finite = _finite_pattern(y, r)
        if mismatched:
            raise Failed("incorrect", f"{where} has {bad} NaN or Inf elements where the reference is finite "
                                      f"(or an unwritten element).")
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


def _finite_pattern(y: torch.Tensor, r: torch.Tensor) -> tuple[int, bool, float, int]:
    """(elements non-finite in y where r is finite, whether y's non-finite elements differ from r's at all,
    the sum of squares of r's finite elements, how many there are), piece by piece, one sync at the end."""
    bad = mismatched = finite = torch.zeros((), dtype=torch.long, device=r.device)
    ref_sq = torch.zeros((), dtype=torch.float64, device=r.device)
    for a, b in _pieces(y, r):
        fin_a, fin_b = torch.isfinite(a), torch.isfinite(b)
        bad = bad + (fin_b > fin_a).sum()
        mismatched = mismatched + (fin_a != fin_b).sum() + ((a.nan_to_num() != b.nan_to_num()) > fin_b).sum()
        finite = finite + fin_b.sum()
        b64 = b.nan_to_num(0.0, 0.0, 0.0).double()
        ref_sq = ref_sq + b64 @ b64
    return int(bad.item()), bool(mismatched.item()), float(ref_sq.item()), int(finite.item())


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


def _pieces(x: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The same elements of two tensors of one shape, in order, as flat pieces of about 1/PIECES of them (at
    least MIN_PIECE; an innermost run longer than a piece is cut too); only a piece is ever copied."""
    for index in _slices(tuple(x.shape), max(MIN_PIECE, x.numel() // PIECES)):
        if x.numel():
            yield x[index].reshape(-1), y[index].reshape(-1)


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


def _tensors(value) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(value)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
