"""Elementwise template: any chain of pointwise ops and broadcasts, generated from the traced graph and
run as one pass over memory (one flat kernel; each broadcast operand addressed through its own strides).
Also takes normalizations that are pointwise at inference (batch norm with running statistics)."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base

NAME = "elementwise"
FAMILIES = ("elementwise", "norm")


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and all(k.layout == "flat" for k in pl.kernels) and not pl.has("window")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


def variants(analysis: TaskAnalysis) -> list[dict]:
    d = default(analysis)
    return [d, {**d, "BLOCK": 4096, "num_warps": 8}, {**d, "BLOCK": 512, "num_warps": 2}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
