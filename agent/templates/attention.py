"""Attention template: scaled-dot-product attention (attention_kernel.py: one flash-attention kernel, online
softmax over key blocks) as the kernel that carries the task, with whatever the task computes around it in the
other templates' kernels. A task whose GEMMs outweigh its attention is the GEMM template's (its attention
kernel then runs at the defaults of params.py)."""
from __future__ import annotations

import torch

from agent.analysis import TaskAnalysis
from agent.templates import base

NAME = "attention"
FAMILIES = ("attention",)


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.main.kind == "attention"


def _half(analysis: TaskAnalysis) -> bool:
    """Whether the attention reads 16-bit operands (tensor-core products; `operands` may upcast them)."""
    node = base.plan(analysis).main.nodes[0]
    return any(a.dtype in (torch.float16, torch.bfloat16) for a in node.args[:3])


def space(analysis: TaskAnalysis) -> dict[str, list]:
    s = base.space(analysis)
    s["precision"] = ["ieee", "tf32"] if analysis.tf32 else ["ieee"]
    s["operands"] = ["input", "fp32"] if _half(analysis) else ["input"]
    return s


def default(analysis: TaskAnalysis) -> dict:
    operands = base.default_operands(analysis) if _half(analysis) else "input"
    return {**base.default(analysis), "precision": "tf32" if analysis.tf32 else "ieee", "operands": operands}


def variants(analysis: TaskAnalysis) -> list[dict]:
    """The default, then narrower query tiles (more programs for short sequences), wider key steps, and for 16-bit
    inputs the other way of feeding tl.dot (base.default_operands says which is the default where)."""
    d = default(analysis)
    s = space(analysis)
    out = [d, {**d, "BLOCK_M": min(s["BLOCK_M"][-1], 64), "BLOCK_N": min(s["BLOCK_N"][-1], 32), "num_warps": 4},
           {**d, "BLOCK_N": s["BLOCK_N"][-1], "num_stages": 3}]
    other = "input" if d["operands"] == "fp32" else "fp32"
    if other in s["operands"]:
        out.append({**d, "operands": other})
    kept = []
    for p in out:
        if p not in kept and base.invalid(analysis, p) is None:
            kept.append(p)
    return kept


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
