"""Elementwise template: any chain of pointwise ops and broadcasts, generated from the traced graph and
run as one pass over memory (one flat kernel; each broadcast operand addressed through its own strides).
Also takes normalizations that are pointwise at inference (batch norm with running statistics)."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base
from agent.templates.codegen import reread_bytes

NAME = "elementwise"
FAMILIES = ("elementwise", "norm")


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and all(k.layout == "flat" for k in pl.kernels) and not pl.has("window")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


REREAD_BYTES = 64 * 2**10  # broadcast operands this large or more: their own eviction hint is the second variant


def variants(analysis: TaskAnalysis) -> list[dict]:
    """The default, then a variant with eviction hints (`evict`; the stores keep none), then other blocks.
    Where the kernels read broadcast operands of REREAD_BYTES or more again and again along their walk, those
    operands are loaded evict_last (evict 2); elsewhere the tensors walked are (evict 1). Under the timing's
    flush, which leaves the L2 dirty (tools/profile.time_call), measured on an H200 (each kernel twice in one
    process, ms): evict 1 took SwiGLU over 4096x11008 and 8192x14336 bf16 from 0.0674 to 0.0663 and 0.1661
    to 0.1634, GeGLU over 4096x11008 0.0676 -> 0.0666 (session 28); RoPE over 2048x4096 and 8192x4096, whose
    cos and sin every head reads, ran 0.0160 -> 0.0140 and 0.0474 -> 0.0459 with evict 2, 0.0152 and 0.0471
    with evict 1, 0.0149 and 0.0460 with both (session 29)."""
    d = default(analysis)
    kernels = [k for k in base.plan(analysis).kernels if k.layout == "flat"]
    hint = 2 if sum(reread_bytes(k) for k in kernels) >= REREAD_BYTES else 1
    return [d, {**d, "evict": hint}, {**d, "BLOCK": 4096, "num_warps": 8}, {**d, "BLOCK": 512, "num_warps": 2}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
