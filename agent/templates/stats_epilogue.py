"""Row statistics in a convolution's epilogue.

A group, instance or batch norm right after a convolution is a split row kernel (kernels._split): its first
kernel reads the convolution's output for each row's Welford statistics, its second reads it again for the
output. Where the convolution is Triton's, in rows tiles (implicit_gemm._render_rows), each tile already holds
its outputs: it reduces those of each row it meets to a Welford state (count, mean, sum of squared deviations
about that mean) and stores the state as one of the row's partials. The row kernel then runs only its combining
kernel (EPI_PARTS partials a row, merged as kernels._split merges its own, through a merging kernel where there
are more than kernels.MERGE_PARTS), and the buffer is read once, not twice.

A row is `cpg` channels of one batch element (a group or instance norm), or one channel of every batch element
(a batch norm). A tile takes BLOCK_N channels of one row of positions (the batch, every spatial dim but the
last, and a tile of the last, wt): it meets BLOCK_N / cpg rows where cpg <= BLOCK_N, or a block of one row's
channels. A row's partials are indexed by the batch element (a batch norm's), the channel block, the row of
positions and wt, so each is written by one tile. Streamed tiles (implicit_gemm._stream_kernel: BLOCK_M
positions of one batch element, every channel) come in runs of consecutive tiles, one a program: a run sums its
tiles in one image elementwise and stores a partial for each channel, indexed by the run's place among those
meeting the image and the channel's place in its row. An instance norm, traced as a batch norm of every batch
element's channels together, is a group norm of one channel a row. A row kernel that only sums a streamed
convolution's output over its positions (a global average pool: Pool) takes a partial sum a channel from each
run the same way, and then the convolution's output is never written.

    st = stats_pair(kernels, i, params)   # a Stats or a Pool, or a sentence saying why not (requested: a ValueError)
    row_params = combine_params(row_kernel, st, tuned)   # its parameters: a split output pass, `tuned` over it
    lines = st.tile_lines(value, pointers, rows_of_positions, num_w, BLOCK_N, num_n, joined)   # in the rows tile
    lines = st.stream_lines(value)   # in the streamed tile; st.stream_flush(pointers, ...) after a run's tiles

With `recompute` the convolution runs twice and its output is never written: the first launch stores only the
partials, the row kernel's combining kernel stores the row statistics, and the second launch (rows tiles only)
computes the convolution again with the row kernel's per-element output in its epilogue (recomputed). Where the
convolution is cheap beside its output's bytes (few input channels), this moves 2 x its output's bytes less than
writing it and reading it back.

    st = requested(kernels, i, params, outputs)   # params["recompute"]: ValueError where it cannot be
    again = recomputed(kernels, i, st)   # the second launch's kernel: the convolution, then the output pass
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from agent.analysis import PEAKS
from agent.templates.codegen import next_pow2
from agent.templates.implicit_gemm import gemm_dims, rows_layout, stream_runs
from agent.templates.ir import Leaf, Node, contiguous_strides
from agent.templates.kernels import flat_output, online_pairs, row_values, welford_pairs
from agent.templates.params import L2_BYTES, SMS, sizes, split_rows
from agent.templates.schedule import Kernel


@dataclass(frozen=True)
class Stats:
    row_kernel: int  # the index of the row kernel whose statistics the convolution takes over
    buffer: str  # the convolution's output buffer that row kernel reduces
    cpg: int  # channels a row takes of one batch element
    groups: int  # rows: a batch element's (channels / cpg), or all (a batch norm's: the channels)
    batched: bool  # whether each batch element has rows of its own, or each row spans the batch
    parts: tuple  # the partial buffers (count, mean, sum of squared deviations), the row kernel's own names
    count: int  # partials a row
    kept = True  # the convolution still writes `buffer` (Pool's does not)

    def tile_lines(self, value: str, ptrs: list[str], positions: int, num_w: int, bn: int, num_n: int,
                   joined: bool, row: str = "row", mask: str = "mask", cols: str = "cols",
                   width: str = "BLOCK_M") -> list[str]:
        """A rows tile's lines storing the Welford state of its `value`s (under `mask`; `cols` the columns of
        it) in each row it meets. A tile of one slot is taken as [rows, channels, BLOCK_M], each row's sums
        over its channels (in a thread) and then its positions; a tile `joined` from slots, one row at a time
        over the whole tile. On an H200 (session 18), the convolution alone: level 2's 21 (one slot, 128 a row)
        1.406 ms without statistics, 1.497 with them so, 1.663 a row at a time; level 2's 60 (two slots, 64)
        0.547, 0.700 so, 0.658 a row at a time. A tile of several batch elements (implicit_gemm's SAMPLES) takes
        them one at a time: `row`, `mask` and `cols` name that element's row and masks, `width` the tile's."""
        k = max(1, bn // self.cpg)  # rows a tile meets
        blocks = max(1, self.cpg // bn)  # tiles a row's channels take
        over = num_n * bn // self.cpg > self.groups  # the last channel tile runs past the last row
        guard = f", mask=st_g < {self.groups}" if over else ""
        span = positions * num_w  # a channel block's partials in one batch element
        batch = "" if self.batched else f"st_b * {blocks * span} + "
        lines = [f"st_b = {row} // {positions}",
                 f"st_n = tl.sum(tl.where({cols}, 1.0, 0.0)) * {min(self.cpg, bn)}",  # a row's channels are all < n
                 f"st_t = {batch}(pid_n % {blocks}) * {span} + ({row} % {positions}) * {num_w} + wt"]
        if self.cpg == 1:  # a row a channel: each channel's sums along the tile
            lines += [f"st_m = tl.sum(tl.where({mask}, {value}, 0.0), axis=1) / tl.maximum(st_n, 1.0)",
                      f"st_d = tl.where({mask}, {value} - st_m[:, None], 0.0)", "st_q = tl.sum(st_d * st_d, axis=1)",
                      "st_g = rn1"]
            return lines + self._stores(ptrs, f"st_n + tl.zeros((BLOCK_N,), dtype=tl.float32)", "", guard)
        if joined:
            for j in range(k):
                sel = mask if k == 1 else f"{mask} & (rn1[:, None] // {self.cpg} == pid_n * {k} + {j})"
                lines += [f"sel = {sel}", f"st_m = tl.sum(tl.where(sel, {value}, 0.0)) / tl.maximum(st_n, 1.0)",
                          f"st_d = tl.where(sel, {value} - st_m, 0.0)", "st_q = tl.sum(st_d * st_d)",
                          f"st_g = pid_n // {blocks} * {k} + {j}"]
                lines += self._stores(ptrs, "st_n", f"if st_g < {self.groups}:" if over else "")
            return lines
        lines += [f"st_k = tl.reshape({mask}, ({k}, {bn // k}, {width}))",
                  f"st_v = tl.reshape(tl.where({mask}, {value}, 0.0), ({k}, {bn // k}, {width}))",
                  "st_m = tl.sum(tl.sum(st_v, axis=1), axis=1) / tl.maximum(st_n, 1.0)",
                  "st_d = tl.where(st_k, st_v - st_m[:, None, None], 0.0)",
                  "st_q = tl.sum(tl.sum(st_d * st_d, axis=1), axis=1)",
                  f"st_g = pid_n // {blocks} * {k} + tl.arange(0, {k})"]
        return lines + self._stores(ptrs, f"st_n + tl.zeros(({k},), dtype=tl.float32)", "", guard)

    def stream_lines(self, value: str) -> list[str]:
        """A streamed tile's lines (implicit_gemm._stream_kernel: tile t, BLOCK_M positions of batch element b,
        every channel) adding its `value`s under `mask`, less a pivot a channel, into sums the shape of the
        tile (run_start), with no reduction: the tile's part of its run's Welford states, which stream_flush
        reduces and stores once the run leaves the image. The pivot is the channel's mean in the program's
        previous run (stream_start: zero before the first), so that the sum of squares suffers no cancellation
        where the mean is far from zero. On an H200 (session 49), level 2's 21's convolution at 128 positions a
        tile ran 0.962 ms without statistics and 0.947 with them so; session 48's form, the same sums reduced
        a tile, ran it at 1.18 (25 barriers a tile in its sm_90 loop against 9; this form adds none). The whole
        task (ms): 21 1.864 -> 1.458 at 128 positions (1.566 at 64), 92 1.149 -> 0.826, 85 0.944 -> 0.751, 73
        (a batch norm) 0.728 -> 0.622, but 23 (16 channels) 0.618 -> 0.641."""
        return [f"st_d = tl.where(mask, tl.broadcast_to({value}, (BLOCK_M, BLOCK_N)) - st_p[None, :], 0.0)",
                "st_s += st_d", "st_q += st_d * st_d", "st_c += tl.sum(tl.where(rmask, 1.0, 0.0), axis=1)"]

    @staticmethod
    def stream_start() -> list[str]:
        """A streamed kernel's lines before its loops: stream_lines' first pivot."""
        return ["st_p = tl.zeros((BLOCK_N,), dtype=tl.float32)"]

    @staticmethod
    def run_start() -> list[str]:
        """The lines before a run's tiles in one image: stream_lines' sums, and the count of its positions."""
        return ["st_s = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "st_q = tl.zeros_like(st_s)",
                "st_c = tl.zeros((BLOCK_M,), dtype=tl.float32)"]

    def stream_flush(self, ptrs: list[str], per: int, run: int, slots: int) -> list[str]:
        """The lines after a run's tiles in image b (tiles t_lo to t_end; `per` tiles an image, `run` a program,
        `slots` runs an image meets at most: implicit_gemm.stream_runs) storing each channel's Welford state as
        the partial of its row in the run's slot, the program's place among those meeting the image. The run
        that ends the image also stores empty states in the slots after its own, which no run fills."""
        index = f"st_j * {self.cpg} + rn1[None, :] % {self.cpg}" if self.batched else f"b * {slots} + st_j"
        row = f"b * {self.groups} + rn1[None, :] // {self.cpg}" if self.batched else "rn1[None, :]"
        lines = ["st_n = tl.sum(st_c)", "st_a = tl.sum(st_s, axis=0)", "st_m = st_p + st_a / tl.maximum(st_n, 1.0)",
                 "st_v = tl.maximum(tl.sum(st_q, axis=0) - st_a * st_a / tl.maximum(st_n, 1.0), 0.0)", "st_p = st_m"]
        lines += _slot_lines(per, run, slots) + [f"st_off = ({row}) * {self.count} + {index}"]
        return lines + [f"tl.store({ptr} + st_off, tl.where(st_j == st_slot, {v}[None, :], 0.0), "
                        f"mask=st_keep & (rn1[None, :] < {self.cpg * self.groups}))"
                        for ptr, v in zip(ptrs, ("(st_n + tl.zeros_like(st_m))", "st_m", "st_v"))]

    def _stores(self, ptrs: list[str], count: str, when: str, guard: str = "") -> list[str]:
        row = f"st_b * {self.groups} + st_g" if self.batched else "st_g"
        stores = [f"st_off = ({row}) * {self.count} + st_t"] + [
            f"tl.store({ptr} + st_off, {v}{guard})" for ptr, v in zip(ptrs, (count, "st_m", "st_q"))]
        return ([when] + ["    " + line for line in stores]) if when else stores


def _slot_lines(per: int, run: int, slots: int) -> list[str]:
    """A run's flush lines naming its slot among the runs that meet image b (st_slot: the first program meeting
    it takes 0) and which of [slots] it stores (st_keep): its own, and where it ends the image the ones after."""
    return [f"st_j = tl.arange(0, {next_pow2(slots)})[:, None]", f"st_slot = tl.program_id(0) - b * {per} // {run}",
            f"st_last = tl.where(t_end == b * {per} + {per}, {slots}, 0)",
            "st_keep = (st_j == st_slot) | ((st_j > st_slot) & (st_j < st_last))"]


@dataclass(frozen=True)
class Pool:
    """A row kernel that sums the convolution's output over its positions (a global average pool), taken over by
    streamed tiles: each run of tiles sums its channels' values and stores a partial a channel for each image it
    meets (as Stats does), and the convolution's output is never written. The row kernel then sums those
    partials instead (row: the same nodes over a [batch, channels, 1..., slots] buffer). On an H200 (session
    49) level 2's 67 (a GELU, then the mean over 64,516 positions of 64 channels) ran 2.175 -> 1.547 ms: its
    mean's pass (0.475) gone and its 2.1 GB output never written."""
    row_kernel: int
    buffer: str  # the convolution's output that the row kernel sums: no longer stored
    part: str  # the partial sums, [batch, channels, 1..., slots]
    shape: tuple  # the partials' shape
    kept = False

    @property
    def parts(self) -> tuple:
        return (self.part,)

    def stream_lines(self, value: str) -> list[str]:
        """A streamed tile's lines adding its `value`s under `mask` into the run's sums (run_start)."""
        return [f"st_s += tl.where(mask, tl.broadcast_to({value}, (BLOCK_M, BLOCK_N)), 0.0)"]

    @staticmethod
    def stream_start() -> list[str]:
        return []

    @staticmethod
    def run_start() -> list[str]:
        return ["st_s = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]

    def stream_flush(self, ptrs: list[str], per: int, run: int, slots: int) -> list[str]:
        """The lines after a run's tiles in image b storing each channel's sum in the run's slot, and empty sums in
        the slots after it where the run ends the image (Stats.stream_flush)."""
        channels = self.shape[1]
        store = (f"tl.store({ptrs[0]} + (b * {channels} + rn1[None, :]) * {slots} + st_j, "
                 f"tl.where(st_j == st_slot, tl.sum(st_s, axis=0)[None, :], 0.0), "
                 f"mask=st_keep & (rn1[None, :] < {channels}))")
        return _slot_lines(per, run, slots) + [store]

    def row(self, kernel: Kernel) -> Kernel:
        """The row kernel summing the partials: its read of the convolution's output a read of them, its domain
        theirs (the same reduced dims: its other values are constant along them)."""
        part = Leaf(self.part, self.shape, torch.float32, base=self.part, strides=contiguous_strides(self.shape))
        new = {}
        for m in kernel.nodes:
            new[m] = dataclasses.replace(m, args=[part if isinstance(a, Leaf) and a.base == self.buffer else
                                                  new.get(a, a) if isinstance(a, Node) else a for a in m.args])
        return dataclasses.replace(kernel, domain=self.shape, nodes=list(new.values()),
                                   level={new[m]: v for m, v in kernel.level.items()},
                                   stores={new[m]: b for m, b in kernel.stores.items()},
                                   store_when={new[m]: v for m, v in kernel.store_when.items()})


def read_elsewhere(kernels: list, buffer: str, j: int) -> bool:
    """Whether a kernel other than kernel j reads `buffer`."""
    return any(n != j and isinstance(a, Leaf) and a.base == buffer
               for n, k in enumerate(kernels) for m in k.nodes for a in m.args)


def _pooled(kernels: list, i: int, j: int, p: dict) -> Pool | None:
    """Pool, where kernel j sums convolution i's output (in streamed tiles) over its positions, reads it nowhere
    else and computes nothing larger than the sums (a mean's scale, a bias after it), and no other kernel reads
    that output."""
    conv, k = kernels[i], kernels[j]
    g = conv.nodes[0]
    reduces = [r for r in k.nodes if r.op == "reduce"]
    if p.get("tiles") != "stream" or k.kind != "tile" or k.layout != "row" or len(reduces) != 1:
        return None
    r, x = reduces[0], reduces[0].args[0]
    dims, rows = tuple(range(2, len(g.shape))), math.prod(g.shape[:2])
    stored = {b for m, b in conv.stores.items() if isinstance(b, str)}
    if not (r.fn == "sum" and tuple(r.attrs["dims"]) == dims == k.rdims and isinstance(x, Leaf) and
            x.base in stored and x.offset == 0 and tuple(x.shape) == tuple(k.domain) == tuple(g.shape) and
            tuple(x.strides) == contiguous_strides(g.shape)):
        return None
    others = [m for m in k.nodes if m is not r]
    args = [a for m in others for a in m.args if isinstance(a, Leaf)]
    if any(m.numel > rows for m in others + args):  # the convolution's output read past the sum, too
        return None
    if read_elsewhere(kernels, x.base, j):
        return None
    slots = stream_runs(g, p)[2]
    return Pool(j, x.base, f"_row_kernel{j}_sums", tuple(g.shape[:2]) + (1,) * (len(dims) - 1) + (slots,))


def stats_pair(kernels: list, i: int, p: dict) -> Stats | Pool | str:
    """The row kernel whose statistics kernel i (a convolution) can compute in its epilogue (or, in streamed
    tiles, whose sums over the positions: Pool), or why none."""
    conv = kernels[i]
    g = conv.nodes[0] if conv.kind == "gemm" else None
    if g is None or g.fn != "conv" or p.get("tiles") not in ("rows", "stream") or g.attrs["groups"] != 1:
        return "statistics in the epilogue need a convolution in rows or streamed tiles, of one group"
    stored = {b: m for m, b in conv.stores.items() if isinstance(b, str)}
    for j in range(i + 1, len(kernels)):
        k = kernels[j]
        pool = _pooled(kernels, i, j, p)
        if pool:
            return pool
        pairs = welford_pairs(k) if k.kind == "tile" and k.layout == "row" else {}
        reduces = [r for r in k.nodes if r.op == "reduce"]
        if len(pairs) != 1 or len(reduces) != 2 or online_pairs(k):
            continue
        x = next(iter(pairs.values())).args[0]
        if not (isinstance(x, Leaf) and x.base in stored and x.offset == 0 and tuple(x.shape) == tuple(k.domain)
                and tuple(x.strides) == contiguous_strides(k.domain)):
            continue
        batch, channels, positions = g.shape[0], g.shape[1], math.prod(g.shape[2:])
        stream = p["tiles"] == "stream"
        if stream:  # a partial a channel from each run of tiles that meets an image (Stats.stream_flush)
            tiles = stream_runs(g, p)[2]
        else:
            _, _, bn, num_w = rows_layout(g, p)
            tiles = math.prod(g.shape[2:-1]) * num_w  # a channel block's tiles in one batch element
        if k.rdims == (0,) + tuple(range(2, len(g.shape))):  # a batch norm, or an instance norm as one of
            if tuple(k.domain) == tuple(g.shape):  # every batch element's channels together: a row a channel
                return Stats(j, x.base, 1, channels, False, _names(j), batch * tiles)
            if tuple(k.domain) == (1, batch * channels, *g.shape[2:]):
                return Stats(j, x.base, 1, channels, True, _names(j), tiles)
        first = min(k.rdims, default=len(k.domain))  # rows reduced over their last dims: [rows, length]
        rows, length = math.prod(k.domain[:first]), math.prod(k.domain[first:])
        cpg = length // positions
        fits = k.rdims == tuple(range(first, len(k.domain))) and length % positions == 0 and channels % cpg == 0 and \
            rows == batch * channels // cpg and (stream or (cpg % bn == 0 if cpg > bn else bn % cpg == 0))
        if not fits:
            return f"kernel {j}'s rows do not fall on this convolution's tiles"
        # a streamed tile stores a partial a channel (Stats.stream_lines), a rows tile one a row it meets
        return Stats(j, x.base, cpg, channels // cpg, True, _names(j), (cpg if stream else max(1, cpg // bn)) * tiles)
    return "no row kernel after this convolution reduces its output to Welford statistics"


def requested(kernels: list, i: int, p: dict, outputs: tuple = ()) -> Stats | Pool | None:
    """The statistics `p` asks kernel i to take over (p["stats"]), None where it asks none; ValueError, saying
    why, where they cannot be, or where p["recompute"] asks a second launch that cannot be (`outputs`: the
    program's output buffers)."""
    if p.get("recompute") and not p.get("stats"):
        raise ValueError("recompute: the convolution runs twice only with its statistics in its epilogue (stats)")
    if not p.get("stats"):
        return None
    if p.get("recompute") and p.get("tiles") != "rows":
        raise ValueError("recompute: the convolution's second launch is built for rows tiles")
    st = stats_pair(kernels, i, p)
    if isinstance(st, str):
        raise ValueError(f"stats: {st}")
    if isinstance(st, Pool) and st.buffer in outputs:
        raise ValueError("stats: the convolution's output, which its sums would never write, is an output of the task")
    why = p.get("recompute") and why_not_recomputed(kernels, st, outputs)
    if why:
        raise ValueError(f"recompute: {why}")
    return st


def why_not_recomputed(kernels: list, st: Stats, outputs: tuple = ()) -> str | None:
    """Why the row kernel's output pass cannot run as a second launch of the convolution, or None."""
    if st.buffer in outputs:
        return "the convolution's output is an output of the task"
    if read_elsewhere(kernels, st.buffer, st.row_kernel):
        return "another kernel reads the convolution's output"
    row = kernels[st.row_kernel]
    if not row.writes_elements or row_values(row) is None:
        return "the row kernel's per-element output cannot be computed from stored row statistics"
    return None


def recompute_pays(kernels: list, i: int, st: Stats) -> bool:
    """Whether the convolution's products (at the peak fp32 rate) take less time than writing its output and
    reading it back (at the peak memory rate): then a second launch computing them again moves less than the
    buffer. Level 2's 60 (3 input channels) is 2.5 flops a byte of the round trip, under the H200's ridge of 12."""
    g = kernels[i].nodes[0]
    groups, m, n, k = gemm_dims(g)
    flops = 2 * groups * m * n * k / (math.prod(g.attrs["stride"]) if g.attrs["transposed"] else 1)
    return why_not_recomputed(kernels, st) is None and flops / (2 * 4 * math.prod(g.shape)) < PEAKS["sm_90"][0] / \
        PEAKS["sm_90"][1]


def recomputed(kernels: list, i: int, st: Stats) -> Kernel:
    """The convolution (kernel i) with the row kernel's per-element output pass as its epilogue: each read of
    the convolution's output buffer is the convolution's value itself (viewed as the row kernel's rows: the
    buffer is contiguous, so an element's linear index is the same in both), each row value a read of its
    stored statistic, and the row kernel's outputs its only stores."""
    conv, row = kernels[i], kernels[st.row_kernel]
    flat = flat_output(row, {key: f"_row_kernel{st.row_kernel}_stat{t}" for t, key in enumerate(row_values(row))})
    stored = next(m for m, b in conv.stores.items() if b == st.buffer)
    views: dict[tuple, Node] = {}

    def value(a):
        if not (isinstance(a, Leaf) and a.base == st.buffer):
            return new.get(a, a) if isinstance(a, Node) else a
        if tuple(a.shape) == tuple(stored.shape):
            return stored
        if tuple(a.shape) not in views:
            views[tuple(a.shape)] = Node(f"{stored.name}_rows", tuple(a.shape), stored.dtype, op="view",
                                         fn="reshape", args=[stored])
        return views[tuple(a.shape)]

    new: dict[Node, Node] = {}
    for m in flat.nodes:
        new[m] = dataclasses.replace(m, args=[value(a) for a in m.args])
    members = list(views.values()) + list(new.values())
    return Kernel("gemm", conv.domain, nodes=conv.nodes + members,
                  level={**conv.level, **{m: "full" for m in members}},
                  stores={new[m]: b for m, b in flat.stores.items()})


def _names(j: int) -> tuple:
    return tuple(f"_row_kernel{j}_part{t}" for t in range(3))  # the row kernel's own (kernels._split)


def combine_params(kernel, st: Stats, tuned: dict) -> dict:
    """The row kernel's parameters once the convolution writes its partials: its combining kernel alone, by
    default as a split norm's output pass (params.split_rows: 1024-wide chunks at 4 warps, pipelined), `tuned`
    (the search's parameters for that kernel) over that. On an H200 (session 18) level 2's 21, whose norm had
    been one kernel a row at 8 warps in 4096-wide chunks, ran its combining kernel so in 0.565 ms, not 0.610."""
    own = {**split_rows(*sizes(kernel)[:2], rewrites=True), **tuned}
    dropped = ("LAG", "COOP", "GROUP", "PERSIST", "pairs")  # forms of a row kernel that loads its rows itself
    return {**{k: v for k, v in own.items() if k not in dropped}, "EPI_PARTS": st.count}


def worth_it(kernels: list, i: int, p: dict) -> bool:
    """Whether kernel i takes its row kernel's statistics and the row kernel would read its rows twice from HBM:
    a row an SM outgrows L2. Where they fit, the second read comes from L2 and the epilogue's reductions cost more
    than they save: level 2's 85, rows of 63504, 0.46 -> 0.63 ms for the norm alone (H200, session 18)."""
    st = stats_pair(kernels, i, p)
    if isinstance(st, str):
        return False
    return sizes(kernels[st.row_kernel])[1] * 4 * SMS > L2_BYTES
