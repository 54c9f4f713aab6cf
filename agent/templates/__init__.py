"""Parameterized Triton templates that build complete candidate files from a task's analysis.

Each template module has match(analysis) -> bool, space(analysis) -> {param: choices},
default(analysis) -> params, variants(analysis) -> [params] (default first, then structural
alternatives) and render(analysis, params) -> candidate source. All of them share one pipeline:
ir.lower (trace with decompositions) -> schedule (group nodes into kernels) -> kernels/codegen (Triton
source) -> program (the candidate file). Families without a template, or ops the lowering does not know,
make a task unsupported with a reason (`unsupported_reason`); no template ever falls back to PyTorch.

    from agent.templates import matching
    for t in matching(analysis):
        source = t.render(analysis, t.default(analysis))
"""
from __future__ import annotations

from types import ModuleType

from agent.analysis import TaskAnalysis
from agent.templates import attention, axis_reduce, base, elementwise, gemm, pooling, rnn, rowwise, scan

TEMPLATES: list[ModuleType] = [rnn, attention, gemm, pooling, scan, rowwise, axis_reduce, elementwise]
BY_NAME: dict[str, ModuleType] = {t.NAME: t for t in TEMPLATES}


def matching(analysis: TaskAnalysis) -> list[ModuleType]:
    return [t for t in TEMPLATES if t.match(analysis)]


def unsupported_reason(analysis: TaskAnalysis) -> str | None:
    """Why no template covers the task, or None when one does."""
    reason = base.why_unsupported(analysis)
    if reason:
        return reason
    if not matching(analysis):
        return "No template claims this task's kernel structure."
    return None
