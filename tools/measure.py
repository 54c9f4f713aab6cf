"""The profile stage of the worker: the candidate's time, the eager and torch.compile baselines measured
in the same run (or reused from earlier in this run), the speed-of-light floor, and the checks that a
fast time is a true one."""
from __future__ import annotations

import torch

from tools.evaluate import cache_dir
from tools.profile import Measured, count_work, device_ceilings, floor_ms, matmul_key, time_call
from tools.rules import RUNTIME_REASONS
from tools.results import Baselines, EvalJob, Timing
from tools.inputs import CHANGED_ELEMENTS, Draw, Nudge, draw_seed, make_inputs
from tools.verify import Checked, Failed, Setup, judge, verify

SUSPICIOUS_BELOW = 0.95  # a time under this fraction of the floor is re-verified and flagged


def measure(setup: Setup, job: EvalJob, checked: Checked) -> tuple[Timing, Baselines, bool]:
    on_gpu = setup.device.type == "cuda"
    device_name = torch.cuda.get_device_name() if on_gpu else "cpu"
    inputs, candidate = _time_candidate(setup, checked)
    baselines = job.baselines if job.baselines and job.baselines.device == device_name else None
    if baselines is None:
        eager, compiled, error = _baseline_times(setup, inputs)
        baselines = Baselines(eager, compiled, device_name, error)

    flops, nbytes = count_work(setup.reference, inputs)
    del inputs  # a re-verification below makes its own
    floor = copy = None
    if on_gpu:
        ceilings = device_ceilings(cache_dir())
        floor = floor_ms(flops, nbytes, ceilings, matmul_key(setup.dtype or torch.float32, job.task.tf32))
        copy = nbytes / ceilings["copy_bytes_per_s"] * 1e3
    suspicious = floor is not None and candidate.median_ms < SUSPICIOUS_BELOW * floor
    if suspicious:
        verify(setup, job.trials + 2)  # fresh inputs; raises Failed if the fast result is not right

    ms = candidate.median_ms
    timing = Timing(
        ms=ms, eager_ms=baselines.eager_ms, compile_ms=baselines.compile_ms, floor_ms=floor,
        speedup_vs_eager=baselines.eager_ms / ms if on_gpu else None,
        speedup_vs_compile=baselines.compile_ms / ms if on_gpu and baselines.compile_ms else None,
        floor_fraction=floor / ms if floor else None, spread_pct=candidate.spread_pct, interpreted=not on_gpu,
        flops=flops, bytes=nbytes, copy_ms=copy)
    return timing, baselines, suspicious


def measure_at(setup: Setup, checked: Checked, known: list | None) -> tuple[float, float, float | None]:
    """On a GPU, at one more shape set (`--shapes`) where the kernel was just verified: its time and eager PyTorch's
    and torch.compile's there (`known`: [eager_ms, compile_ms] at this set from earlier in the run), on the set's
    own inputs, the time checked as at the task's own shapes (no results reused once a call count is reached)."""
    inputs, candidate = _time_candidate(setup, checked)
    eager, compiled = known or _baseline_times(setup, inputs)[:2]
    return candidate.median_ms, eager, compiled


def _time_candidate(setup: Setup, checked: Checked) -> tuple[list, Measured]:
    """The timing inputs (the evaluation's seed) and the candidate's time on them, its results then checked
    not stale."""
    inputs = make_inputs(setup, Draw(checked.seed * 1000 + 999, widen=checked.widen))
    nudge = Nudge(inputs, draw_seed())  # a result memoized under a hash of the inputs is computed at every run
    candidate = time_call(no_grad_call(setup.candidate, inputs), setup.device, before_each=nudge)
    check_not_stale(setup, inputs, checked)
    return inputs, candidate


def _baseline_times(setup: Setup, inputs: list) -> tuple[float, float | None, str]:
    """Eager PyTorch's time on `inputs`, torch.compile's (a GPU only) and why it has none, if it has none."""
    eager = time_call(no_grad_call(setup.reference, inputs), setup.device).median_ms
    compiled, error = _compiled_ms(setup, inputs) if setup.device.type == "cuda" else (None, "")
    return eager, compiled, error


def check_not_stale(setup: Setup, inputs: list, checked: Checked) -> None:
    """After the timing's many calls, the same input tensors changed at one element (CHANGED_ELEMENTS times over:
    a change may land in a cache's sample), then written with new values throughout, must each give the new
    answer: no results reused once a call count is reached, or while a sample of the inputs looks the same."""
    nudge = Nudge(inputs, draw_seed(), CHANGED_ELEMENTS)
    for _ in range(CHANGED_ELEMENTS):
        nudge()
        _follows(setup, inputs)
    fresh = make_inputs(setup, Draw(checked.seed * 1000 + 998, 2.0 if setup.scale_inputs else 1.0,
                                    widen=checked.widen))
    with torch.no_grad():
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                x.copy_(fresh[i])
    del fresh  # the new values live on in `inputs` only
    _follows(setup, inputs)


def _follows(setup: Setup, inputs: list) -> None:
    with torch.no_grad():
        out = setup.candidate(*inputs)
        expected = setup.reference(*inputs)
    try:
        judge(setup, inputs, out, expected, Checked())
    except Failed:
        raise Failed("rejected", RUNTIME_REASONS["stale-output"]) from None


def _compiled_ms(setup: Setup, inputs: list) -> tuple[float | None, str]:
    """torch.compile's time for the reference, or None and why not (a reference torch.compile cannot handle
    has no compile baseline; eager still stands); the compiled code and what it holds are dropped afterwards."""
    try:
        compiled = torch.compile(setup.reference)
        with torch.no_grad():
            compiled(*inputs)
        return time_call(no_grad_call(compiled, inputs), setup.device).median_ms, ""
    except Exception as e:
        lines = str(e).strip().splitlines() or [""]
        return None, f"{type(e).__name__}: {lines[0][:300]}"
    finally:
        torch._dynamo.reset()


def no_grad_call(model, inputs):
    """model(*inputs) under torch.no_grad, as a call of no arguments for time_call."""
    def call():
        with torch.no_grad():
            return model(*inputs)
    return call
