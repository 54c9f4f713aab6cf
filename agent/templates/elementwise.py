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
    """The default, then the tensors it walks loaded evict_last (`evict`; the stores keep no hint), then other
    blocks. Under the timing's flush, which leaves the L2 dirty (tools/profile.time_call), the hint measured on
    an H200 (session 28, each kernel twice in one process): SwiGLU over 4096x11008 and 8192x14336 bf16 0.0674
    -> 0.0663 and 0.1661 -> 0.1634 ms, GeGLU over 4096x11008 0.0676 -> 0.0666, a Triton copy of 32-256 MB each
    way 3-5% faster; rotary embeddings no faster (8192x4096 0.0466 either way): a variant, not the default."""
    d = default(analysis)
    return [d, {**d, "evict": 1}, {**d, "BLOCK": 4096, "num_warps": 8}, {**d, "BLOCK": 512, "num_warps": 2}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
