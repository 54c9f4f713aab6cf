"""Timing, in one place: `time_call` times GPU work (or the interpreter's), `host_us` what the host spends
launching it. Plus the FLOP and byte counts of a task, the device's measured ceilings (cached per device), and
the speed-of-light floor."""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._pytree import tree_flatten

L2_STATES = ("dirty", "clean")  # what the flush before a timed GPU call leaves in the L2 (time_call)
L2_FLUSH_BYTES = 128 << 20  # twice the L2 where the device does not say (H100: 50 MB, H200: 60 MB)
TARGET_MS = 400.0  # time spent on the repetitions of one measurement
RETIME_SPREAD = 15.0  # a GPU measurement spread wider than this (percent) is taken once more
HEAD_START_MAX_MS = 2.0  # the longest the GPU is kept busy ahead of a timed call (host time beyond it shows)


@dataclass
class Measured:
    median_ms: float
    spread_pct: float  # (p80 - p20) / median
    reps: int


def time_call(fn, device: torch.device, target_ms: float = TARGET_MS, max_reps: int = 1000,
              l2: str = "dirty", before_each=None) -> Measured:
    """Median time of fn(). On a GPU: its GPU time, CUDA events around each call, L2 flushed before each, all
    streams synchronized, and the GPU kept busy (head_start_ms) while the host launches the call, so that the
    host's speed does not show; on a CPU: wall time (the Triton interpreter's, never a GPU figure).
    `l2` is the state the flush leaves: "dirty" (the default, behind every figure kernelwright reports: a
    buffer of twice the L2 is written, as a model's previous kernel leaves it) or "clean" (the buffer is only
    read; benchmarks/l2_state_bench.py). A small kernel pays for the dirty lines it evicts: on an H200 (session
    28) a device copy of 32 MB each way ran 0.0212 ms after the writing flush and 0.0186 after the reading one;
    2.7% apart at 256 MB, 0.6% at 1 GB. `before_each`, if given, runs before each timed call, outside its
    time (a candidate's inputs changed at one element: tools/inputs.Nudge)."""
    if l2 not in L2_STATES:
        raise ValueError(f"l2 must be one of {', '.join(L2_STATES)}, not {l2!r}")
    if device.type == "cuda":
        return steadier(lambda: _time_cuda(fn, target_ms, max_reps, l2, before_each or _nothing))
    return _time_cpu(fn, target_ms, before_each or _nothing)


def _nothing() -> None:
    pass


def host_us(fn, calls: int = 100) -> float:
    """The host's time per call of fn() in microseconds, the calls queued back to back (their GPU work runs
    behind them, unless a call waits for it): what a call costs the CPU whatever its GPU time."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return host


def steadier(run) -> Measured:
    """run()'s measurement, or where its spread is over RETIME_SPREAD, the steadier of it and a second run: on an
    H200 a 40 us softmax once measured 0.071 ms at a 32% spread, where its other runs gave 0.039 ms at 3%.
    Every GPU time (candidate, eager, compile, ceilings) goes through this rule alike."""
    first = run()
    if first.spread_pct <= RETIME_SPREAD:
        return first
    return min(first, run(), key=lambda m: m.spread_pct)


def l2_flush_bytes() -> int:
    """The buffer written (or read) before each timed run to empty the L2 cache: twice the L2, a fixed small
    allowance beside the task's own memory."""
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
    return 2 * l2 if l2 else L2_FLUSH_BYTES


def head_start_ms(host_ms: float) -> float:
    """How long the GPU spins before each timed call, given the host's time to launch one: long enough that the
    whole call is queued before its start event, up to HEAD_START_MAX_MS. Without it, a call's host time showed
    in its GPU time whenever it outlasted the L2 flush: on an H200, a 4096x4096 RMSNorm whose kernel ran 17 us
    measured 30 us, eager, compile and Liger alike in part, by how fast the machine's CPU was."""
    return min(HEAD_START_MAX_MS, 1.5 * host_ms + 0.02)


def _time_cuda(fn, target_ms: float, max_reps: int, l2: str, before_each) -> Measured:
    buffer = torch.empty(l2_flush_bytes(), dtype=torch.uint8, device="cuda")
    flush = buffer.zero_ if l2 == "dirty" else lambda: torch.amax(buffer.view(torch.int32))
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(3):
        fn()
    end.record()
    host_ms = (time.perf_counter() - t0) * 1e3 / 3
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-3)
    spin = round(head_start_ms(host_ms) * _cycles_per_ms())
    reps = int(min(max_reps, max(10, target_ms / estimate)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        before_each()
        flush()
        torch.cuda._sleep(spin)
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return _summarize([s.elapsed_time(e) for s, e in zip(starts, ends)])


_CYCLES_PER_MS: dict[int, float] = {}


def _cycles_per_ms() -> float:
    """The current GPU's spin-loop cycles per millisecond (torch.cuda._sleep counts clock cycles), measured once
    per device and process."""
    device = torch.cuda.current_device()
    if device not in _CYCLES_PER_MS:
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # the first launch loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        _CYCLES_PER_MS[device] = cycles / max(start.elapsed_time(end), 1e-3)
    return _CYCLES_PER_MS[device]


def _time_cpu(fn, target_ms: float, before_each) -> Measured:
    fn()
    times = []
    budget_end = time.perf_counter() + target_ms / 1e3
    while len(times) < 3 or (time.perf_counter() < budget_end and len(times) < 50):
        before_each()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return _summarize(times)


def _summarize(times: list[float]) -> Measured:
    times = sorted(times)
    median = statistics.median(times)
    p20, p80 = times[int(0.2 * (len(times) - 1))], times[int(0.8 * (len(times) - 1))]
    return Measured(median, 100.0 * (p80 - p20) / median if median > 0 else 0.0, len(times))


def rnn_flops(input_shape, *args, out_shape=None, **kwargs) -> int:
    """A recurrent layer's FLOPs, which PyTorch's counter has no formula for (it counted 0, so a level-3 LSTM sat
    at 30,000x "its floor"): each 2-D weight of its weight lists (gates x inputs, each layer and direction) is
    a GEMM over every step of every sequence. The gate math is elementwise and left out, as for any GEMM."""
    steps = 1
    for d in input_shape[:-1]:
        steps *= d
    weights = [w for a in args if isinstance(a, (list, tuple)) for w in a if isinstance(w, torch.Size) and len(w) == 2]
    return sum(2 * steps * w[0] * w[1] for w in weights)


def mkldnn_rnn_flops(input_shape, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
    """One layer and direction of an LSTM on a CPU (aten.mkldnn_rnn_layer): its two weights, as rnn_flops."""
    return rnn_flops(input_shape, [w_ih, w_hh])


RNN_OPS = ("lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn")  # the counter looks ops up by packet


def count_work(model: torch.nn.Module, inputs: list) -> tuple[float, float]:
    """(FLOPs of the reference, minimum bytes: inputs and parameters read once, outputs written once)."""
    from torch.utils.flop_counter import FlopCounterMode
    formulas = {getattr(torch.ops.aten, name): rnn_flops for name in RNN_OPS}
    formulas[torch.ops.aten.mkldnn_rnn_layer] = mkldnn_rnn_flops
    counter = FlopCounterMode(display=False, custom_mapping=formulas)
    with torch.no_grad(), counter:
        out = model(*inputs)
    seen, total = set(), 0
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + list(model.parameters()) + list(model.buffers())
    for t in tensors + [y for y in tree_flatten(out)[0] if isinstance(y, torch.Tensor)]:
        key = (t.untyped_storage()._cdata, t.storage_offset())  # the storage itself: a meta tensor has no address
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return float(counter.get_total_flops()), float(total)


MEMORY_SHARE = 0.97  # a floor whose bytes take this share of it is their floor: the task is memory-bound


def bytes_bound(memory_ms: float | None, floor: float | None) -> bool:
    """Whether a floor is its bytes at the copy bandwidth (`memory_ms`, its memory part), not its products: two
    H200s measured their copy bandwidth 1.6% apart (4.18 and 4.25 TB/s), and the nearest compute-bound
    KernelBench task's bytes took 94% of its floor (level 1's 59_conv_standard_3D)."""
    return bool(memory_ms and floor and memory_ms >= MEMORY_SHARE * floor)


def floor_ms(flops: float, nbytes: float, ceilings: dict, matmul_key: str) -> float:
    """The speed-of-light time of `flops` and `nbytes`, whichever takes longer. fp32 products at fp32's
    accuracy run at the faster of the FMA units (cuBLAS's fp32) and a third of the TF32 tensor cores' rate:
    three TF32 products of operands split into high and low parts (agent/templates/split_operands.py) ran
    1.8x cuBLAS's fp32 on an H200 (session 33), which a floor from the FMA rate alone called 187% of it."""
    rate = ceilings[matmul_key]
    if matmul_key == "matmul_fp32_flops":
        rate = max(rate, ceilings.get("matmul_tf32_flops", 0.0) / 3)
    return max(flops / rate, nbytes / ceilings["copy_bytes_per_s"]) * 1e3


def matmul_key(dtype: torch.dtype, tf32: bool) -> str:
    if dtype in (torch.float16, torch.bfloat16):
        return "matmul_half_flops"
    return "matmul_tf32_flops" if tf32 else "matmul_fp32_flops"


def device_ceilings(cache_dir: Path) -> dict:
    """Copy bandwidth (bytes read + written per second) and matmul rates, measured once per device."""
    name = torch.cuda.get_device_name()
    path = cache_dir / "ceilings.json"
    cached = json.loads(path.read_text()) if path.exists() else {}
    key = f"{name} | torch {torch.__version__}"
    if key not in cached:
        cached[key] = _measure_ceilings()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1))
        tmp.replace(path)
    return cached[key]


def _measure_ceilings() -> dict:
    n = 1 << 28  # 1 GiB of fp32
    pair = [torch.randn(n, device="cuda"), torch.empty(n, device="cuda")]
    copy = time_call(lambda: pair[1].copy_(pair[0]), torch.device("cuda")).median_ms
    pair.clear()
    rates = {"copy_bytes_per_s": 2 * 4 * n / (copy * 1e-3)}
    m = 8192
    for key, dtype, tf32 in [("matmul_fp32_flops", torch.float32, False), ("matmul_tf32_flops", torch.float32, True),
                             ("matmul_half_flops", torch.bfloat16, False)]:
        a, b = torch.randn(m, m, device="cuda", dtype=dtype), torch.randn(m, m, device="cuda", dtype=dtype)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = time_call(lambda: a @ b, torch.device("cuda")).median_ms
        torch.backends.cuda.matmul.allow_tf32 = old
        rates[key] = 2 * m ** 3 / (ms * 1e-3)
    return rates
