"""The local executor: one worker slot per visible GPU (one on a CPU). Each slot keeps a warm worker
server on its GPU (tools/evaluate.py), replaced whenever a candidate breaks it. The cluster backend
(tools/cluster.py) implements the same two methods (agent/interfaces.py: Executor); open_executor picks one."""
from __future__ import annotations

import os
import queue
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from tools.evaluate import WarmWorker, visible_gpus
from tools.results import EvalJob, EvalResult


@dataclass
class ExecutorConfig:
    gpus: list[int] | None = None  # GPU indices to use; None: every visible GPU, or the CPU if none
    workers_per_device: int = 1  # more than one only where the device has room (a CPU's cores)
    isolation: str | None = None  # "persistent" or "fork"; None: KERNELWRIGHT_ISOLATION, else "persistent"


class LocalExecutor:
    def __init__(self, config: ExecutorConfig | None = None):
        self.config = config or ExecutorConfig()
        gpus = self.config.gpus if self.config.gpus is not None else visible_gpus()
        slots = [g for g in gpus for _ in range(self.config.workers_per_device)] or [None] * self.config.workers_per_device
        self.slots: queue.Queue = queue.Queue()
        for slot in slots:
            self.slots.put(WarmWorker(slot, self.config.isolation))
        self.size = len(slots)
        self.pool = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="kw-eval")

    def submit(self, job: EvalJob) -> Future[EvalResult]:
        return self.pool.submit(self._run, job)

    def _run(self, job: EvalJob) -> EvalResult:
        worker = self.slots.get()
        try:
            return worker.run(job)
        finally:
            self.slots.put(worker)

    def map(self, jobs: list[EvalJob]) -> list[EvalResult]:
        return [f.result() for f in [self.submit(j) for j in jobs]]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        while not self.slots.empty():
            self.slots.get().close()

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sharing_baselines(executor, items: list, job_of, baselines=None):
    """Each item's (item, result), as results return, each job made by job_of(item, baselines). Until a result
    brings the eager and torch.compile baselines, items go one at a time, so that these are measured once, not
    by every item of a group (a candidate that fails before its timing brings none, and the next goes alone
    too; each measuring them in the same worker also recompiles the reference's graph); then all the rest."""
    pending = list(items)
    while pending:
        group, pending = (pending, []) if baselines else (pending[:1], pending[1:])
        futures = {executor.submit(job_of(item, baselines)): item for item in group}
        for future in as_completed(futures):
            result = future.result()
            baselines = baselines or result.baselines
            yield futures[future], result


def add_cluster_option(parser) -> None:
    """--cluster for the commands that evaluate: a Dask scheduler instead of this machine's devices."""
    parser.add_argument("--cluster", metavar="ADDRESS", help="evaluate on the Dask cluster whose scheduler is at "
                                                             "ADDRESS, e.g. tcp://HOST:8786 (default: "
                                                             "KERNELWRIGHT_CLUSTER, else this machine)")


def open_executor(cluster: str | None = None, config: ExecutorConfig | None = None):
    """The cluster executor when `cluster` or KERNELWRIGHT_CLUSTER names a scheduler, else a LocalExecutor with
    `config`. An unreachable scheduler raises tools.cluster.ClusterError."""
    address = cluster or os.environ.get("KERNELWRIGHT_CLUSTER")
    if not address:
        return LocalExecutor(config)
    from tools.cluster import ClusterConfig, ClusterExecutor
    return ClusterExecutor(ClusterConfig(address))
