"""The warm side of a worker slot: `python -m tools.forkserver`, started by tools/evaluate.py with a
scrubbed environment and KERNELWRIGHT_ISOLATION set. It imports PyTorch, Triton and the evaluator once,
without touching the GPU, so a candidate pays neither the interpreter's start nor the imports.

`persistent` (the default): jobs run in the server itself, one after another, so the CUDA context, library
handles and Triton's driver stay warm between candidates. Each job still gets its own directory, HOME and
Triton cache, fresh modules and a freed allocator; after a crash, a timeout or a broken context the server exits and the
next job starts a new one. Candidates share a process only with candidates of the same slot, one at a
time. The candidate language (tools/language.py) forbids the ways one could leave state for the next, and
the server proves it: a snapshot of its global state before each candidate and after (tools/clean.py); a
candidate that changed it is rejected, and the server exits so that the next job starts a fresh one.

`fork`: one forked child per job, as isolated as a fresh process: its own process group, scratch
directory, HOME and Triton cache, and its own CUDA context (CUDA is first touched after the fork). Several
times slower per candidate on a GPU, where each child pays for a new CUDA context.

Protocol, one line each way per job: in `{"job": PATH, "result": PATH, "cwd": DIR, "triton_cache": DIR}`;
out `pid N` (the process to kill on a timeout), then `exit STATUS` (a negative status is the signal that killed
the child), followed by ` final` when the server exits after this job."""
from __future__ import annotations

import json
import os
import sys

from tools.sandbox import child_of_fork


def serve() -> None:
    if os.environ.get("KERNELWRIGHT_DEVICE") == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before the first import of triton
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns unless it is set
    import torch  # noqa: F401  (warm imports; nothing here may initialize CUDA)
    import triton  # noqa: F401
    if os.environ.get("TRITON_INTERPRET") == "1":
        _round_like_a_gpu()
    import torch.utils.flop_counter  # noqa: F401
    import torch._dynamo  # noqa: F401  (else imported inside the first candidate's forward, whose tensors its
    # import-time reference cycles then hold)
    from tools import worker  # noqa: F401
    from tools import compile_info, deep, gpu_checks, measure, verify  # noqa: F401
    if os.environ.get("KERNELWRIGHT_DEVICE") == "cuda":
        _warm_compiler()

    persistent = os.environ.get("KERNELWRIGHT_ISOLATION") == "persistent"
    protocol = os.fdopen(os.dup(1), "w", buffering=1)  # job output goes to files, never to this pipe
    for line in sys.stdin:
        request = json.loads(line)
        if persistent:
            print(f"pid {os.getpid()}", file=protocol, flush=True)
            code, keep = _run_here(request)
            print(f"exit {code}" + ("" if keep else " final"), file=protocol, flush=True)
            if not keep:
                return
            continue
        pid = os.fork()
        if pid == 0:
            protocol.close()
            _child(request)
        print(f"pid {pid}", file=protocol, flush=True)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(f"exit {code}", file=protocol, flush=True)


def _round_like_a_gpu() -> None:
    """Triton's interpreter converts fp32 to bf16 by truncation; a GPU rounds to nearest even (`cvt.rn`). Here it
    rounds as a GPU does, so that an honest bf16 kernel errs on the CPU as it will on the GPU: by at most half a
    unit and without a bias (tools/compare.py holds a bf16 output's mean error to that). A conversion that names
    its rounding (`fp_downcast_rounding`) takes another path and keeps it."""
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    truncating = InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar != tl.float32 or dst_type.scalar != tl.bfloat16:
            return truncating(self, src, dst_type)
        wide = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
        return TensorHandle(wide.to(torch.bfloat16).view(torch.uint16).numpy(), dst_type.scalar)

    InterpreterBuilder.cast_impl = cast_impl


def _warm_compiler() -> None:
    """What the first torch.compile in a process changes for good (Dynamo rebinds nn.Module.__init__, Inductor
    registers its operators), done here, on the CPU, so that the compiled baseline of a job's profile is not
    taken for a change its candidate made (tools/clean.py)."""
    import torch
    import torch._inductor.compile_fx  # noqa: F401

    torch.compile(torch.nn.Identity(), backend="eager")(torch.zeros(1))


def _child(request: dict) -> None:
    def work():
        _enter(request)
        sys.stdin.close()
        from tools.worker import main
        main(request["job"], request["result"])

    child_of_fork(work)


def _run_here(request: dict) -> tuple[int, bool]:
    """One job in this process: (exit status, whether this process may take the next job)."""
    import gc
    import traceback

    import torch

    from tools.worker import main
    code, keep = 1, False
    try:
        _enter(request)
        result, clean = main(request["job"], request["result"])
        code, keep = 0, clean and result.verdict not in ("crash", "timeout")
    except BaseException:  # a candidate that raised SystemExit, say: no result, and a fresh process next
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for name in ("kw_task", "kw_candidate"):
            sys.modules.pop(name, None)
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    return code, keep


def _enter(request: dict) -> None:
    """The job's directory becomes the working directory and HOME; its output goes to files there."""
    os.chdir(request["cwd"])
    os.environ["HOME"] = request["cwd"]
    os.environ["TRITON_CACHE_DIR"] = request["triton_cache"]  # read by Triton at each compile (tools/triton_cache.py)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)


if __name__ == "__main__":
    serve()
