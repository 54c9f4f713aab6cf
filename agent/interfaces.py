"""The seams of kernelwright, in one file. Read this first.

Each seam is a Protocol: anything with these methods fits, no base class needed.

  Executor        tools/executor.py      runs candidates in sandboxed workers (local: one per GPU)
  Operator        agent/operators/       proposes a new candidate from a parent and retrieved context
  SelectionPolicy agent/policies.py      picks the parent(s) of the next proposal from the archive
  KnowledgeStore  knowledge/store.py     retrieves docs and verified kernels; takes verified write-backs
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from tools.results import EvalJob, EvalResult


class Executor(Protocol):
    """Evaluates candidates. Callers never see a worker crash: every job ends in an EvalResult."""

    def submit(self, job: EvalJob) -> Future[EvalResult]: ...

    def close(self) -> None: ...


@dataclass
class Individual:
    """A candidate in the search archive, with what the search knows of it."""

    id: int
    source: str
    operator: str  # which operator proposed it ("template", "param", "llm", ...)
    parent_id: int | None
    params: dict = field(default_factory=dict)  # template parameters, if any
    strategy: str = ""  # the meta-prompt (strategy instructions) it was produced under
    features: dict = field(default_factory=dict)  # behaviour descriptors for MAP-Elites
    result: EvalResult | None = None

    @property
    def fitness(self) -> float:
        """Higher is better; 0.0 for anything not verified correct."""
        r = self.result
        if r is None or not r.correct or r.timing is None:
            return 0.0
        return 1.0 / r.timing.ms


@dataclass
class Proposal:
    source: str
    operator: str
    params: dict = field(default_factory=dict)
    strategy: str = ""
    features: dict = field(default_factory=dict)
    note: str = ""  # what the operator tried, one line


class Operator(Protocol):
    name: str

    def propose(self, task: "TaskContext", parents: list[Individual], n: int) -> list[Proposal]: ...


class SelectionPolicy(Protocol):
    name: str

    def select(self, archive: list[Individual], k: int) -> list[Individual]: ...


@dataclass
class Retrieved:
    kind: str  # "doc" or "kernel"
    id: str
    text: str
    metadata: dict
    score: float


class KnowledgeStore(Protocol):
    def retrieve(self, query: str, *, kind: str, k: int = 5, where: dict | None = None,
                 budget_chars: int | None = None) -> list[Retrieved]: ...

    def write_back(self, source: str, metadata: dict, result: EvalResult) -> str: ...


@dataclass
class TaskContext:
    """What every operator and prompt sees of the task being optimized."""

    name: str
    source: str  # the task file's text
    analysis: dict  # agent/analysis.py's description of the traced reference
    device: str  # "cuda:NVIDIA H200 (sm_90)" or "cpu"
    arch: str  # "sm_90", "sm_80", "cpu", ...
