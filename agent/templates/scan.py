"""Scan template: cumsum/cumprod along an axis, forward or reversed (flip-scan-flip becomes a reverse
scan), with any pointwise prologue (e.g. a mask multiply) or epilogue fused. A row that fits a block is
scanned in registers; longer rows are scanned chunk by chunk with a running carry."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base
from agent.templates.params import kernel_invalid

NAME = "scan"
FAMILIES = ("scan",)


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.has("scan") and not pl.has("gemm") and not pl.has("window")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


def variants(analysis: TaskAnalysis) -> list[dict]:
    d = default(analysis)
    main = base.plan(analysis).main
    if main.layout != "row":
        return [d]
    other = {**d, "mode": "looped", "BLOCK_R": 1024, "BLOCK_O": 1, "num_warps": 4} if d["mode"] == "one_pass" \
        else {**d, "mode": "one_pass", "BLOCK_O": 1, "num_warps": 16}
    wider = {**d, "BLOCK_R": 2048, "num_warps": 8} if d["mode"] == "looped" else None
    return [p for p in (d, other, wider) if p and kernel_invalid(main, p) is None]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
