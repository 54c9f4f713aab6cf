"""The warm side of a worker slot: `python -m tools.forkserver`, started by tools/evaluate.py with a
scrubbed environment. It imports PyTorch, Triton and the evaluator once, without touching the GPU, then
forks one child per job, so a candidate pays neither the interpreter's start nor the imports. Each child is
as isolated as a fresh process: its own process group, scratch directory and HOME, and its own CUDA
context (CUDA is first touched after the fork).

Protocol, one line each way per job: in `{"job": PATH, "result": PATH, "cwd": DIR}`; out `pid N`, then
`exit STATUS` (a negative status is the signal that killed the child)."""
from __future__ import annotations

import json
import os
import sys


def serve() -> None:
    if os.environ.get("KERNELWRIGHT_DEVICE") == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before the first import of triton
    import torch  # noqa: F401  (warm imports; nothing here may initialize CUDA)
    import triton  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    from tools import worker  # noqa: F401
    from tools import compile_info, measure, verify  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(f"exit {code}", flush=True)


def _child(request: dict) -> None:
    code = 1
    try:
        os.setsid()
        os.chdir(request["cwd"])
        os.environ["HOME"] = request["cwd"]
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
        sys.stdin.close()
        from tools.worker import main
        main(request["job"], request["result"])
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve()
