"""Peak memory of one whole evaluation (tools.worker.evaluate_here: load, verify, profile) beside the task's own
footprint (its inputs, outputs and parameters). Run in its own process, in a scratch directory; on a CPU with
TRITON_INTERPRET=1 set (triton must see it before its first import):

    python tests/tools/memory_probe.py TASK CANDIDATE '{"rows": 4096}'     # prints one JSON line

On a GPU the peak is torch.cuda.max_memory_allocated; on a CPU it is read from PyTorch's profiler, which
records every allocation and free of the CPU allocator in order (profile_memory=True)."""
from __future__ import annotations

import json
import sys

import torch
import torch._dynamo  # noqa: F401  (as the worker's server has it)

from tools.results import EvalJob, TaskSpec
from tools.task import load_task_module
from tools.worker import evaluate_here


def footprint(spec: TaskSpec) -> int:
    """Bytes of the task's inputs, outputs and parameters at the spec's shapes, worked out on the meta device."""
    task = load_task_module(spec, small=False)
    with torch.device("meta"):
        model = task.Model(*task.get_init_inputs())
        inputs = [x for x in task.get_inputs() if isinstance(x, torch.Tensor)]
        out = model(*inputs)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    return sum(t.numel() * t.element_size() for t in [*inputs, *outs, *model.parameters(), *model.buffers()])


def cpu_peak(run) -> tuple[object, int]:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    live = peak = 0
    for e in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns()):
        if e.name() == "[memory]":
            live += e.nbytes()
            peak = max(peak, live)
    return result, peak


def gpu_peak(run) -> tuple[object, int]:
    from tools.evaluate import cache_dir
    from tools.profile import device_ceilings
    device_ceilings(cache_dir())  # measured once per device, before and apart from any evaluation
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = run()
    return result, torch.cuda.max_memory_allocated() - base


def main(task: str, candidate: str, shapes: str) -> None:
    spec = TaskSpec(task, shapes=json.loads(shapes), small=False)
    job = EvalJob(spec, open(candidate).read(), trials=2)
    result, peak = (gpu_peak if torch.cuda.is_available() else cpu_peak)(lambda: evaluate_here(job))
    flush = 0
    if torch.cuda.is_available():
        from tools.profile import l2_flush_bytes
        flush = l2_flush_bytes()
    print(json.dumps({"verdict": result.verdict, "reason": result.reason, "peak": peak, "footprint": footprint(spec),
                      "flush": flush}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
