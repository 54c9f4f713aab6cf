"""Row statistics in a convolution's epilogue.

A group or instance norm right after a convolution is a split row kernel (kernels._split): its first kernel
reads the convolution's output for each row's Welford statistics, its second reads it again for the output.
Where the convolution is Triton's, in rows tiles (implicit_gemm._render_rows), each tile already holds its
outputs: it reduces those of each row it meets to a Welford state (count, mean, sum of squared deviations about
that mean) and stores the state as one of the row's partials. The row kernel then runs only its combining kernel
(EPI_PARTS partials a row, merged as kernels._split merges its own), and the buffer is read once, not twice.

A row is `cpg` channels of one batch element, all their positions. A tile takes BLOCK_N channels of one row of
positions (the batch, every spatial dim but the last, and a tile of the last, wt): it meets BLOCK_N / cpg rows
where cpg <= BLOCK_N, or a block of one row's channels. A row's partials are indexed by the channel block, the
row of positions and wt, so each is written by one tile.

    st = stats_pair(kernels, i, params)   # a Stats, or a sentence saying why not
    row_params = combine_params(row_params, st, row_kernel.domain)
    lines = st.tile_lines(value, pointers, rows_of_positions, num_w, BLOCK_N, num_n)   # in the rows tile
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from agent.templates.codegen import next_pow2
from agent.templates.implicit_gemm import rows_tiles
from agent.templates.ir import Leaf, contiguous_strides
from agent.templates.kernels import online_pairs, welford_pairs
from agent.templates.params import SMS

MOST_PARTS = 4096  # a row's partials, merged as one vector by each program of the combining kernel
COMBINE_PROGRAMS = 4 * SMS


@dataclass(frozen=True)
class Stats:
    row_kernel: int  # the index of the row kernel whose statistics the convolution takes over
    buffer: str  # the convolution's output buffer that row kernel reduces
    cpg: int  # channels a row
    groups: int  # rows a batch element
    parts: tuple  # the partial buffers (count, mean, sum of squared deviations), the row kernel's own names
    count: int  # partials a row

    def tile_lines(self, value: str, ptrs: list[str], positions: int, num_w: int, bn: int, num_n: int) -> list[str]:
        """A rows tile's lines storing the Welford state of its `value`s (under `mask`) in each row it meets."""
        lines = [f"st_b = row // {positions}", f"st_t = (row % {positions}) * {num_w} + wt"]
        if self.cpg > bn:  # one row, a block of its channels
            per = self.cpg // bn
            segments = [("mask", f"pid_n // {per}", f"(pid_n % {per}) * {positions * num_w} + st_t")]
        else:
            per = bn // self.cpg
            segments = [(f"mask & (rn1[:, None] // {self.cpg} == pid_n * {per} + {j})", f"pid_n * {per} + {j}",
                          "st_t") for j in range(per)]
        over = num_n * bn // self.cpg > self.groups  # the last channel tile runs past the last row
        for sel, row, slot in segments:
            store = [f"st_off = (st_b * {self.groups} + {row}) * {self.count} + {slot}"] + [
                f"tl.store({ptr} + st_off, {v})" for ptr, v in zip(ptrs, ("st_n", "st_m", "st_q"))]
            lines += [f"sel = {sel}", "st_n = tl.sum(tl.where(sel, 1.0, 0.0))",
                      f"st_m = tl.sum(tl.where(sel, {value}, 0.0)) / tl.maximum(st_n, 1.0)",
                      f"st_d = tl.where(sel, {value} - st_m, 0.0)", "st_q = tl.sum(st_d * st_d)"]
            lines += ([f"if {row} < {self.groups}:"] + ["    " + line for line in store]) if over else store
        return lines


def stats_pair(kernels: list, i: int, p: dict) -> Stats | str:
    """The row kernel whose statistics kernel i (a convolution) can compute in its epilogue, or why none."""
    conv = kernels[i]
    g = conv.nodes[0] if conv.kind == "gemm" else None
    if g is None or g.fn != "conv" or p.get("tiles") != "rows" or g.attrs["groups"] != 1:
        return "statistics in the epilogue need a convolution in rows tiles, of one group"
    stored = {b: m for m, b in conv.stores.items() if isinstance(b, str)}
    for j in range(i + 1, len(kernels)):
        k = kernels[j]
        pairs = welford_pairs(k) if k.kind == "tile" and k.layout == "row" else {}
        reduces = [r for r in k.nodes if r.op == "reduce"]
        if len(pairs) != 1 or len(reduces) != 2 or online_pairs(k):
            continue
        x = next(iter(pairs.values())).args[0]
        last = len(k.domain) - 1
        if not (isinstance(x, Leaf) and x.base in stored and x.offset == 0 and k.rdims == (last,) and
                tuple(x.shape) == tuple(k.domain) and tuple(x.strides) == contiguous_strides(k.domain)):
            continue
        rows, length = math.prod(k.domain[:-1]), k.domain[-1]
        batch, channels, positions = g.shape[0], g.shape[1], math.prod(g.shape[2:])
        cpg = length // positions
        _, _, bn, num_w = rows_tiles(g, p)
        fits = length % positions == 0 and channels % cpg == 0 and rows == batch * channels // cpg and (
            cpg % bn == 0 if cpg > bn else bn % cpg == 0)
        count = max(1, cpg // bn) * math.prod(g.shape[2:-1]) * num_w
        if not fits or next_pow2(count) > MOST_PARTS:
            return f"kernel {j}'s rows do not fall on this convolution's tiles, or take over {MOST_PARTS} partials"
        return Stats(j, x.base, cpg, channels // cpg, tuple(f"_row_kernel{j}_part{t}" for t in range(3)), count)
    return "no row kernel after this convolution reduces its output to Welford statistics"



def combine_params(p: dict, st: Stats, domain: tuple) -> dict:
    """The row kernel's parameters once the convolution writes its partials: the combining kernel alone, a row
    in as many chunks as keep COMBINE_PROGRAMS programs busy (or the row kernel's own SPLIT, if more), each at
    least a block."""
    own = {k: v for k, v in p.items() if k not in ("LAG", "COOP", "GROUP", "PERSIST")}
    split = max(own.get("SPLIT", 1), next_pow2(math.ceil(COMBINE_PROGRAMS / math.prod(domain[:-1]))))
    split = min(split, max(1, domain[-1] // own.get("BLOCK_R", 1024)))
    return {**own, "mode": "looped", "SPLIT": split, "EPI_PARTS": st.count}
