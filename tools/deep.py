"""`kernelwright eval --deep N`: a kernel that passed the trials, re-verified on N more input sets spread across
the input space, reporting the worst error and the input set that produced it.

    deep = deep_verify(setup, 8, checked)   # a DeepCheck; a failing set is reported there, never raised

Each set is one trial of tools/verify.py (two calls, the second after part of the inputs changed in place, every
runtime rule) on inputs the trials do not reach: magnitudes from 1e-3 to 1e3 (DEEP_SCALES), crossed with the
plain, shifted and masked patterns, each from its own seed. The sets derive from the evaluation's trial seed,
so `--trial-seed S --deep N` replays them; a task that must not be scaled (scale_inputs off) varies seeds only."""
from __future__ import annotations

from tools.compare import Failed
from tools.inputs import PATTERNS, Draw
from tools.results import MAX_DEEP_SETS, DeepCheck
from tools.verify import Checked, Setup, trial

DEEP_SCALES = (1e3, 1e-3, 100.0, 0.01, 30.0, 0.1, 3.0, 1.0)  # crossed with PATTERNS: 24 kinds of set
DEEP_SEED_OFFSET = 500  # deep set i draws from trial seed * 1000 + 500 + i (the trials use + t, 900 and up)


def deep_draw(seed: int, i: int, scale_inputs: bool, widen: str) -> Draw:
    if not scale_inputs:
        return Draw(seed * 1000 + DEEP_SEED_OFFSET + i, widen=widen)
    return Draw(seed * 1000 + DEEP_SEED_OFFSET + i, DEEP_SCALES[i % len(DEEP_SCALES)], PATTERNS[i % len(PATTERNS)],
                widen)


def deep_verify(setup: Setup, sets: int, checked: Checked) -> DeepCheck:
    """Runs `sets` deep sets after the trials passed (`checked`: their seed, widening and the reference's ops)."""
    if not 0 < sets <= MAX_DEEP_SETS:
        raise ValueError(f"--deep takes 1 to {MAX_DEEP_SETS} input sets, not {sets}")
    judged, failed, worst = 0, 0, None
    for i in range(sets):
        draw = deep_draw(checked.seed, i, setup.scale_inputs, checked.widen)
        errors = Checked(seed=checked.seed, widen=checked.widen, reference_ops=checked.reference_ops,
                         ignored=checked.ignored)
        verdict, reason = "", ""
        try:
            trial(setup, draw, errors, grad=False, first=False)
        except Failed as e:
            if e.task_error:  # the reference itself fails on this set: it cannot judge the candidate there
                continue
            verdict, reason = e.verdict, e.sentence()
        judged, failed = judged + 1, failed + bool(verdict)
        rank = (bool(verdict), errors.rel_err)
        if worst is None or rank > worst[0]:
            worst = (rank, errors, _describe(draw, i, sets, checked.seed), verdict, reason)
    if worst is None:
        return DeepCheck(0, 0, 0.0, 0.0, "the reference failed on every deep set")
    _, errors, where, verdict, reason = worst
    return DeepCheck(judged, failed, errors.rel_err, errors.max_abs_err, where, verdict, reason)


def _describe(draw: Draw, i: int, sets: int, seed: int) -> str:
    return f"deep set {i + 1} of {sets}: {draw.describe()}; trial seed {seed}"
