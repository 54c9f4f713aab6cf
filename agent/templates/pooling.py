"""Window template: max/avg pooling in 1-D, 2-D and 3-D (padding, stride, dilation, ceil_mode,
count_include_pad, divisor_override), adaptive pooling, and depthwise 2-D convolution (with bias and channel
multiplier), each output element reading its window with unrolled taps and masks, plus any fused pointwise
epilogue. The pooled value may be computed: a stored buffer, or a pointwise chain recomputed at each tap."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base
from agent.templates.params import lanes, pairs, walk_window

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
    # a lane takes VEC outputs along the row where the windows allow (Gen.window_lanes): on an H200 (session 20)
    # 5-24% faster than the best other variant on five of KernelBench's seven windows over aligned rows, 3-4%
    # slower on a 3x1 depthwise convolution (one tap a row) and a 3-D average pool at stride 2
    plan = base.plan(analysis).main
    vec = lanes(plan, d)
    lanes_first = [{**d, **vec}] if vec else []
    # a strided window's loop over ROWS row tiles (params.strided_rows), and a program per row tile second: on an
    # H200 the 3-D max pool over 62-row planes ran 1.569 ms with 16 a program, 1.360 with one; level 2's pools
    # over small planes ran faster with the loop
    single = [{**d, "ROWS": 1}] if d.get("ROWS", 1) > 1 else []
    # a 3-D window overlapping down its first dim walked by each program, the shared planes carried (kernels._plane):
    # on an H200 (session 35) KernelBench's 3-D average pool ran 2.438 ms so (2-row tiles at 2 warps; 2.500-3.425
    # at 1-4 rows and 2-4 warps) against 2.673 in the default's 8 tiles a program; (session 36) its 3-D max pool
    # dilated by 3 1.187 (1.189-1.486 at 1-4 rows and 1-4 warps) against 1.302 in four outputs a lane (VEC 4)
    walk = [{**{k: v for k, v in d.items() if k != "VEC"}, "walk": 1, "ROWS": 1, "BLOCK_H": 2,
             "num_warps": 2}] if walk_window(plan) and d.get("layout", "plane") == "plane" else []
    # its taps along a stride-2 row in pairs (codegen.pair_window): the 3-D average pool 2.343 ms at 4 warps (2.471
    # at 2) against the walk's 2.432 (session 37)
    walk += [{**walk[0], "pairs": 1, "num_warps": 4}] if walk and pairs(plan) else []
    return [*walk, *lanes_first, d, *single,
            {**d, "BLOCK_H": max(1, d["BLOCK_H"] // 2), "BLOCK_W": min(1024, d["BLOCK_W"] * 2)},
            {**d, "BLOCK_H": d["BLOCK_H"] * 2, "num_warps": 8}, {**d, "layout": "flat", "BLOCK": 1024}]


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
