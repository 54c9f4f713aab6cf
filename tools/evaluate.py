"""The parent side of an evaluation. A WarmWorker owns one warm worker server (tools/forkserver.py) on one
GPU (or the CPU) and runs each job there with a hard timeout: in the server itself (`persistent`, the
default) or in a forked, sandboxed child (`fork`). Whatever the candidate does (hang, segfault, illegal
address, out of memory), the caller gets an EvalResult; a server that dies is replaced at the next job."""
from __future__ import annotations

import functools
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tools.results import EvalJob, EvalResult, job_to_json
from tools.sandbox import SandboxResult, kill_group, scrubbed_env

START_TIMEOUT_S = 120.0  # the fork server's imports, on a cold disk cache


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_CACHE") or Path.home() / ".cache" / "kernelwright")


def evaluate(job: EvalJob, gpu: int | None = None) -> EvalResult:
    """Evaluates one candidate in a fresh worker, on GPU `gpu` (None: whatever the worker sees)."""
    with WarmWorker(gpu) as worker:
        return worker.run(job)


ISOLATIONS = ("fork", "persistent")


def default_isolation() -> str:
    """`persistent` (one warm process per slot, replaced after a crash or timeout) unless
    KERNELWRIGHT_ISOLATION says `fork` (a fresh process per candidate). Measured on an H200: about 1 s per
    warm evaluation against 5-6 s forked, with the same verdicts (benchmarks/results/)."""
    isolation = os.environ.get("KERNELWRIGHT_ISOLATION", "persistent")
    if isolation not in ISOLATIONS:
        raise ValueError(f"KERNELWRIGHT_ISOLATION must be one of {', '.join(ISOLATIONS)}, not {isolation!r}.")
    return isolation


class WarmWorker:
    """One worker slot on GPU `gpu` (an index among the GPUs this process sees). isolation `persistent`:
    jobs run one after another in the server itself, which is replaced after a crash or a timeout; `fork`:
    each job in a fresh forked child (tools/forkserver.py)."""

    def __init__(self, gpu: int | None = None, isolation: str | None = None):
        from tools.compile_server import CompileServer
        self.gpu = gpu
        self.isolation = isolation or default_isolation()
        self.server: subprocess.Popen | None = None
        self.compiler = CompileServer()  # started at the first compile (on a CPU, for a profile)

    def run(self, job: EvalJob) -> EvalResult:
        started = time.perf_counter()
        job = replace(job, task=replace(job.task, path=str(Path(job.task.path).resolve())))
        with tempfile.TemporaryDirectory(prefix="kw-eval-") as scratch:
            if job.task.source is not None:  # a task sent from another host: its file, under its own name
                task_file = Path(scratch, "task", Path(job.task.path).name)
                task_file.parent.mkdir()
                task_file.write_text(job.task.source)
                job = replace(job, task=replace(job.task, path=str(task_file), source=None))
            # The candidate works in scratch/work; the job and its result stay one level up.
            job_path, result_path = os.path.join(scratch, "job.json"), os.path.join(scratch, "result.json")
            work = os.path.join(scratch, "work")
            os.mkdir(work)
            Path(job_path).write_text(json.dumps(job_to_json(job)))
            run = self._run_child({"job": job_path, "result": result_path, "cwd": work,
                                   "triton_cache": os.path.join(scratch, "triton")}, job.timeout_s)
            result = _read_result(result_path, run, job.timeout_s)
            if result.correct and job.deep:  # compute-sanitizer, in a process of its own (tools/sanitizer.py)
                result = self._sanitize(result, job_path, scratch, job.timeout_s)
            if result.compile is not None:  # on a CPU, compiled now: outside the candidate's time
                from tools.compile_info import compile_after
                compiling = time.perf_counter()
                info = compile_after(work, scrubbed_env({
                    "PYTHONPATH": _import_path(), "HOME": work, "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
                    "TRITON_DEFAULT_FP_FUSION": "1"}), self.compiler, cache_dir() / "sm90")
                if info is not None:
                    result.compile = info
                    result.phase_seconds["compile_info"] = round(time.perf_counter() - compiling, 3)
        result.seconds = time.perf_counter() - started
        return result

    def _run_child(self, request: dict, timeout_s: float) -> SandboxResult:
        server = self._server()
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid_line = self._read_line(START_TIMEOUT_S)
        if not pid_line or not pid_line.startswith("pid "):
            self._drop_server()
            return SandboxResult(None, f"the worker's server failed to start: {pid_line or 'no answer'}", False)
        pid = int(pid_line.split()[1])
        exit_line = self._read_line(timeout_s)
        stderr = _tail(os.path.join(request["cwd"], "stderr.txt"))
        if exit_line is None:  # timed out: kill the job's process group (in persistent mode, the server's)
            kill_group(pid)
            if not self._read_line(10.0):
                self._drop_server()
            return SandboxResult(None, stderr, timed_out=True)
        if not exit_line:  # the server itself died (persistent mode: the candidate took it down)
            code = self.server.wait()
            self._drop_server()
            return SandboxResult(code, stderr, timed_out=False)
        status = exit_line.split()
        if status[-1] == "final":  # a persistent server that will not take another job
            self._drop_server()
        return SandboxResult(int(status[1]), stderr, timed_out=False)

    def _sanitize(self, result: EvalResult, job_path: str, scratch: str, timeout_s: float) -> EvalResult:
        """A correct --deep result, run once more under each compute-sanitizer tool: on this slot's GPU, in a fresh
        process with the worker's environment and the job's Triton cache; on a CPU, each tool says it was skipped."""
        from tools.sanitizer import judge, sanitize
        started = time.perf_counter()
        env = dict(self._env(), TRITON_CACHE_DIR=os.path.join(scratch, "triton"), TRITON_DEFAULT_FP_FUSION="1")
        checks = sanitize(job_path, os.path.join(scratch, "sanitizer"), env, timeout_s, on_gpu=bool(visible_gpus()))
        result.phase_seconds["sanitizer"] = round(time.perf_counter() - started, 3)
        return judge(result, checks)

    def _env(self) -> dict[str, str]:
        """The environment of this slot's processes that run candidate code: scrubbed, on this slot's GPU."""
        env = scrubbed_env({
            "PYTHONPATH": _import_path(), "PYTHONUNBUFFERED": "1",
            # Kernels compile into each job's own Triton cache; only Triton's driver modules are shared.
            "KERNELWRIGHT_CACHE": str(cache_dir()), "TRITON_CACHE_MANAGER": "tools.triton_cache:JobCache",
            "KERNELWRIGHT_TRITON_SHARED": str(cache_dir() / "triton-driver"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache_dir() / "inductor"),
            "KERNELWRIGHT_DEVICE": "cuda" if visible_gpus() else "cpu",
            "KERNELWRIGHT_ISOLATION": self.isolation,
        })
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = device_name(self.gpu)
        return env

    def _server(self) -> subprocess.Popen:
        if self.server is None or self.server.poll() is not None:
            env = self._env()
            cache_dir().mkdir(parents=True, exist_ok=True)
            self.server = subprocess.Popen([sys.executable, "-m", "tools.forkserver"], env=env, text=True,
                                           cwd=tempfile.gettempdir(), stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                           start_new_session=True)
        return self.server

    def _read_line(self, timeout_s: float) -> str | None:
        """The server's next line; "" when it has exited, None when nothing came within the timeout."""
        ready, _, _ = select.select([self.server.stdout], [], [], timeout_s)
        return self.server.stdout.readline().strip() if ready else None

    def close(self) -> None:
        self._drop_server()
        self.compiler.close()

    def _drop_server(self) -> None:
        """Ends this slot's worker server (a broken one, or at close); the next job starts another."""
        if self.server is not None:
            kill_group(self.server.pid)
            self.server.wait()
            self.server = None

    def __enter__(self) -> "WarmWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_result(path: str, run: SandboxResult, timeout_s: float) -> EvalResult:
    if run.timed_out:
        return EvalResult("timeout", f"The evaluation did not finish within {timeout_s:g} s and was killed.")
    if run.returncode == 0 and os.path.exists(path):  # only a worker that finished wrote the result
        return EvalResult.from_json(json.loads(Path(path).read_text()))
    tail = [line for line in run.stderr.strip().splitlines() if line.strip()][-1:] or [""]
    if run.signal_name:
        return EvalResult("crash", f"The worker died with {run.signal_name} while running the candidate.")
    if "out of memory" in run.stderr.lower():
        return EvalResult("crash", f"The candidate ran out of memory: {tail[0][:300]}.")
    return EvalResult("crash", f"The worker exited with code {run.returncode} and no result: {tail[0][:300]}.")


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-limit:]
    except OSError:
        return ""


@functools.cache
def visible_gpus() -> list[int]:
    """Indices of the GPUs this process sees; empty on a CPU-only machine."""
    import torch
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def device_name(gpu: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for this process's GPU number `gpu`: under CUDA_VISIBLE_DEVICES=2,3
    GPU 0 is device 2, and a worker told "0" would land on another process's GPU."""
    names = [n.strip() for n in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if n.strip()]
    return names[gpu] if names else str(gpu)


def _import_path() -> str:
    """The worker imports `tools` from the same place this process does, plus any PYTHONPATH given."""
    here = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in [here, os.environ.get("PYTHONPATH", "")] if p)
