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
    """The persistent form (rnn_persistent.py): on an H100 (session 75) 7-15x faster than cuDNN on level 3's
    6-layer LSTMs and GRUs and 1.5-1.9x on their bidirectional ones, where the host-stepped form ran 3-8x
    slower than cuDNN."""
    own = {"BLOCK_H", "num_warps"}  # the stepped form's: the persistent one picks its warps by direction
    return {**{k: v for k, v in base.default(analysis).items() if k not in own}, "persist": 1, "BLOCK_K": 64}


def variants(analysis: TaskAnalysis) -> list[dict]:
    d, stepped = default(analysis), base.default(analysis)  # stepped: a kernel per time step, launched by the host
    return [d, {**d, "BLOCK_K": 32}, stepped, {**stepped, "BLOCK_H": 16, "num_warps": 2}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
