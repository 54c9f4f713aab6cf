"""What only a GPU shows, checked by tools/verify.py after the trials of every GPU evaluation:

    times = check_activity(setup, inputs)   # the device's own activity trace of one forward: only the
                                            # candidate's work; returns each kernel's device time in it
    check_repeatable(setup, inputs)   # two runs on the same inputs agree within the tolerance: no races

The activity trace is read from below Python (CUPTI, through the PyTorch profiler), so no hook, dispatch mode or
callback of the candidate's hides work from it. Every GPU kernel must be one of the candidate's Triton kernels,
or launched by a declared vendor op (KERNELWRIGHT_TORCH_OPS) or by allocation and layout ops alone; any copy
between host and device is refused. Op names are matched exactly, namespace and overload, never by prefix.
`judge_activity` is the rule on plain data, so it is tested on a CPU; the trace itself needs a GPU."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from tools.compare import Failed, compare
from tools.rules import ALLOWED_OPS, RUNTIME_REASONS

HOST_DEVICE_COPIES = ("HtoD", "DtoH", "HtoH", "PtoP")  # CUPTI's memcpy kinds that cross the host boundary
LAYOUT_OPS = frozenset(f"aten::{n}{suffix}" for n in ALLOWED_OPS for suffix in ("", "_"))  # aten::fill_, ...


@dataclass(frozen=True)
class DeviceWork:
    """One activity on the GPU: a kernel, a memcpy or a memset, and the ops that launched it, innermost first,
    each as (name, overload): ("aten::mm", "default")."""

    name: str
    kind: str  # "kernel", "memcpy", "memset"
    ops: tuple[tuple[str, str], ...] = ()
    us: float = 0.0  # its time on the device


def check_activity(setup, inputs: list) -> dict[str, float]:
    """One forward of the candidate under the profiler; raises Failed('rejected') for foreign GPU work, else
    returns the device time of each kernel in that forward (kernel_times)."""
    triton = {name for launch in setup.launches.first.values() for name in (launch.name, _compiled_name(launch))}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], **_overload_names()) as prof:
        with torch.no_grad():
            setup.candidate(*inputs)
        torch.cuda.synchronize()
    work = activity(prof.events())
    problem = judge_activity(work, triton - {""}, setup.declared_ops)
    if problem:
        raise Failed("rejected", problem)
    return kernel_times(work, triton)


def kernel_times(work: list[DeviceWork], triton: set[str]) -> dict[str, float]:
    """Milliseconds on the device per kernel of one forward, the largest first: a Triton kernel under its name
    (summed over its launches), a vendor op's kernels under the op ("aten::convolution"), the rest (fills,
    copies) as "other". Where a network's time goes, for a person and for the search."""
    times: dict[str, float] = {}
    for w in work:
        ops = [op for op, _ in w.ops if "::" in op]
        key = w.name if w.name in triton else ops[-1] if w.kind == "kernel" and ops and ops[0] not in LAYOUT_OPS \
            else "other"
        times[key] = times.get(key, 0.0) + w.us / 1e3
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def judge_activity(work: list[DeviceWork], triton: set[str], declared: list[str]) -> str | None:
    """Why this device activity is not only the candidate's own kernels and declared ops, or None."""
    copies = sorted({w.name for w in work if w.kind == "memcpy" and any(k in w.name for k in HOST_DEVICE_COPIES)})
    if copies:
        return RUNTIME_REASONS["host-copy"].format(copies=", ".join(copies))
    wanted = [_declared(d) for d in declared]
    foreign = []
    for w in work:
        if w.kind != "kernel" or w.name in triton:
            continue
        ops = [op for op in w.ops if "::" in op[0]]  # ATen and other namespaced ops, not annotations
        by_declared = any(op[0] == name and overload in ("", op[1]) for op in ops for name, overload in wanted)
        layout_only = bool(ops) and all(op[0] in LAYOUT_OPS for op in ops)
        if not (by_declared or layout_only):
            launched = f" (from {ops[0][0]})" if ops else " (outside any op)"
            foreign.append(w.name[:120] + launched)
    if foreign:
        return RUNTIME_REASONS["gpu-activity"].format(kernels="; ".join(sorted(set(foreign))[:3]))
    return None


def activity(events) -> list[DeviceWork]:
    """The profiler's device events, each with the chain of CPU ops that launched it. A kernel's correlation id
    (its `linked_correlation_id`, or in PyTorch 2.11 its own id) names the CPU events of its launch: the
    runtime call (cudaLaunchKernelExC under aten::mm, as seen on an H200) or the op itself. A runtime call with
    no op above it is placed in the innermost op on its thread that holds it in time."""
    cpu = [e for e in events if e.device_type == DeviceType.CPU and not e.is_async]
    by_id: dict[int, list] = {}
    for e in cpu:
        by_id.setdefault(e.id, []).append(e)
    ops = [e for e in cpu if "::" in e.name]
    work = []
    for e in events:
        if e.device_type != DeviceType.CUDA:
            continue
        launch = by_id.get(getattr(e, "linked_correlation_id", 0) or e.id, [])
        chain = max((_chain(c) for c in launch), key=_ops_in, default=())
        if not _ops_in(chain):
            held = [op for op in ops for c in launch if op.thread == c.thread and op.time_range.start
                    <= c.time_range.start and c.time_range.end <= op.time_range.end]
            chain = _chain(max(held, key=lambda op: op.time_range.start)) if held else chain
        kind = "memcpy" if e.name.startswith("Memcpy") else "memset" if e.name.startswith("Memset") else "kernel"
        work.append(DeviceWork(e.name, kind, chain, e.time_range.end - e.time_range.start))
    return work


def _chain(op) -> tuple[tuple[str, str], ...]:
    """The op and the ops around it, innermost first, as (name, overload)."""
    chain = []
    while op is not None:
        chain.append((op.name, op.overload_name or ""))
        op = op.cpu_parent
    return tuple(chain)


def _ops_in(chain) -> int:
    return sum("::" in name for name, _ in chain)


def check_repeatable(setup, inputs: list) -> None:
    """The candidate twice on the same inputs: the outputs must agree within the task's tolerance (a kernel
    whose programs race gives a different answer from run to run; the interpreter runs programs one by one),
    or else each be right by the whole rule (tools/verify.py: judge): rounding that varies from run to run, as
    cuDNN's transposed convolution's does (it accumulates with atomics), is no race."""
    from tools.verify import Checked, judge, reference_outputs
    with torch.no_grad():
        first = setup.candidate(*inputs)
        second = setup.candidate(*inputs)
    if setup.device.type == "cuda":
        torch.cuda.synchronize()
    try:
        compare(second, first, setup.tolerance, Checked(), own=setup.own_tolerances)
    except Failed as e:
        race = Failed("incorrect", RUNTIME_REASONS["nondeterministic"].format(detail=str(e).rstrip(".")))
        expected = reference_outputs(setup, inputs)
        for out in (first, second):
            try:
                judge(setup, inputs, out, expected, Checked())
            except Failed:
                raise race from None


def _declared(op: str) -> tuple[str, str]:
    """'aten.mm' -> ('aten::mm', ''): any overload; 'aten.mm.default' -> ('aten::mm', 'default')."""
    parts = op.split(".")
    return "::".join(parts[:2]), ".".join(parts[2:])


def _compiled_name(launch) -> str:
    kernel = launch.kernel
    return getattr(kernel, "name", "") or getattr(getattr(kernel, "metadata", None), "name", "") or ""


def _overload_names() -> dict:
    """The profiler option that records each op's overload name, where this PyTorch has it."""
    try:
        return {"experimental_config": torch._C._profiler._ExperimentalConfig(capture_overload_names=True)}
    except (AttributeError, TypeError):
        return {}
