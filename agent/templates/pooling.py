"""Window template: max/avg pooling (1-D and 2-D, padding, stride, dilation, count_include_pad) and
depthwise 2-D convolution (with bias and channel multiplier), each output element reading its window
with static loops and masks, plus any fused pointwise epilogue."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base

NAME = "pooling"
FAMILIES = ("pooling", "conv")


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.has("window") and not pl.has("gemm")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


def variants(analysis: TaskAnalysis) -> list[dict]:
    d = default(analysis)
    if "BLOCK_H" not in d:
        return [d]
    return [d, {**d, "BLOCK_H": max(1, d["BLOCK_H"] // 2), "BLOCK_W": min(1024, d["BLOCK_W"] * 2)},
            {**d, "BLOCK_H": d["BLOCK_H"] * 2, "num_warps": 8}, {**d, "layout": "flat", "BLOCK": 1024}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
