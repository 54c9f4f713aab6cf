"""The warm process that the parent's sm_90 compiles run in on a CPU (tools/compile_info.py's compile_after):
`python -m tools.compile_server`, with PyTorch and Triton's compiler imported once, never Triton's interpreter.
A compile in a fresh process paid those imports again each time: about 4 s of a CPU for under 1 s of compiling.

Each compile runs in a child forked for it, as a fresh process would: a session of its own, in the job's folder,
with the job's environment; the server kills the child's group at the time limit. The server runs no candidate
code itself, and is replaced when the environment it started with changes in more than what each job sets.

Protocol, one line each way per compile: in `{"work": DIR, "out": DIR, "env": {...}, "timeout_s": S}`, out
`exit STATUS` (a negative status is the signal that ended the child) or `timeout`. The child writes its answer
(compile_info's JSON) to OUT/answer.json and its stderr to OUT/stderr.txt; OUT is a folder of the parent's."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.sandbox import child_of_fork, kill_group

START_TIMEOUT_S = 120.0  # the server's imports, on a cold disk cache
PER_JOB_ENV = ("HOME", "TRITON_CACHE_DIR")  # set anew for each compile; anything else changed starts a new server


class CompileServer:
    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.started_with: dict[str, str] = {}

    def run(self, work: str, env: dict[str, str], timeout_s: float) -> str:
        """The answer of the compile of the candidate in `work` under `env`; RuntimeError when it failed or took
        longer than `timeout_s`."""
        out = tempfile.mkdtemp(prefix="kw-compile-")
        try:
            request = {"work": work, "out": out, "env": env, "timeout_s": timeout_s}
            status = self._ask(request, env, timeout_s)
            if status == "timeout":
                raise RuntimeError(f"no answer within {timeout_s:g} s")
            if status != "exit 0":
                err = Path(out, "stderr.txt").read_text() if Path(out, "stderr.txt").exists() else ""
                raise RuntimeError((err.strip().splitlines() or [status])[-1])
            return Path(out, "answer.json").read_text()
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def _ask(self, request: dict, env: dict[str, str], timeout_s: float) -> str:
        lasting = {k: v for k, v in env.items() if k not in PER_JOB_ENV}
        if self.proc is None or self.proc.poll() is not None or lasting != self.started_with:
            self.close()
            self.proc = subprocess.Popen([sys.executable, "-m", "tools.compile_server"], env=env, bufsize=0,
                                         cwd=tempfile.gettempdir(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
            self.started_with = lasting
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            status = _read_line(self.proc.stdout, START_TIMEOUT_S + timeout_s)
        except OSError:  # the server died under the request
            status = ""
        if not status:  # no answer in time, or the server is gone: the next compile starts another
            self.close()
            raise RuntimeError(f"no answer within {timeout_s:g} s" if status is None else "the compile server exited")
        return status

    def close(self) -> None:
        if self.proc is not None:
            kill_group(self.proc.pid)
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> "CompileServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_line(pipe, timeout_s: float) -> str | None:
    """The next line from an unbuffered pipe (one line comes per request); "" when the pipe closed, None when no
    whole line came within `timeout_s`."""
    deadline, line = time.monotonic() + timeout_s, b""
    while not line.endswith(b"\n"):
        if not select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
            return None
        chunk = os.read(pipe.fileno(), 256)
        if not chunk:
            return ""
        line += chunk
    return line.decode().strip()


def serve() -> None:
    import triton.backends.nvidia.compiler  # noqa: F401  (warm: what each compile imports)
    import triton.compiler.code_generator  # noqa: F401

    from tools import compile_info  # noqa: F401
    from tools import task  # noqa: F401
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(_wait(pid, request["timeout_s"]), flush=True)


def _wait(pid: int, timeout_s: float) -> str:
    handle = os.pidfd_open(pid)
    try:
        finished = select.select([handle], [], [], timeout_s)[0]
    finally:
        os.close(handle)
    if not finished:
        kill_group(pid)  # the child and what it started (ptxas)
        os.kill(pid, signal.SIGKILL)  # also where it had not yet made its own group
        os.waitpid(pid, 0)
        return "timeout"
    return f"exit {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}"


def _child(request: dict) -> None:
    def work():
        sys.stdin.close()
        for fd, name in ((1, "answer.json"), (2, "stderr.txt")):
            out = os.open(os.path.join(request["out"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.chdir(request["work"])
        os.environ.clear()
        os.environ.update(request["env"])
        from tools.compile_info import answer
        print(answer(), end="")

    child_of_fork(work)


if __name__ == "__main__":
    serve()
