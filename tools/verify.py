"""Correctness: fresh seeded inputs per trial, the candidate run before and after the reference,
dtype-aware tolerances with a relative error norm, and the runtime anti-cheat rules."""
from __future__ import annotations

from dataclasses import dataclass, field

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
    torch.manual_seed(seed)
    with torch.device(setup.device):
        inputs = list(setup.task.get_inputs())
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = x.to(setup.device)
            if x.is_floating_point():
                x = (x.to(setup.dtype) if setup.dtype else x) * scale
        out.append(x)
    return out


def verify(setup: Setup, seed: int, trials: int) -> Checked:
    checked = Checked()
    for t in range(trials):
        scale = INPUT_SCALES[t % len(INPUT_SCALES)] if setup.scale_inputs else 1.0
        inputs = make_inputs(setup, seed * 1000 + t, scale)
        _trial(setup, inputs, checked, first=(t == 0))
    return checked


def _trial(setup: Setup, inputs: list, checked: Checked, first: bool) -> None:
    snapshot = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    before = run_recorded(setup, setup.candidate, inputs, checked)
    _check_inputs_unchanged(inputs, snapshot)
    _check_no_alias(before, inputs)
    recorder = OpRecorder(setup.launches, poison=False)
    with torch.no_grad(), recorder:
        expected = setup.reference(*inputs)
    _sync(setup.device)
    if first:
        checked.reference_ops = recorder.compute_ops()
    after = run_recorded(setup, setup.candidate, inputs, checked)
    _check_torch_work(setup, checked)
    for out in (before, after):
        compare(out, expected, setup.tolerance, checked)


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


def _check_inputs_unchanged(inputs: list, snapshot: list) -> None:
    for i, (x, x0) in enumerate(zip(inputs, snapshot)):
        if isinstance(x, torch.Tensor) and not torch.equal(x.nan_to_num(), x0.nan_to_num()):
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
            if not torch.equal(y, r):
                raise Failed("incorrect", f"{where} differs from the reference in {(y != r).sum().item()} of "
                                          f"{r.numel()} elements.")
            continue
        y64, r64 = y.double(), r.double()
        finite = torch.isfinite(r64)
        if not torch.equal(torch.isfinite(y64), finite) or not torch.equal(y64[~finite].nan_to_num(),
                                                                            r64[~finite].nan_to_num()):
            bad = (~torch.isfinite(y64) & finite).sum().item()
            raise Failed("incorrect", f"{where} has {bad} NaN or Inf elements where the reference is finite "
                                      f"(or an unwritten element).")
        y64, r64 = y64[finite], r64[finite]
        diff = (y64 - r64).abs()
        ref_norm = r64.norm().item()
        rms = ref_norm / max(r64.numel(), 1) ** 0.5
        max_err = diff.max().item() if diff.numel() else 0.0
        rel = diff.norm().item() / ref_norm if ref_norm > 0 else max_err
        checked.max_abs_err = max(checked.max_abs_err, max_err)
        checked.rel_err = max(checked.rel_err, rel)
        outside = diff > atol_frac * max(rms, 1e-30) + rtol * r64.abs()
        if rel > rel_bound or outside.any():
            raise Failed("incorrect", f"{where} differs from the reference: relative error {rel:.2e} "
                                      f"(bound {rel_bound:.0e}), max abs error {max_err:.2e}, "
                                      f"{int(outside.sum().item())} of {r.numel()} elements out of tolerance.")


def _tensors(value) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(value)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
