"""Axis-reduction template: sum/mean/max/min/argmax/argmin (and fused pre/post ops) over a middle axis,
e.g. dim 1 of a (B, R, N) tensor. Each program owns one outer index and BLOCK_I contiguous trailing
columns and walks the reduced axis BLOCK_R rows at a time, so every load is coalesced."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base
from agent.templates.kernels import col_splittable
from agent.templates.params import kernel_invalid, sizes

NAME = "axis_reduce"
FAMILIES = ("reduction", "argreduce", "norm")


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.main.layout == "col" and not pl.has("scan") and not pl.has("gemm")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


def variants(analysis: TaskAnalysis) -> list[dict]:
    d = default(analysis)
    main = base.plan(analysis).main
    # a long reduced axis split over 8 programs a tile (kernels._col_split): on an H200 (session 36) level 1's max
    # over 4096 rows of 128x4095 columns ran 2.310 -> 2.158 ms so
    split = [{**d, "SPLIT": 8}] if col_splittable(main) and sizes(main)[1] >= 8 * 128 else []  # 128 rows a program
    out = [d, *split, {**d, "BLOCK_I": max(16, d["BLOCK_I"] // 4), "BLOCK_R": min(256, d["BLOCK_R"] * 4)},
           {**d, "BLOCK_I": min(1024, d["BLOCK_I"] * 2), "BLOCK_R": max(1, d["BLOCK_R"] // 2), "num_warps": 8}]
    return [p for p in out if kernel_invalid(main, p) is None]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
