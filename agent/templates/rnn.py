"""Recurrent template: nn.RNN, nn.LSTM and nn.GRU layers (rnn_kernel.py: one fused step kernel per time
step, stepped by the host) with whatever the task computes around them in the other templates' kernels."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base

NAME = "rnn"
FAMILIES = ("recurrent",)


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.has("rnn")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


def variants(analysis: TaskAnalysis) -> list[dict]:
    d = default(analysis)
    return [d, {**d, "BLOCK_H": 16, "num_warps": 2}, {**d, "BLOCK_H": 64, "BLOCK_K": 64, "num_warps": 8}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
