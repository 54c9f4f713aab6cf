"""The search graph's state: a narrow input and the fuller state the nodes share.

A new run starts from an empty InputState; a resumed run starts from what the run store holds:
the evaluated archive and the candidates that were proposed but never evaluated.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from agent.interfaces import Individual, Retrieved
from tools.results import Baselines


@dataclass
class InputState:
    """What a caller hands the graph."""

    archive: list[Individual] = field(default_factory=list)  # evaluated candidates, oldest first
    pending: list[Individual] = field(default_factory=list)  # proposed (and stored), not yet evaluated


@dataclass
class State(InputState):
    """What the nodes read and write between rounds."""

    retrieved: list[Retrieved] = field(default_factory=list)  # docs and verified kernels for the prompts
    retrieved_for: int = -1  # the best candidate's id when `retrieved` was fetched (-1: never)
    parents: list[Individual] = field(default_factory=list)  # chosen by the policy this round
    fresh: list[Individual] = field(default_factory=list)  # evaluated this round, not yet in the archive
    round: int = 0
    best_id: int | None = None
    stale: int = 0  # evaluations since the best last improved
    baselines: Baselines | None = None  # eager / torch.compile times measured once per run
    stop: str = ""  # why the search ended, once it has
