"""The cluster executor: the same Executor seam (agent/interfaces.py) over a Dask distributed cluster.

    dask scheduler                                        # on one host: tcp://HOST:8786
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1   # one per GPU
    kernelwright batch tasks/suite.toml --cluster tcp://HOST:8786

Each Dask worker holds warm evaluation workers (tools/evaluate.py's WarmWorker: the same static rules,
timeouts, scrubbed environment and verdicts as a local run) on the GPU it sees. A job carries the task's
source and the candidate's, never a path of the submitting host; its result is the same EvalResult with the
host it ran on. A job whose Dask worker dies under it runs once more on another worker, then ends `crash`.
Baselines are kept per task and device name; on a cluster of several device kinds, each task is pinned to
one kind so that its search compares timings of one kind only."""
from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

from tools.results import Baselines, EvalJob, EvalResult, job_from_json, job_to_json

ENV = "KERNELWRIGHT_CLUSTER"


class ClusterError(Exception):
    """The cluster cannot be used (Dask is not installed, or the scheduler did not answer); the message is one
    sentence for a person."""


@dataclass
class ClusterConfig:
    address: str  # the scheduler, tcp://HOST:8786
    connect_timeout_s: float = 5.0  # how long to wait for the scheduler before giving up (a live one answers in ms)
    reruns: int = 1  # the times a job runs again on another worker after its worker died under it


class ClusterExecutor:
    def __init__(self, config: ClusterConfig):
        try:
            from distributed import Client
        except ImportError:
            raise ClusterError("Evaluating on a cluster needs Dask distributed: "
                               "pip install -e \".[cluster]\".") from None
        self.config = config
        try:
            self.client = Client(config.address, timeout=config.connect_timeout_s, set_as_default=False)
        except (OSError, TimeoutError, ValueError):
            raise ClusterError(f"The Dask scheduler at {config.address} did not answer within "
                                     f"{config.connect_timeout_s:g} s; start it (`dask scheduler`) or correct "
                                     f"--cluster / {ENV}.") from None
        self.lock = threading.Lock()
        self.kinds: dict[str, str] = {}  # worker address -> device name ("cpu", "NVIDIA H200", ...)
        self.pinned: dict[str, str] = {}  # task key -> the device kind all its jobs run on
        self.baselines: dict[tuple[str, str], Baselines] = {}  # (task key, device name) -> baselines
        gpus = any(w.get("resources", {}).get("GPU") for w in self._workers().values())
        self.resources = {"GPU": 1} if gpus else None  # workers started with --resources GPU=1: one job each
        self._learn_kinds()

    @property
    def size(self) -> int:
        """Evaluations the cluster runs at once: one per worker thread."""
        return max(sum(w.get("nthreads", 1) for w in self._workers().values()), 1)

    def submit(self, job: EvalJob) -> Future[EvalResult]:
        done: Future[EvalResult] = Future()
        key = task_key(job)
        try:
            spec = replace(job.task, source=job.task.source or Path(job.task.path).read_text())
        except OSError as e:
            done.set_result(EvalResult("error", f"The task file could not be read: {e}.", task_error=True))
            return done
        with self.lock:
            if job.baselines is not None:
                self.baselines.setdefault((key, job.baselines.device), job.baselines)
            known = {device: b for (k, device), b in self.baselines.items() if k == key}
            workers = self._workers_for(key)
        if workers == []:
            done.set_result(EvalResult("crash", f"No worker with a {self.pinned[key]} remains in the cluster, and "
                                                f"this task's timings so far are from that device kind."))
            return done
        remote = self.client.submit(run_remote, job_to_json(replace(job, task=spec, baselines=None)), known,
                                    self.config.reruns, pure=False, workers=workers, resources=self.resources)
        remote.add_done_callback(lambda f: done.set_result(self._finish(f, key)))
        return done

    def _finish(self, remote, key: str) -> EvalResult:
        try:
            data, address, kind = remote.result()
        except Exception as e:
            return lost(e)
        result = EvalResult.from_json(data)
        with self.lock:
            self.kinds[address] = kind
            if result.baselines is not None:
                self.baselines.setdefault((key, result.baselines.device), result.baselines)
        return result

    def _workers(self) -> dict:
        return self.client.scheduler_info(n_workers=-1).get("workers", {})

    def _learn_kinds(self) -> None:
        """Asks the workers this executor has not seen yet for their device name."""
        new = [a for a in self._workers() if a not in self.kinds]
        if new:
            self.kinds.update(self.client.run(device_kind, workers=new))

    def _workers_for(self, key: str) -> list[str] | None:
        """The workers a task's jobs may run on: None (any) on a cluster of one device kind; else those of the
        kind the task is pinned to, the kind with the fewest pinned tasks per worker at its first job."""
        live = set(self._workers())
        if live - set(self.kinds):
            self._learn_kinds()
        self.kinds = {a: k for a, k in self.kinds.items() if a in live}
        if len(set(self.kinds.values())) <= 1 and key not in self.pinned:
            return None
        kind = self.pinned.setdefault(key, pick_kind(self.kinds, self.pinned))
        return [a for a, k in self.kinds.items() if k == kind]

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "ClusterExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def task_key(job: EvalJob) -> str:
    """A task and its overrides: jobs with the same key share baselines."""
    s = job.task
    return repr((s.path, s.dtype, s.atol, s.rtol, sorted(s.shapes.items()), s.tf32, s.small, s.scale_inputs, job.seed))


def pick_kind(kinds: dict[str, str], pinned: dict[str, str]) -> str:
    """The device kind with the fewest tasks pinned to it per worker (ties: the most workers, then the name)."""
    workers = {k: sum(1 for v in kinds.values() if v == k) for k in set(kinds.values())}
    tasks = {k: sum(1 for v in pinned.values() if v == k) for k in workers}
    return min(workers, key=lambda k: (tasks[k] / workers[k], -workers[k], k))


def lost(e: BaseException) -> EvalResult:
    """The result of a job the cluster lost: its workers died, or the connection to the scheduler went."""
    if type(e).__name__ == "KilledWorker":
        return EvalResult("crash", "The cluster workers running this candidate died under it, on every try.")
    return EvalResult("crash", f"The cluster lost this evaluation: {type(e).__name__}: {str(e)[:300]}.")


# --- on a Dask worker ------------------------------------------------------------------------------------
_slots: queue.SimpleQueue = queue.SimpleQueue()  # this Dask worker's idle WarmWorkers, one per thread in use
_kind: list[str] = []


def run_remote(job_data: dict, baselines: dict[str, Baselines], reruns: int) -> tuple[dict, str, str]:
    """Runs one job on this Dask worker: (the EvalResult as JSON, this worker's address, its device name)."""
    from distributed import get_client, get_worker

    from tools.evaluate import WarmWorker
    worker, kind = get_worker(), device_kind()
    deaths = get_client().run_on_scheduler(_deaths, worker.get_current_task())
    if deaths > reruns:
        result = EvalResult("crash", f"The cluster workers running this candidate died under it {deaths} times.")
        return result.to_json(), worker.address, kind
    job = job_from_json(job_data)
    job = replace(job, baselines=baselines.get(kind))
    try:
        slot = _slots.get_nowait()
    except queue.Empty:
        slot = WarmWorker(None)  # the Dask worker's own GPU (its CUDA_VISIBLE_DEVICES), or the CPU
    try:
        result = slot.run(job)
    finally:
        _slots.put(slot)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    result.host = socket.gethostname() + (f" GPU {gpu}" if gpu and kind != "cpu" else "")
    return result.to_json(), worker.address, kind


def _deaths(key, dask_scheduler=None) -> int:
    """On the scheduler: how many workers died while this task was assigned to them."""
    task = dask_scheduler.tasks.get(key)
    return task.suspicious if task is not None else 0


def device_kind() -> str:
    """This worker's device name, as the evaluator's timings name it: "cpu" or the GPU's name. The GPU is asked
    in a short child process, so that this process never holds a CUDA context."""
    if not _kind:
        from tools.evaluate import visible_gpus
        if not visible_gpus():
            _kind.append("cpu")
        else:
            done = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name())"],
                                  capture_output=True, text=True, timeout=120)
            _kind.append(done.stdout.strip() or "unknown GPU")
    return _kind[0]
