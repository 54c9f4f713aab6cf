"""Implicit-GEMM convolution: any convolution (1-, 2- or 3-D; grouped, strided, padded, dilated; transposed)
as a GEMM whose rows are output positions (M = batch x output spatial size), whose columns are the output
channels of one group (N), and whose reduction runs over the group's input channels times the kernel window
(K). Each K step gathers its tile of the input straight from memory, with the taps that fall outside the input
(in the padding) masked to zero, so no im2col buffer is ever written.
Programs: M x N tiles in GROUP_M order along axis 0, one group per program along axis 1. The epilogue (bias,
activations, residual adds) runs on the fp32 accumulator, as in the matrix-product kernel.

A transposed convolution with a stride s > 1 reaches each output from only the taps t with t * dilation = output
+ padding (mod s): of the whole window, 1 / s of it per strided dim. Its outputs are taken in phases (one per
residue of output + padding mod s, per dim), each phase's rows reading only its own taps, so the K loop runs over
the input channels times those taps and no step is masked away whole. A tile's phases are consecutive programs:
they write the interleaved outputs of one region together, so its partial sectors meet in L2. With interleaved
tiles (the default where the last dim is strided and the rows walk channels), one program takes every phase of
the last dim instead, each a K loop of its own, and stacks their tiles so that it stores whole output rows:
a phase's outputs alone are s elements apart, a warp's store then touching s times the sectors.
With BLOCK_K 1 (outer products, for few input channels: outer_steps) each K step is one tap: its input offsets
and bound checks once, then per input channel (unrolled) a rank-1 update of the accumulator in FMAs, with no
tl.dot. A phase of a 3-channel transposed convolution reads 3 to 24 (channel, tap) columns, which 16-wide dot
steps padded and gathered as [16, BLOCK_M] index tiles.

    batch, m, n, k = gemm_dims(node)   # a matrix-product node or a convolution node
    code = render_conv(kernel, "_gemm_kernel0", {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32, ...})
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re

import torch

from agent.templates.codegen import (DESCRIPTOR_IMPORT, SMEM_BYTES, SMS, Gen, KernelCode, Launch, descriptor_name,
                                     dot_cast, kernel_header, next_pow2, split_dot, store_lines, tf32_parts)
from agent.templates.ir import Leaf, contiguous_strides
from agent.templates.schedule import Kernel


def gemm_dims(node) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a gemm node: a (batched) matrix product, or a convolution per group (batch =
    groups)."""
    a, b = node.args
    if node.fn != "conv":
        return (a.shape[0] if len(a.shape) == 3 else 1), a.shape[-2], b.shape[-1], a.shape[-1]
    groups, out = node.attrs["groups"], node.shape
    return groups, out[0] * math.prod(out[2:]), out[1] // groups, a.shape[1] // groups * math.prod(b.shape[2:])


def _split_index(var: str, sizes: tuple, prefix: str) -> list[str]:
    """Lines naming each coordinate of a row-major index over `sizes`: prefix0, prefix1, ..."""
    lines = []
    for i, size in enumerate(sizes):
        inner = math.prod(sizes[i + 1:])
        code = var if inner == 1 else f"({var} // {inner})"
        lines.append(f"{prefix}{i} = {code} % {size}" if i > 0 else f"{prefix}{i} = {code}")
    return lines


def _axes(last: bool) -> tuple[str, str]:
    """How a row (output position) vector and a K (channel, tap) vector broadcast into the input tile: [M, K],
    or [K, M] with positions the last axis."""
    return ("[None, :]", "[:, None]") if last else ("[:, None]", "[None, :]")


def _split_taps(attrs: dict, in_sizes: tuple, sx: tuple, last: bool,
                one_tap: bool = False) -> tuple[list[str], list[str], list[str]]:
    """An unphased convolution's input offset as a sum of an output position's part and a (channel, tap)
    column's, so that a dot step's [BLOCK_M, BLOCK_K] tile costs one add an element, not each element's input
    coordinates and bounds (about ten integer operations): lines naming the positions' part (xr, before the K
    loop), the columns' (xc, in it), and the conditions keeping each padded dim's coordinate a{i} + b{i} inside
    the input, one unsigned comparison each (a negative coordinate is a large unsigned one). On an H200 (session
    63, variants_bench at each task's channel tiles, K steps of 32, ms), against the coordinates an element: level
    1's 80_conv_standard_2D (padded, dilated) 9.405 -> 7.891, 62 8.912 -> 8.712; level 2's 47_Conv3d_Mish_Tanh
    8.367 -> 7.464, 31 6.693 -> 6.434, 32 13.820 -> 13.387. At two stages or over the packed weight these ran
    1.03-2.5x slower, as did rows tiles over the channels-last copy (31 12.62, 47 13.94, 43 10.24 at 128 x 128).
    Where a K step takes one tap (`one_tap`: tap_steps), each b{i} is a scalar and each condition a vector over
    the positions."""
    row, col = ("", "") if one_tap else _axes(last)
    head, body, conds, xr, xc = [], [], [], [], [f"ci * {sx[1]}"]
    for i, size in enumerate(in_sizes):
        s, pad, d = attrs["stride"][i], attrs["padding"][i], attrs["dilation"][i]
        if attrs["transposed"]:  # input = output + pad - tap * dilation (stride 1: a strided one is phased)
            a, b, check = f"o{i} + {pad}" if pad else f"o{i}", f"-kw{i}" if d == 1 else f"kw{i} * {-d}", True
        else:  # input = output * stride - pad + tap * dilation; without padding always inside the input
            a = (f"o{i}" if s == 1 else f"o{i} * {s}") + (f" - {pad}" if pad else "")
            b, check = f"kw{i}" if d == 1 else f"kw{i} * {d}", pad > 0
        head.append(f"a{i} = {a}")
        body.append(f"b{i} = {b}")
        xr.append(f"a{i} * {sx[2 + i]}")
        xc.append(f"b{i} * {sx[2 + i]}")
        if check:
            conds.append(f"((a{i}{row} + b{i}{col}).to(tl.uint32) < {size})")
    return head + [f"xr = {' + '.join(xr)}"], body + [f"xc = {' + '.join(xc)}"], conds


def _phases(attrs: dict, window: tuple, in_sizes: tuple, out_sizes: tuple) -> list[dict]:
    """Per spatial dim of a transposed convolution, what its phase lines need: stride s, padding, dilation d,
    window k, input and output size, tap step (the taps of one phase are step apart), rows per phase
    (ceil(out / s)) and the most taps any one phase reads."""
    dims = []
    for s, pad, d, k, size, out in zip(attrs["stride"], attrs["padding"], attrs["dilation"], window, in_sizes,
                                       out_sizes):
        step = s // math.gcd(d, s)
        counts = [len(range(t, k, step)) for t in range(min(step, k))]
        dims.append({"s": s, "pad": pad, "d": d, "k": k, "in": size, "out": out, "step": step,
                     "rows": -(-out // s), "most": max(counts)})
    return dims


def _slot_taps(dim: dict, slot: int) -> tuple[int, int, int]:
    """The phase (residue of output + padding mod s) of a dim's outputs equal to slot mod s, its first tap and
    its number of taps (0 where no tap reaches those outputs)."""
    s, d, k, step = dim["s"], dim["d"], dim["k"], dim["step"]
    r = (slot + dim["pad"]) % s
    t0 = next((t for t in range(min(step, k)) if t * d % s == r), k)
    return r, t0, len(range(t0, k, step))


def _phase_lines(dims: list[dict], batch: int, cin_g: int, big: str, last: bool,
                 slot: int | None = None) -> tuple[list[str], list[str], list[str], list[str]]:
    """A phased transposed convolution's lines before its K loop (its K extent among them, `ktaps`: cin_g
    times the phase's taps), the loop body's lines up to the taps kw{i} and input coordinates i{i}, and their
    validity conditions. Dim i's phase r{i} is a residue of output + padding mod s; its outputs are f{i} + s * j,
    its taps t0{i} + step * m for m below n{i}. The input coordinate (output + padding - tap * d) / s splits
    into a row's part and a tap's part, each an exact division of a vector, none of the 2-D tile.
    With `slot` (interleaved tiles), the last dim's outputs are those equal to slot mod s: its phase is a
    constant, ph counts the other dims' phases only, and the lines that depend on the slot come apart from
    the others: (lines, slot's lines, body, conditions); the slot's lines are empty without one."""
    held = len(dims) - 1 if slot is not None else None
    taps, phase = [], {}
    for i, dim in enumerate(dims):
        s, pad, d, k, step = dim["s"], dim["pad"], dim["d"], dim["k"], dim["step"]
        taps.append(str(k) if s == 1 else f"n{i}")
        if s == 1:
            continue
        if i == held:
            r, t0, n = _slot_taps(dim, slot)
            phase[i] = [f"r{i} = {r}", f"f{i} = {slot}", f"t0{i} = {t0}", f"n{i} = {n}"]
            continue
        inner = math.prod(x["s"] for x in dims[i + 1:held])
        first = k  # the phase's first tap: the t below step with t * d = r (mod s), or k where there is none
        for t in reversed(range(min(step, k))):
            first = f"tl.where(r{i} == {t * d % s}, {t}, {first})"
        phase[i] = [f"r{i} = (ph // {inner}) % {s}" if inner > 1 else f"r{i} = ph % {s}",
                    f"f{i} = (r{i} + {s - pad % s}) % {s}", f"t0{i} = {first}",
                    f"n{i} = ({k + step - 1} - t0{i}) // {step}"]
    rows = [f"rm1 = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){big}"]
    rows += _split_index("rm1", (batch,) + tuple(d["rows"] for d in dims), "q")
    ok = [f"(rm1 < {batch * math.prod(d['rows'] for d in dims)})"]
    outputs = {}
    for i, dim in enumerate(dims):
        outputs[i] = [f"o{i} = q{i + 1}" if dim["s"] == 1 else f"o{i} = f{i} + q{i + 1} * {dim['s']}"]
        if dim["s"] > 1:
            ok.append(f"(o{i} < {dim['out']})")
            outputs[i].append(f"jo{i} = (o{i} + {dim['pad']} - r{i}) // {dim['s']}")
    ktaps, row_ok = f"ktaps = {cin_g} * {' * '.join(taps)}", f"row_ok = {' & '.join(ok)}"
    others = [i for i in range(len(dims)) if i != held]
    lines = [f"pid_g = tl.program_id(1){big}"] + [x for i in others for x in phase.get(i, [])]
    if held is None:
        lines += [ktaps] + rows + [x for i in others for x in outputs[i]] + [row_ok]
        slot_lines = []
    else:
        lines += rows + [x for i in others for x in outputs[i]]
        slot_lines = phase[held] + [ktaps] + outputs[held] + [row_ok]
    body = ["m = kk" if cin_g == 1 else f"m = kk // {cin_g}", "ci = kk * 0" if cin_g == 1 else f"ci = kk % {cin_g}"]
    conds = []
    row, col = _axes(last)
    for i, dim in enumerate(dims):
        s, pad, d = dim["s"], dim["pad"], dim["d"]
        after = " * ".join(taps[i + 1:])
        index = f"(m // ({after}))" if after else "m"
        body.append(f"kw{i} = {index} % {taps[i]}" if dim["s"] == 1 else f"kw{i} = t0{i} + ({index} % n{i}) * "
                    f"{dim['step']}")
        if s == 1:
            tap = f"kw{i}{col}" if d == 1 else f"kw{i}{col} * {d}"
            body.append(f"i{i} = o{i}{row} + {pad} - {tap}" if pad else f"i{i} = o{i}{row} - {tap}")
        else:  # both exact: o + pad and a phase's tap * d are r mod s, and neither part is negative
            body += [f"jk{i} = (kw{i} * {d} - r{i}) // {s}", f"i{i} = jo{i}{row} - jk{i}{col}"]
        conds += [f"(i{i} >= 0)", f"(i{i} < {dim['in']})"]
    return lines, slot_lines, body, conds


def _k_steps(node) -> tuple[list[dict], int, int]:
    """A convolution node's phases (none unless it is transposed with a stride above 1: _phases), its input
    channels per group, and the most K one phase reads (the whole K where unphased)."""
    x, w = node.args
    attrs = node.attrs
    cin_g, window = x.shape[1] // attrs["groups"], tuple(w.shape[2:])
    if not (attrs["transposed"] and any(s > 1 for s in attrs["stride"])):
        return [], cin_g, cin_g * math.prod(window)
    dims = _phases(attrs, window, tuple(x.shape[2:]), tuple(node.shape[2:]))
    return dims, cin_g, cin_g * math.prod(d["most"] for d in dims)


def phase_ks(node) -> set[int]:
    """The K each phase of a phased convolution reads, of the phases some tap reaches (empty where unphased)."""
    dims, cin_g, _ = _k_steps(node)
    counts = [[_slot_taps(dim, slot)[2] for slot in range(dim["s"])] for dim in dims]
    return {cin_g * math.prod(c) for c in itertools.product(*counts) if math.prod(c)} if dims else set()


def gemm_block(p: dict, key: str, extent: int) -> int:
    """A tile size of p (64 unless given) for a GEMM axis of `extent`: no larger than the axis needs, at least 16."""
    return min(p.get(key, 64), max(16, next_pow2(extent)))


POSITIONS_K = 32  # the most K a phase may read for conv_tiles' positions form


def conv_tiles(node, p: dict) -> str:
    """The axis a convolution's tiles walk, "positions" or "channels": p["tiles"], else the measured rule below.

    A phased convolution over a few input channels whose phases read at most POSITIONS_K of K (3 channels and
    up to 8 taps a phase) has its input and output tiles walk output positions, the last axis (Triton walks the
    last axis where it cannot prove either contiguous, and had walked (channel, tap) columns and channels).
    Measured on 4 H200s with 32-wide K tiles, Triton's times: level 2's 3-input-channel transposed convolutions
    went from about 20 to 6 ms (72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool 21.0 -> 6.6), where the same form
    ran the others slower: 1.2-1.5x over 16-64 input channels, 2.3x for 81_conv_transposed_2D (32 channels, one
    tap a phase: 1.35 -> 3.16 ms), 1.2x for 59_conv_standard_3D (3 channels, unphased); with only the output
    transposed, 81 still took 3.13 ms. With 16-wide K tiles (two steps), on one H100, the positions form still
    won on the 3-channel ones (72: 6.40 -> 4.61 ms) and lost on 75_conv_transposed_2D (1.08 -> 2.21). Some
    faster in that form were not phased (level 1's 58_conv_transposed_3D, 11.9 -> 7.1 ms at 32 wide), so
    params["tiles"] lets the search choose either for any convolution. The rule is for 16- or 32-wide dot steps:
    the defaults (params.gemm_tiles) give the convolutions it picks outer-product steps in named channel tiles."""
    if p.get("tiles"):
        return p["tiles"]
    return "positions" if _few_columns(node) else "channels"


def _few_columns(node) -> bool:
    """Whether a convolution is phased and its phases read few (channel, tap) columns: at most 8 input channels a
    group and POSITIONS_K columns a phase (conv_tiles' positions rule, outer_steps)."""
    dims, cin_g, k_most = _k_steps(node)
    return bool(dims) and cin_g <= 8 and k_most <= POSITIONS_K


def outer_steps(node) -> bool:
    """Whether a convolution's K steps may be outer products (BLOCK_K 1): as few input channels and columns a
    phase as conv_tiles' positions form takes. On an H200 (session 14), level 2's six 3-channel transposed
    convolutions, the whole candidate, outer products in channel tiles of 256 x 16 at 2 warps against 16-wide dot
    steps in positions tiles of 512 x 16 at 4: 50, 58, 60, 72, 89, 96 2.41 -> 1.36, 2.44 -> 1.42, 3.63 -> 2.35,
    3.64 -> 2.65, 2.59 -> 1.47, 2.37 -> 1.32 ms, a (channel, tap) column a step; a tap a step with its channels
    unrolled (_outer_body), 7-15% faster again (96: 1.32 -> 1.13). Others ran slower as outer products (a column
    a step): level 1's 81 and 75_conv_transposed_2D (32 input channels) 1.4-1.75x, and unphased convolutions
    over 3 to 8 input channels (a 3x3 or 3x3x3 window) 1.6-2.8x (level 1's 54 and 59_conv_standard_3D, level 2's
    21, 23, 48, 57, 69, 71, 87, 90)."""
    return node.fn == "conv" and _few_columns(node)


def interleave_slots(node) -> int:
    """The slots an interleaved tile of a convolution stacks (its last dim's stride, to a power of two), or 0
    where it cannot take one: it must be phased, its last dim strided."""
    dims = _k_steps(node)[0]
    return next_pow2(dims[-1]["s"]) if dims and dims[-1]["s"] > 1 else 0


def _joined(accs: list[str], shape: str = "") -> list[str]:
    """Lines stacking equal [BLOCK_M, BLOCK_N] tiles (a power of two of them) along a new last axis, in
    order, into `acc` (reshaped to `shape` where given): tl.join's nesting puts the first join's axis
    outermost, so the leaves go in bit-reversed order."""
    bits = len(accs).bit_length() - 1
    level = [accs[int(f"{i:0{bits}b}"[::-1], 2)] for i in range(len(accs))]
    lines = []
    while len(level) > 1:
        names = [f"j{len(level)}_{i}" for i in range(len(level) // 2)]
        lines += [f"{n} = tl.join({a}, {b})" for n, a, b in zip(names, level[::2], level[1::2])]
        level = names
    return lines + [f"acc = tl.reshape({level[0]}, {shape or f'(BLOCK_M, BLOCK_N, {len(accs)})'})"]


def _interleave(dims: list[dict], batch: int, cin_g: int, big: str, rows: int, n: int, k_loop) -> list[str]:
    """An interleaved program's K loops, one per slot of the last dim (its outputs equal to the slot mod s; none
    where no tap reaches them), their tiles stacked into [BLOCK_M, BLOCK_N, slots] (acc, slots a power of two),
    and the output's indices and mask there: rm the flat (batch, other dims) position, rw the last dim's. Where
    Triton's axis analysis finds equal contiguity it walks the first axis first, so after the slots (contiguous
    in the output) a warp's lanes walk positions, not channels."""
    held, last = dims[-1], len(dims) - 1
    slots = next_pow2(held["s"])
    lines, accs = [], []
    for f in range(slots):
        if f >= held["s"] or _slot_taps(held, f)[2] == 0:
            accs.append("zero")
            continue
        lines += _phase_lines(dims, batch, cin_g, big, False, f)[1] + k_loop(f"acc{f}")
        accs.append(f"acc{f}")
    if "zero" in accs:
        lines.insert(0, "zero = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    lines += _joined(accs)
    flat = "q0"
    for i, dim in enumerate(dims[:-1]):
        flat = f"({flat}) * {dim['out']} + o{i}"
    ok = [f"(rm1 < {rows})"] + [f"(o{i} < {d['out']})" for i, d in enumerate(dims[:-1]) if d["s"] > 1]
    return lines + [f"slot = tl.arange(0, {slots})[None, None, :]", f"rm = ({flat})[:, None, None]",
                    f"rw = (q{last + 1} * {held['s']})[:, None, None] + slot",
                    f"mask = ({' & '.join(ok)})[:, None, None] & (rn1[None, :, None] < {n}) & (slot < {held['s']})"
                    f" & (rw < {held['out']})"]


def _outer_body(body: list[str], dims: int, window: int, sx, sw, ci_stride: int, cin_g: int, n: int, row_ok: str,
                conds: list[str], last: bool) -> list[str]:
    """An outer-product K step's lines (BLOCK_K 1): one tap a step (kk its first column, a multiple of cin_g), its
    input offsets and bound checks computed once, then each input channel's [BLOCK_M, 1] by [1, BLOCK_N]
    product in fp32, the channels unrolled (the caller adds each to the accumulator, indented under the loop)."""
    x_off = " + ".join(f"i{i} * {sx[2 + i]}" for i in range(dims))
    w_off = " + ".join(f"kw{i}[:, None] * {sw[2 + i]}" for i in range(window))
    row = _axes(last)[0]
    load = f"tl.load(x_tap + ci * {sx[1]}, mask=ok, other=0.0)"
    return [line for line in body if not line.startswith("ci = ")] + [
        f"x_tap = x_row{row} + {x_off}", f"ok = {' & '.join([row_ok] + conds)}", f"w_tap = w_col[None, :] + {w_off}",
        f"for ci in tl.static_range({cin_g}):",
        f"    ta = {f'tl.trans({load})' if last else load}.to(tl.float32)",
        f"    tb = tl.load(w_tap + ci * {ci_stride}, mask=rn1[None, :] < {n}, other=0.0).to(tl.float32)"]


ROWS_CIN = 8  # the most input channels a group that rows tiles unroll in each K step


def rows_fit(node) -> bool:
    """Whether a convolution can take rows tiles (_render_rows) in outer-product steps: few input channels a
    group, each K step unrolling them with the last dim's taps. In dot steps any convolution can."""
    return node.fn == "conv" and node.args[0].shape[1] // node.attrs["groups"] <= ROWS_CIN


def rows_k(node, p: dict) -> int:
    """The input channels a rows tile's K step takes: 1 (outer products, the channels unrolled) where BLOCK_K
    is 1 or not given, else a tl.dot step over BLOCK_K of them (at least 16, no more than the group needs)."""
    return 1 if p.get("BLOCK_K", 1) == 1 else gemm_block(p, "BLOCK_K", node.args[0].shape[1] // node.attrs["groups"])


def pointwise(node) -> bool:
    """Whether a convolution is a 1x1 one (every window dim 1, stride 1, no padding, not transposed): a batched
    matrix product whose input tile is a plain strided load, no taps to gather."""
    a = node.attrs
    return node.fn == "conv" and set(node.args[1].shape[2:]) == {1} and set(a["stride"]) == {1} and \
        not any(a["padding"]) and not a["transposed"]


STREAM_POSITIONS = 256  # the fewest positions an image a streamed convolution takes (4 tiles of 64)
# the most (input channel, tap) columns a streamed convolution with a window holds: at 216 (level 2's 3-D
# convolutions over 8 channels, 14 steps) it ran 1.3-2.3x slower than the tiles before (H200, session 45)
WINDOW_K = 160
WINDOW_BLOCK_K = 16  # its dot steps' columns: tf32 dots take no fewer
WINDOW_SPREAD = 1.25  # the most positions its tiles walk for each output (walked_positions)


def streams(node) -> bool:
    """Whether a convolution can take tiles "stream" (_render_stream): one group, stride 1, fp32, at most 128
    output channels (the weight a program holds), at least STREAM_POSITIONS outputs an image, and its input a
    contiguous tensor from its start. A 1x1 one (unpadded) takes at most 64 input channels, its positions an
    image a multiple of 4 (a TMA descriptor's 16-byte strides) and under 2^31 in all (a position's index in 32
    bits). One with a window (padded or not, transposed or not: window_taps) at most WINDOW_K (channel, tap)
    columns, held within a block's shared memory at its default 3 stages (stream_smem), its walk at most
    WINDOW_SPREAD times its outputs (walked_positions) and its input, padded, under 2^31 elements."""
    a = node.attrs
    if node.fn != "conv" or a["groups"] != 1 or set(a["stride"]) != {1}:
        return False
    x, positions = node.args[0], math.prod(node.shape[2:])
    plain = x.kind == "tensor" and not x.bounds and x.offset == 0 and tuple(x.strides) == contiguous_strides(x.shape)
    if not plain or x.dtype != torch.float32 or node.shape[1] > 128 or positions < STREAM_POSITIONS:
        return False
    if pointwise(node):
        return x.shape[1] <= 64 and positions % 4 == 0 and node.shape[0] * positions < 2**31
    return gemm_dims(node)[3] <= WINDOW_K and walked_positions(node) <= WINDOW_SPREAD * positions and \
        math.prod(x.shape[:2]) * math.prod(padded_sizes(node)) < 2**31 and \
        stream_smem({"num_stages": 3}, node) <= SMEM_BYTES


def window_taps(node) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """A stride-1 convolution's window as taps over its input padded with zeros: the zeros before and after
    each spatial dim, and per dim the padded input offset of its first tap and the step to the next. Output j
    reads input j + t * d - padding through tap t, or in a transposed one j + padding - t * d (its taps read
    backwards)."""
    x, w = node.args
    a = node.attrs
    pads, taps = [], []
    for size, out, k, pad, d in zip(x.shape[2:], node.shape[2:], w.shape[2:], a["padding"], a["dilation"]):
        first, step = (pad, -d) if a["transposed"] else (-pad, d)
        low, high = min(first, first + (k - 1) * step), max(first, first + (k - 1) * step)
        pads.append((max(0, -low), max(0, out - 1 + high - (size - 1))))
        taps.append((first + pads[-1][0], step))
    return pads, taps


def padded_sizes(node) -> tuple[int, ...]:
    """The spatial sizes of a streamed convolution's input padded with zeros (window_taps)."""
    return tuple(size + lo + hi for size, (lo, hi) in zip(node.args[0].shape[2:], window_taps(node)[0]))


def walked_positions(node) -> int:
    """The positions an image a streamed convolution's tiles walk: its outputs, or with a window every position
    of its padded input's rows that the output's rows along the first dim read first (those rows by the padded
    input's other dims), so that each tap reads a tile at one offset from the tile's positions, and the outputs
    past a row's end go unstored."""
    return math.prod(node.shape[2:]) if pointwise(node) else node.shape[2] * math.prod(padded_sizes(node)[1:])


def stream_runs(node, p: dict) -> tuple[int, int, int]:
    """Streamed tiles that take the next norm's statistics walk runs of consecutive tiles, one a program
    (stats_epilogue.Stats.stream_lines): the tiles an image, the tiles a run, and the most runs one image meets."""
    total = node.shape[0] * (per := math.ceil(walked_positions(node) / p.get("BLOCK_M", 64)))
    run = math.ceil(total / min(total, SMS * p.get("per_sm", 1)))
    return per, run, min(per, (per - 1) // run + 2)


def stream_blocks(node) -> tuple[int, int]:
    """A streamed convolution's BLOCK_K and BLOCK_N: every output channel (at least 16), and every input
    channel (the whole K in one step) or, with a window, dot steps of WINDOW_BLOCK_K (_render_stream)."""
    _, _, n, k = gemm_dims(node)
    return (max(16, next_pow2(k)) if pointwise(node) else WINDOW_BLOCK_K), max(16, next_pow2(n))


def stream_smem(p: dict, node, scratch: bool = True) -> int:
    """Shared memory bytes a streamed convolution's program needs at most (_render_stream): its stages of input
    tiles, the weight's two TF32 parts and the output tile the TMA store reads. Triton's own figures (its sm_90
    compile), 64 input and 128 output channels: 147,480 at 64 positions and 4 stages (this counts 163,840),
    229,400 at 128 and 4 (this counts 262,144 and refuses it; on an H200 it ran 3.81 ms to 64's 3.58). With a
    window, a stage fewer of each step's input tile, no output tile, and 2,304 bytes a warp for the layout
    conversions and barriers (Triton 3.9's sm_90 compiles over 3-16 input channels in 3x3 windows into 16-64,
    64 or 128 positions, 2-4 stages: 4.2-9.0 KB past the tiles at 4 warps, 16.6-16.9 KB at 8). On an H200
    (Triton 3.6) 16 channels into 64 at 128 positions and 3 stages ran in 4 warps and asked 237,568 bytes in
    8 (this counts 230,400 and 248,832). Without `scratch`, the tiles alone (the layout conversions' scratch
    shares their space where the epilogue stores no full tile: level 2's 25, reduced over its channels, asked
    512 bytes past its tiles at 2 stages)."""
    (bk, bn), bm, stages = stream_blocks(node), p.get("BLOCK_M", 64), max(1, p.get("num_stages", 4))
    if pointwise(node):
        return (stages * bm * bk + 2 * bk * bn + bm * bn) * 4
    steps = math.ceil(gemm_dims(node)[3] / bk)
    return steps * (max(1, stages - 1) * bm * bk + 2 * bk * bn) * 4 + 2304 * p.get("num_warps", 4) * scratch


def _window_steps(g, p: dict, wp: str, k: int, n: int, bk: int) -> tuple[list[str], list[str]]:
    """A streamed convolution's lines with a window (_render_stream): before its loop, each dot step s's columns
    kk{s} as (tap, input channel) pairs, their offsets koff{s} in the padded input from a position's own (past
    K: past the image, so masked) and their weights tb{s}, split into TF32 parts once; in the loop, each step's
    input tile at the tile's positions q plus those offsets, and its product."""
    x, w = g.args
    cin, sizes = x.shape[1], padded_sizes(g)
    inner, window = math.prod(sizes), w.shape[2:]
    w_in, w_out = (w.strides[0], w.strides[1]) if g.attrs["transposed"] else (w.strides[1], w.strides[0])
    _, taps = window_taps(g)
    start = sum(first * st for (first, _), st in zip(taps, contiguous_strides(sizes)))
    koff, woff = [f"ch{{s}} * {inner}"] + ([str(start)] if start else []), []  # each with {s} for the step
    for j, (size, (_, step), st, inner_taps) in enumerate(zip(window, taps, contiguous_strides(sizes),
                                                              contiguous_strides(window))):
        tap = "tap{s}" if inner_taps == 1 else f"tap{{s}} // {inner_taps}"
        tap = f"({tap} % {size})" if j else f"({tap})"  # this dim's tap
        koff.append(f"{tap} * {step * st}")
        woff.append(f"{tap}[:, None] * {w.strides[2 + j]}")
    koff, woff = " + ".join(koff), " + ".join(woff)
    before, body = [], []
    for s in range(math.ceil(k / bk)):
        before += [f"kk{s} = rk + {s * bk}", f"ch{s} = kk{s} % {cin}", f"tap{s} = kk{s} // {cin}",
                   f"koff{s} = tl.where(kk{s} < {k}, {koff.format(s=s)}, {cin * inner})",
                   f"tb{s} = tl.load({wp} + {w.offset} + rn1[None, :] * {w_out} + ch{s}[:, None] * {w_in} + "
                   f"{woff.format(s=s)}, mask=(kk{s}[:, None] < {k}) & (rn1[None, :] < {n}), other=0.0)"]
        before += weight_parts(p, f"tb{s}")
        body += [f"ix = q[:, None] + koff{s}[None, :]",
                 f"ta = tl.load(x_img + ix, mask=ix < {cin * inner}, other=0.0)"] + _product(p, "acc", "ta", f"tb{s}")
    return before, body


PAD_BLOCK = 1024  # the elements a program of the padding copy takes


def _padded_copy(name: str, g) -> KernelCode:
    """A kernel that copies convolution g's input into buffer `{name}_xpad`, its spatial dims padded with zeros
    (window_taps): its source, its launch and the buffer."""
    x, pads, padded = g.args[0], window_taps(g)[0], padded_sizes(g)
    sizes = tuple(x.shape[2:])
    total = math.prod(x.shape[:2]) * math.prod(padded)  # under 2^31 (streams)
    lines = _split_index("i", (math.prod(x.shape[:2]),) + padded, "u")
    src, ok = [f"u0 * {math.prod(sizes)}"], [f"(i < {total})"]
    for j, ((lo, hi), size, st) in enumerate(zip(pads, sizes, contiguous_strides(sizes)), 1):
        at = f"(u{j} - {lo})" if lo else f"u{j}"
        src.append(f"{at} * {st}" if st > 1 else at)
        ok += ([f"(u{j} >= {lo})"] if lo else []) + ([f"(u{j} < {lo + size})"] if hi else [])
    source = "\n".join(["@triton.jit", f"def {name}_pad(p0, p1, BLOCK: tl.constexpr):",
                        "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"] +
                       ["    " + line for line in lines] +
                       [f"    v = tl.load(p0 + {' + '.join(src)}, mask={' & '.join(ok)}, other=0.0)",
                        f"    tl.store(p1 + i, v, mask=i < {total})"])
    launch = Launch(f"{name}_pad", (math.ceil(total / PAD_BLOCK),), [x.base, f"{name}_xpad"], {"BLOCK": PAD_BLOCK},
                    4, 1)
    return KernelCode(source, [launch], {f"{name}_xpad": (tuple(x.shape[:2]) + padded, torch.float32)})


def _render_stream(kernel: Kernel, name: str, p: dict) -> KernelCode:
    """Streamed tiles of a convolution (streams): a program per SM (PROGRAMS; per_sm of them with a window)
    loads the weight once, split into its TF32 parts once, then walks tiles of BLOCK_M positions of one image,
    pipelined over num_stages by tl.range: every PROGRAMS-th tile, or with the next norm's statistics or a
    pool's sums in its epilogue (stats_epilogue) a run of consecutive tiles (stream_runs).
    A 1x1 convolution's tile is loaded by a TMA descriptor over the input as [batch, channels, positions] (its
    channels past C_in read as zeros), and outputs of the conv's shape are stored by a descriptor too (positions
    past the image's and channels past C_out clipped), any other store by pointers. A memory-bound 1x1
    convolution then moves its bytes near a copy's rate: on an H200 (session 44, by hand), level 1's
    87_conv_pointwise_2D (64 -> 128 channels over 16 x 1024 x 1024) ran 5.34 -> 3.58 ms (a copy of its output
    4.00), one tile a program against this; pointers for the stores 3.85, for the loads too 3.89; at 3 stages
    4.19, 32 rows 5.64, 8 warps 5.90.
    With a window, the tiles walk an image's positions as the input lays them out, from the first output row's
    (walked_positions): a tap then reads its input at one offset from every position of the tile, the K steps
    take (tap, channel) columns (_window_steps), each loaded by pointers at those offsets with no bound checks
    but the image's end, and the outputs past a row's last (its window hanging off the input) are not stored.
    On an H200 (session 45, by hand, 3x3 windows over 8 input channels, ms): level 2's 57_Conv2d_ReLU_HardSwish
    (64 channels over 128 x 126 x 126) 0.616 in rows tiles of outer products (FMA) -> 0.352 at 64 positions, 4
    warps, 3 stages, 2 programs an SM (0.334 at 3 an SM and 2 stages, 0.375-0.405 at 128 positions or 2 stages);
    64 channels over 128 x 254 x 254 1.372 (cuDNN 4.22), 32 channels 0.924 (cuDNN 2.52).
    A padded window, or a transposed one, walks a copy of its input padded with zeros (window_taps), which a
    kernel of its own makes first (_padded_copy)."""
    g = kernel.nodes[0]
    x = g.args[0]
    pads = [] if pointwise(g) else window_taps(g)[0]
    if not any(lo or hi for lo, hi in pads):
        return _stream_kernel(kernel, name, p, x.base)
    pad, code = _padded_copy(name, g), _stream_kernel(kernel, name, p, f"{name}_xpad")
    return dataclasses.replace(code, source=pad.source + "\n\n\n" + code.source, launches=pad.launches + code.launches,
                               temps={**pad.temps, **code.temps})


def channel_reductions(gen: Gen, axis: int) -> None:
    """A convolution kernel's reductions over its output channels (schedule.channel_reduction), each over a
    tile's `axis`, ahead of its stores."""
    gen.axis = axis
    for r in [m for m in gen.k.nodes if m.op == "reduce"]:
        gen.reduce_now(r)


def _stream_kernel(kernel: Kernel, name: str, p: dict, xbase: str) -> KernelCode:
    """The streamed kernel of _render_stream, its input at `xbase` (the input, or its padded copy)."""
    gen = Gen(kernel, name, p)
    g = kernel.nodes[0]
    x, w = g.args
    _, _, n, k = gemm_dims(g)
    batch, positions = kernel.domain[0], math.prod(kernel.domain[2:])
    (bk, bn), bm = stream_blocks(g), p.get("BLOCK_M", 64)
    window, walk = not pointwise(g), walked_positions(g)
    per, big = math.ceil(walk / bm), ".to(tl.int64)" if gen.big else ""
    xd = gen.ptr(xbase)
    lines = ["rk = tl.arange(0, BLOCK_K)", f"rn1 = tl.arange(0, BLOCK_N){big}", "rn = rn1[None, :]"]
    if window:
        before, steps = _window_steps(g, p, gen.ptr(w.base), k, n, bk)
        lines += before
    else:
        sw = w.strides
        lines += [f"tb = tl.load({gen.ptr(w.base)} + {w.offset} + rn1[None, :] * {sw[0]} + rk[:, None] * {sw[1]}, "
                  f"mask=(rk[:, None] < {k}) & (rn1[None, :] < {n}), other=0.0)"]
        lines += weight_parts(p, "tb")
    stats, stages = p.get("stats"), p.get("num_stages", 4)
    if stats:  # runs of consecutive tiles, an image's part of each in a loop of its own (stream_runs)
        _, run, slots = stream_runs(g, p)
        programs = math.ceil(batch * per / run)
        lines += stats.stream_start() + [
            f"t_lo = tl.program_id(0) * {run}", f"t_hi = tl.minimum(t_lo + {run}, {batch * per})",
            f"for bi in tl.range(0, (t_hi - 1) // {per} - t_lo // {per} + 1):", f"    b = t_lo // {per} + bi"]
        lines += ["    " + line for line in stats.run_start()] + [f"    t_end = tl.minimum(t_hi, b * {per} + {per})",
                  f"    for t in tl.range(tl.maximum(t_lo, b * {per}), t_end, num_stages={stages}):"]
    else:
        programs = min(batch * per, SMS * p.get("per_sm", 1))
        lines += [f"for t in tl.range(tl.program_id(0), {batch * per}, PROGRAMS, num_stages={stages}):"]
    start = len(lines)
    lines += ([] if stats else [f"b = t // {per}"]) + [f"hw0 = (t % {per}) * BLOCK_M"]
    if window:
        sizes = padded_sizes(g)
        lines += [f"x_img = {xd} + b.to(tl.int64) * {x.shape[1] * math.prod(sizes)}",
                  "q = hw0 + tl.arange(0, BLOCK_M)", "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"] + steps
        lines += _split_index("q", (g.shape[2],) + sizes[1:], "v")
        real = "v0"
        for i, size in enumerate(g.shape[3:], 1):
            real = f"({real}) * {size} + v{i}"
        valid = " & ".join([f"(q < {walk})"] + [f"(v{i} < {size})" for i, size in enumerate(g.shape[3:], 1)])
        lines += [f"rm = ({real}{big} + b * {positions})[:, None]", f"rmask = ({valid})[:, None]",
                  f"mask = rmask & (rn < {n})"]
    else:
        lines += [f"ta = tl.trans(tl.reshape({xd}.load([b, 0, hw0]), (BLOCK_K, BLOCK_M)))",
                  "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]
        lines += _product(p, "acc", "ta", "tb")
        lines += [f"hw = hw0 + tl.arange(0, BLOCK_M){big}", f"rm = (hw + b * {positions})[:, None]",
                  f"rmask = hw[:, None] < {positions}", f"mask = rmask & (rn < {n})"]
    rank = len(kernel.domain)
    gen.groups = [([0] + list(range(2, rank)), "rm"), ([1], "rn")]
    # a per-channel value (a bias) loads as [1, BLOCK_N] by a mask of the tile's channels alone, the same in
    # every tile: loaded with the positions' mask, the loop pipelined its [BLOCK_M, BLOCK_N] tile over the
    # stages (96 KB more shared memory at 64 x 128 and 4 stages, over a block's)
    gen.channel_mask = f"rn < {n}"
    first = len(gen.top.lines) + start  # the loop's body: every line after its header
    gen.top.lines += lines
    gen.top.cache[g] = "acc"
    gen.kinds[g] = "f"
    pooled = stats.buffer if stats and not stats.kept else None  # summed over its positions, never written
    stores = [(m, b) for m, b in kernel.stores.items() if b != pooled]
    whole = [] if window else [(m, b) for m, b in stores if isinstance(b, str) and
                               gen.k.level[m] == "full" and m not in gen.k.store_when and m.dtype == torch.float32]
    for m, buf in whole:  # the tile transposed to [1, channels, positions]
        value = f"tl.broadcast_to({gen.value(m)}, (BLOCK_M, BLOCK_N))"
        gen.body.lines.append(f"{gen.ptr(buf)}.store([b, 0, hw0], tl.reshape(tl.trans({value}), "
                              f"(1, BLOCK_N, BLOCK_M)))")
    channel_reductions(gen, 1)  # each tile holds every channel
    store_lines(gen, [(m, b) for m, b in stores if (m, b) not in whole])
    body = "        " if stats else "    "
    if stats:  # the next row kernel's partial statistics (stats_epilogue), one a channel and run in an image
        stored = next(m for m, b in kernel.stores.items() if b == stats.buffer)
        gen.top.lines += stats.stream_lines(gen.value(stored))
    gen.top.lines[first:] = [body + line for line in gen.top.lines[first:]]
    if stats:
        flush = stats.stream_flush([gen.ptr(b) for b in stats.parts], per, run, slots)
        gen.top.lines += ["    " + line for line in flush]
    src = kernel_header(name, gen, ["BLOCK_M", "BLOCK_N", "BLOCK_K", "PROGRAMS"]) + \
        ["    " + line for line in gen.top.lines]
    described = {} if window else {x.base: [batch, x.shape[1], positions]} | {b: [batch, n, positions]
                                                                               for _, b in whole}
    host, fields = [], {}
    for i, (base, shape) in enumerate(described.items()):
        fields[base] = f"t{i}"
        # TMA reads from a 16-byte aligned start: an input view that starts elsewhere is copied (a storage, and so
        # a buffer, starts aligned)
        tensor = f"{{t{i}}} if {{t{i}}}.storage_offset() % 4 == 0 else {{t{i}}}.clone()" if base == x.base else \
            f"{{t{i}}}"
        host.append(f"{descriptor_name(base)} = TensorDescriptor({tensor}, {shape}, "
                    f"{list(contiguous_strides(shape))}, [1, {bk if base == x.base else bn}, {bm}])")
    launch = Launch(name, (programs,), [descriptor_name(b) if b in described else b for b in gen.ptrs],
                    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "PROGRAMS": programs}, p.get("num_warps", 4),
                    p.get("num_stages", 4), p.get("maxnreg", 0))
    temps = {stats.part: (stats.shape, torch.float32)} if pooled else {}
    return KernelCode("\n".join(src), [launch], temps, host=host, host_args=fields,
                      imports=[DESCRIPTOR_IMPORT] if described else [])


def phased(node) -> bool:
    """Whether a convolution is a strided transposed one, taken in phases (_phases)."""
    return node.fn == "conv" and bool(_k_steps(node)[0])


def _bases(x, w, transposed: bool, xp: str, wp: str, cin_g: int, n: int, rn: str) -> tuple[list[str], int]:
    """Lines naming a program's input row (x_row: batch q0, group pid_g) and weight columns (w_col: the group's
    output channels `rn`), and the weight's stride from one input channel to the next."""
    sx, sw = x.strides, w.strides
    row = f"x_row = {xp} + {x.offset} + q0 * {sx[0]} + pid_g * {cin_g * sx[1]}"
    if transposed:  # weight (C_in, C_out / groups, *window)
        return [row, f"w_col = {wp} + {w.offset} + pid_g * {cin_g * sw[0]} + {rn} * {sw[1]}"], sw[0]
    return [row, f"w_col = {wp} + {w.offset} + (pid_g * {n} + {rn}) * {sw[0]}"], sw[1]  # (C_out, C_in / groups, ...)


def packed_weight(w: Leaf, p: dict, transposed: bool) -> tuple[Leaf, list[tuple[str, str, str]]]:
    """The weight a convolution's kernel reads, and the forward's lines making it (KernelCode.prep). With
    `packed`, a copy made each call with the window outermost and the output channels innermost ((*window, C_in,
    C_out / groups) of a transposed convolution's weight, (*window, C_in / groups, C_out) of another's): a step's
    weights for BLOCK_N output channels are then contiguous and load as vectors, where the weight's own layout
    puts them a whole window apart. The Leaf returned indexes the copy in the weight's own order. On an H200
    (session 21, ms): level 1's 81_conv_transposed_2D 0.424 -> 0.388, level 2's
    60_ConvTranspose3d_Swish_GroupNorm_HardSwish 1.141 -> 1.080 (its convolution 0.658 -> 0.596); params.packed_default
    says where it is the default."""
    if not p.get("packed"):
        return w, []
    return _copy_in_order(w, tuple(range(2, len(w.shape))) + ((0, 1) if transposed else (1, 0)), "packed_")


def channels_last(x: Leaf, p: dict, name: str) -> tuple[Leaf, KernelCode | None]:
    """The input a convolution's rows tiles read, and the kernel making it, launched first. With `xlast`, a
    copy made each call with the channels innermost: a K step's input channels at one position are then
    contiguous, as a TF32 product's operand is in shared memory (K-major), where the input's own layout has
    its positions contiguous and a tile goes into shared memory transposed, each warp's stores 4-way
    bank-conflicted (Nsight Compute on an H200, session 55: level 2's 26, 57 M conflicts in 202 M shared-memory
    wavefronts, L1 80% busy). On an H200 (session 55, the search at budget 24, each run's best candidate
    without the copy -> with it, ms): level 2's 78 5.92 -> 3.80, 26 1.61 -> 1.32, 3 2.24 -> 1.78, 38 2.36 ->
    1.91, 49 0.90 -> 0.68, 20 0.72 -> 0.65. Interleaved tiles (level 2's 34, Triton 3.6's sm_90 compile) store
    their tiles into shared memory alike either way, and take more index arithmetic from the copy.

    The copy is a Triton kernel (last_copy), not torch's permute().contiguous(): on the H200 (session 56) it
    moved the inputs of those tasks at 2.7-4.1 TB/s, torch's at 1.5-1.9 (level 2's 26 0.0757 -> 0.0366 ms,
    100 0.294 -> 0.113)."""
    if not p.get("xlast"):
        return x, None
    copy = _reordered(x, (0,) + tuple(range(2, len(x.shape))) + (1,), "last_")
    return copy, last_copy(x, copy.base, name + "_last")


LAST_COPY_S, LAST_COPY_WARPS = 128, 2  # positions a program of last_copy takes, and its warps: within 2% of the
# best of 2-8 warps and 32-256 positions on every input of session 56's bench (level 2's 15 to 100)


def last_copy(x: Leaf, out: str, name: str) -> KernelCode:
    """A kernel writing tensor leaf x (N, C, *spatial), its spatial dims contiguous, to a new buffer `out` of
    shape (N, *spatial, C): a program loads [C, LAST_COPY_S] along positions and stores it channels innermost,
    Triton turning the tile round in shared memory."""
    n, c, s = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    bc = next_pow2(c)
    src = ["@triton.jit", f"def {name}(x, y, BLOCK_S: tl.constexpr):",
           "    q = tl.program_id(1).to(tl.int64)",
           "    s = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)",
           f"    c = tl.arange(0, {bc})",
           f"    mask = (c[:, None] < {c}) & (s[None, :] < {s})",
           f"    v = tl.load(x + {x.offset} + q * {x.strides[0]} + c[:, None] * {x.strides[1]} + s[None, :], "
           "mask=mask)",
           f"    tl.store(y + q * {s * c} + s[None, :] * {c} + c[:, None], v, mask=mask)"]
    launch = Launch(name, (-(-s // LAST_COPY_S), n), [x.base, out], {"BLOCK_S": LAST_COPY_S}, LAST_COPY_WARPS, 1)
    return KernelCode("\n".join(src), [launch], temps={out: ((n, *x.shape[2:], c), x.dtype)})


def _copy_in_order(leaf: Leaf, order: tuple, prefix: str) -> tuple[Leaf, list[tuple[str, str, str]]]:
    """A contiguous copy of a tensor leaf with its dims laid out in `order` (outermost first), and the Leaf
    indexing it in the leaf's own order."""
    copy = _reordered(leaf, order, prefix)
    make = f".as_strided({tuple(leaf.shape)}, {tuple(leaf.strides)}, {leaf.offset}).permute{order}.contiguous()"
    return copy, [(copy.base, leaf.base, make)]


def _reordered(leaf: Leaf, order: tuple, prefix: str) -> Leaf:
    """The Leaf indexing, in the leaf's own order, a contiguous copy of it named after its base with `prefix`,
    its dims laid out in `order` (outermost first)."""
    strides = [0] * len(leaf.shape)
    for d, stride in zip(order, contiguous_strides([leaf.shape[d] for d in order])):
        strides[d] = stride
    return dataclasses.replace(leaf, base=prefix + re.sub(r"\W+", "_", leaf.base).strip("_"), strides=tuple(strides),
                               offset=0)


def _last_taps(attrs: dict, k: int) -> list[list[tuple[int, int]]]:
    """Per slot of a rows tile's last dim, each tap's (tap, c): the input column q * a + c feeds output s * q +
    slot of a strided transposed convolution (a = 1), output q of any other (a = its stride, one slot)."""
    i = len(attrs["stride"]) - 1
    s, pad, d = attrs["stride"][i], attrs["padding"][i], attrs["dilation"][i]
    if not attrs["transposed"]:  # input = output * stride - pad + tap * dilation
        return [[(t, t * d - pad) for t in range(k)]]
    if s == 1:  # input = output + pad - tap * dilation
        return [[(t, pad - t * d) for t in range(k)]]
    dim = {"s": s, "pad": pad, "d": d, "k": k, "step": s // math.gcd(d, s)}
    return [[(t, (f + pad - t * d) // s) for t in range(_slot_taps(dim, f)[1], k, dim["step"])] for f in range(s)]


def _row_taps(attrs: dict, window: tuple, in_sizes: tuple) -> tuple[list[str], list[str], list[str]]:
    """A rows tile's scalar lines for every spatial dim but the last (the row's output coordinates o{i} are
    named already): before the K loop (each dim's first tap t0{i}, count n{i} and step), in it (the tap kw{i}
    of step m and the input coordinate i{i}), and the conditions that the input coordinates hold."""
    head, body, conds, counts = [], [], [], []
    dims = len(in_sizes) - 1
    for i in range(dims):
        s, pad, d, k = attrs["stride"][i], attrs["padding"][i], attrs["dilation"][i], window[i]
        if attrs["transposed"] and s > 1:  # the taps t with t * d = o + pad (mod s), step apart
            step = s // math.gcd(d, s)
            first = k
            for t in reversed(range(min(step, k))):
                first = f"tl.where(r{i} == {t * d % s}, {t}, {first})"
            head += [f"r{i} = (o{i} + {pad}) % {s}", f"t0{i} = {first}", f"n{i} = ({k + step - 1} - t0{i}) // {step}"]
            counts.append((f"n{i}", f"t0{i} + ", f" * {step}"))
        else:
            counts.append((str(k), "", ""))
    for i, (n, start, step) in enumerate(counts):
        inner = " * ".join(c[0] for c in counts[i + 1:])
        index = f"(m // ({inner}))" if inner else "m"
        body.append(f"kw{i} = {start}({index} % {n}){step}")
        s, pad, d = attrs["stride"][i], attrs["padding"][i], attrs["dilation"][i]
        tap = f"kw{i}" if d == 1 else f"kw{i} * {d}"
        if not attrs["transposed"]:
            body.append(f"i{i} = o{i}" + (f" * {s}" if s > 1 else "") + f" + {tap}" + (f" - {pad}" if pad else ""))
            if pad:
                conds += [f"(i{i} >= 0)", f"(i{i} < {in_sizes[i]})"]
        elif s == 1:
            body.append(f"i{i} = o{i} + {pad} - {tap}" if pad else f"i{i} = o{i} - {tap}")
            conds += [f"(i{i} >= 0)", f"(i{i} < {in_sizes[i]})"]
        else:  # o + pad - tap * d is a multiple of s: exact, and checked before dividing
            body += [f"j{i} = o{i} + {pad} - {tap}", f"i{i} = j{i} // {s}"]
            conds += [f"(j{i} >= 0)", f"(i{i} < {in_sizes[i]})"]
    taps = " * ".join(c[0] for c in counts) or "1"
    return head + [f"taps = {taps}"], body, conds


def hand_split(p: dict) -> bool:
    """Whether a convolution's tf32x3 dot steps split their tiles into TF32 parts by the kernel's own lines (parts
    "hand": codegen.tf32_parts, each tile once for every product that reads it; gemm.default's choice) instead of
    Triton's tf32x3 (parts "registers"), which splits both tiles again inside every tl.dot. On an H200 (session
    38, ms, each convolution's default tiles, the errors against float64 unchanged): level 1's 50_conv_standard_2D
    1.971 -> 1.786, 54_conv_standard_3D 2.290 -> 2.046, 56_conv_standard_2D 12.92 -> 11.62, 58_conv_transposed_3D
    4.228 -> 3.707, 73_conv_transposed_3D 1.944 -> 1.788, 75_conv_transposed_2D (interleaved) 0.486 -> 0.462;
    81_conv_transposed_2D's rows tiles 0.327 -> 0.328; level 2's 5, 15, 20, 26, 74, 78 and 100 2-8% faster, but
    2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide 4.30 -> 4.95 (not understood), so gemm.variants offers
    Triton's split right after."""
    return p.get("precision") == "tf32x3" and p.get("parts") == "hand"


def weight_parts(p: dict, b: str) -> list[str]:
    """Lines splitting a weight tile `b` into TF32 parts where the tiles are split by hand (hand_split): once
    before a streamed kernel's loop, or at each K step."""
    return tf32_parts(b) if hand_split(p) else []


def _product(p: dict, acc: str, a: str, b: str) -> list[str]:
    """Lines adding tl.dot(a, b) to acc: from the tiles' TF32 parts under hand_split, else in one tl.dot."""
    if hand_split(p):
        return tf32_parts(a) + split_dot(acc, a, b)  # b's parts are split where it is loaded: it feeds several
    return [f'{acc} += tl.dot({a}, {b}, input_precision="{p.get("precision", "ieee")}")']


def row_offsets(node) -> set[int]:
    """The input column offsets a rows tile's taps along the row read (_last_taps), over all its slots."""
    return {c for taps in _last_taps(node.attrs, node.args[1].shape[-1]) for _, c in taps}


def stacks(node) -> bool:
    """Whether a rows tile's dot steps take K as (column offset, input channel) pairs (_render_rows): where a
    group has fewer input channels than a dot step's 16, the row's taps read more than one column offset, and
    a product a slot over all of them is narrower in all than a product a tap over one offset's channels. One
    load a step then feeds every slot, each slot's weights zero at the offsets it does not read. On an H200
    (session 38, by hand, 256 outputs a slot at 4 warps): level 1's 75_conv_transposed_2D (8 channels a group,
    2 offsets, 5 taps a row in 3 slots) 0.404 ms stacked, where the template's unstacked steps at the same
    tile (5 products a row step, each half zeros) ran 0.710 and its interleaved tiles 0.486."""
    cin_g = node.args[0].shape[1] // node.attrs["groups"] if node.fn == "conv" else 16
    if cin_g >= 16:
        return False
    slots, offsets = _last_taps(node.attrs, node.args[1].shape[-1]), row_offsets(node)
    return len(offsets) > 1 and len(slots) * max(16, next_pow2(cin_g * len(offsets))) < sum(map(len, slots)) * 16


def rows_layout(node, p: dict) -> tuple[list, int, int, int]:
    """A rows tile's slots (_last_taps), BLOCK_M, BLOCK_N, and the tiles a row of the output's last dim takes."""
    slots = _last_taps(node.attrs, node.args[1].shape[-1])
    s2 = next_pow2(len(slots))
    least = s2 * (16 if rows_k(node, p) > 1 else 1)  # a dot step takes at least 16 outputs a slot
    bm = max(least, min(p.get("BLOCK_M", 64), next_pow2(node.shape[-1])))
    num_w = math.ceil(node.shape[-1] / (bm // s2 * len(slots)))  # a tile's outputs: BLOCK_M / s2 of each slot
    return slots, bm, gemm_block(p, "BLOCK_N", gemm_dims(node)[2]), num_w


def rows_smem(node, p: dict) -> int:
    """Shared memory bytes a rows tile's program needs at most (_render_rows), as stream_smem counts a streamed
    one's: the tiles its dot step loads, an input tile per column offset the taps read (one for all of them
    where the step stacks them) and a weight tile per tap, once a stage, and one fp32 weight tile more. 0 for
    outer-product steps, which load no tile. Compiled for sm_90 at 32 channels a step and 64 channels a tile,
    level 2's 78 (53,248 bytes a stage) took 77,824 bytes at 2 stages and 184,320 at 4, and level 2's 16
    (57,344) 237,568 at 4, 8,192 over four stages' tiles."""
    bk = rows_k(node, p)
    if bk == 1:
        return 0
    slots, bm, bn, _ = rows_layout(node, p)
    columns = p.get("SAMPLES", 1) * bm // next_pow2(len(slots))
    if stacks(node):
        kk = max(16, next_pow2(node.args[0].shape[1] // node.attrs["groups"] * len(row_offsets(node))))
        tiles = kk * columns + sum(1 for slot in slots if slot) * bn * kk
    else:
        taps = [t for slot in slots for t in slot]
        tiles = len({c for _, c in taps}) * bk * columns + len(taps) * bn * bk
    return max(1, p.get("num_stages", 1)) * tiles * node.args[0].dtype.itemsize + bn * bk * 4


def _render_rows(kernel: Kernel, name: str, p: dict) -> KernelCode:
    """Rows tiles: a program takes BLOCK_N output channels by BLOCK_M outputs along one row of the output's
    last dim, every other coordinate (batch, the other spatial dims) one scalar, so its stores walk the row and
    its input loads walk input rows. A strided transposed convolution's last dim takes its phases as slots,
    each an accumulator whose taps are constants, stacked so that the tile holds whole rows. The other dims'
    taps are a loop of scalar steps (a strided transposed one's phase is the row's own); each step unrolls
    the input channels and the last dim's taps as outer products. With SAMPLES, a program takes that row of
    as many consecutive batch elements, whose coordinates, taps and weights are the same: each weight it loads
    serves as many more outputs (a thread holds all BLOCK_N channels of its outputs, and loads every weight
    itself)."""
    gen = Gen(kernel, name, p)
    g = kernel.nodes[0]
    x, w = g.args
    w, prep = packed_weight(w, p, g.attrs["transposed"])
    x, copy = channels_last(x, p, name)
    attrs = g.attrs
    groups, _, n, _ = gemm_dims(g)
    cin_g, window = x.shape[1] // attrs["groups"], tuple(w.shape[2:])
    spatial, in_sizes = kernel.domain[2:], tuple(x.shape[2:])
    out_w, in_w = spatial[-1], in_sizes[-1]
    slots, bm, bn, num_w = rows_layout(g, p)
    s, s2 = len(slots), next_pow2(len(slots))
    bq = bm // s2
    a = 1 if attrs["transposed"] else attrs["stride"][-1]  # the input column's step per output
    sx, sw = x.strides, w.strides
    big = ".to(tl.int64)" if gen.big else ""
    xp, wp = gen.ptr(x.base), gen.ptr(w.base)
    samples, positions = p.get("SAMPLES", 1), math.prod(spatial[:-1])
    rows = kernel.domain[0] // samples * positions
    num_n = math.ceil(n / bn)
    lines = [f"pid = tl.program_id(0){big}", f"pid_g = tl.program_id(1){big}", f"wt = pid % {num_w}",
             f"pid_n = (pid // {num_w}) % {num_n}", f"row = pid // {num_w * num_n}"]
    lines += _split_index("row", (kernel.domain[0] // samples,) + tuple(spatial[:-1]), "q")
    lines += [f"q0 = q0 * {samples}"] if samples > 1 else []  # the first of the program's batch elements
    lines += [f"o{i} = q{i + 1}" for i in range(len(spatial) - 1)]
    head, body, conds = _row_taps(attrs, window, in_sizes)
    bases, ci_stride = _bases(x, w, attrs["transposed"], xp, wp, cin_g, n, "rn1[:, None]")
    lines += head + [f"rn1 = pid_n * BLOCK_N + tl.arange(0, BLOCK_N){big}"]
    if samples > 1:  # columns sample by sample: smp the batch element, q the column in its row
        lines += [f"pj = tl.arange(0, {samples * bq}){big}[None, :]", f"smp = pj // {bq}",
                  f"q = wt * {bq} + pj % {bq}"]
    else:
        lines.append(f"q = (wt * {bq} + tl.arange(0, {bq}){big})[None, :]")
    lines += bases
    sample = f" + smp * {sx[0]}" if samples > 1 else ""  # a column's batch element
    accs = [f"acc{f}" for f in range(s)]
    lines += [f"{acc} = tl.zeros((BLOCK_N, {samples * bq}), dtype=tl.float32)" for acc in accs]
    x_off = " + ".join([f"i{i} * {sx[2 + i]}" for i in range(len(spatial) - 1)] or ["0"])
    w_off = " + ".join([f"kw{i} * {sw[2 + i]}" for i in range(len(window) - 1)] or ["0"])
    step = ["m = k0"] + body
    # a scalar condition goes into the loads' masks as a bound on the column: Triton's interpreter takes no
    # scalar-and-tile masks
    step += [f"lim = tl.where({' & '.join(conds)}, {in_w}, 0)" if conds else f"lim = {in_w}",
             f"x_tap = x_row + {x_off}", f"w_tap = w_col + {w_off}"]
    most = (num_w * bq - 1) * a  # the largest q * a any lane takes

    def columns(c: int) -> tuple[str, list[str]]:  # a tap's input columns and what bounds them
        col = "q" if a == 1 else f"q * {a}"
        col = f"{col} + {c}" if c > 0 else f"{col} - {-c}" if c < 0 else col
        return col, [f"({col} < lim)"] * bool(conds or most + c >= in_w) + [f"({col} >= 0)"] * (c < 0)

    bk = rows_k(g, p)
    if bk == 1:  # outer products, the channels unrolled
        for ci in range(cin_g):
            for f, taps in enumerate(slots):
                for t, c in taps:
                    col, mask = columns(c)
                    mask = f", mask={' & '.join(mask)}, other=0.0" if mask else ""
                    xv = f"tl.load(x_tap + {ci * sx[1]} + ({col}) * {sx[-1]}{sample}{mask})"
                    wv = f"tl.load(w_tap + {ci * ci_stride + t * sw[-1]}, mask=rn1[:, None] < {n}, other=0.0)"
                    step.append(f"{accs[f]} += {xv}.to(tl.float32) * {wv}.to(tl.float32)")
    elif stacks(g):  # dot steps over (column offset, channel): a row's offsets fill the K a group's channels leave
        offsets = sorted(row_offsets(g))
        kk = max(16, next_pow2(cin_g * len(offsets)))
        off = str(offsets[-1])
        for i in reversed(range(len(offsets) - 1)):
            off = f"tl.where(oi == {i}, {offsets[i]}, {off})"
        lines += [f"rc = tl.arange(0, {kk})", f"ci = rc % {cin_g}", f"oi = rc // {cin_g}", f"off = {off}"]
        for f, taps in enumerate(slots):  # each slot's tap per offset, -1 where it reads none
            if not taps:
                continue  # no tap reaches the slot: its accumulator stays zero
            tap = "-1"
            for t, c in taps:
                tap = f"tl.where(oi == {offsets.index(c)}, {t}, {tap})"
            lines.append(f"tp{f} = {tap}")
        col = ("q" if a == 1 else f"q * {a}") + " + off[:, None]"
        mask = [f"({col} < lim)"] * bool(conds or most + offsets[-1] >= in_w) + [f"({col} >= 0)"] * (offsets[0] < 0)
        mask += [f"(rc[:, None] < {cin_g * len(offsets)})"] * (kk > cin_g * len(offsets))
        xm = f", mask={' & '.join(mask)}, other=0.0" if mask else ""
        cast = dot_cast(x, w, p.get("operands", "input"))
        step.append(f"xs = tl.load(x_tap + ci[:, None] * {sx[1]} + ({col}) * {sx[-1]}{sample}{xm}){cast}")
        step += tf32_parts("xs") if hand_split(p) else []
        for f in (f for f, taps in enumerate(slots) if taps):
            step.append(f"wv = tl.load(w_tap + ci[None, :] * {ci_stride} + tp{f}[None, :] * {sw[-1]}, "
                        f"mask=(rn1[:, None] < {n}) & (tp{f}[None, :] >= 0), other=0.0){cast}")
            step += _product(p, accs[f], "wv", "xs")
    else:  # dot steps: [BLOCK_N, bk] weights by [bk, columns] inputs, bk input channels a step
        cast = dot_cast(x, w, p.get("operands", "input"))
        chunks = [f"rc = {f'c0 + ' if cin_g > bk else ''}tl.arange(0, {bk})"]
        ragged = [f"(rc[:, None] < {cin_g})"] if cin_g % bk else []
        wm = f"(rn1[:, None] < {n})" + (f" & (rc[None, :] < {cin_g})" if ragged else "")
        loaded: dict[int, str] = {}  # an input tile per column offset, whichever slots' taps read it
        for f, taps in enumerate(slots):
            for t, c in taps:
                if c not in loaded:
                    loaded[c] = f"xv{len(loaded)}"
                    col, mask = columns(c)
                    xm = f", mask={' & '.join(mask + ragged)}, other=0.0" if mask + ragged else ""
                    chunks.append(f"{loaded[c]} = tl.load(x_tap + rc[:, None] * {sx[1]} + ({col}) * {sx[-1]}{sample}"
                                  f"{xm})" + cast)
                    chunks += tf32_parts(loaded[c]) if hand_split(p) else []
                chunks.append(f"wv = tl.load(w_tap + rc[None, :] * {ci_stride} + {t * sw[-1]}, mask={wm}, other=0.0)"
                              + cast)
                chunks += _product(p, accs[f], "wv", loaded[c])
        step += chunks if cin_g <= bk else [f"for c0 in range(0, {cin_g}, {bk}):"] + ["    " + x for x in chunks]
    lines += ["for k0 in range(0, taps):"] + ["    " + line for line in step]
    if s2 > 1:
        accs += ["zero"] * (s2 - s)
        if s2 > s:
            lines.append(f"zero = tl.zeros((BLOCK_N, {samples * bq}), dtype=tl.float32)")
        lines += _joined(accs, f"(BLOCK_N, {samples} * BLOCK_M)" if samples > 1 else "(BLOCK_N, BLOCK_M)")
    else:
        lines.append("acc = acc0")
    k = "tl.arange(0, BLOCK_M)[None, :]"
    if samples > 1:  # a sample's BLOCK_M outputs after another's
        lines += [f"e = tl.arange(0, {samples} * BLOCK_M)[None, :]", "smp = e // BLOCK_M"]
        k = "(e % BLOCK_M)"
    rm = f"(q0 + smp) * {positions} + row % {positions}" if samples > 1 else \
        f"row + tl.zeros((1, 1), dtype=tl.int32){big}"
    lines += [f"rw = wt * {bq * s} + {k}" if s2 == s else f"rw = (wt * {bq} + {k} // {s2}) * {s} + {k} % {s2}",
              f"rm = {rm}", f"rn = pid_g * {n} + rn1[:, None]",
              f"cols = (rw < {out_w})" + (f" & ({k} % {s2} < {s})" if s2 > s else ""),
              f"mask = (rn1[:, None] < {n}) & cols", "rmask = cols"]
    rank = len(kernel.domain)
    gen.groups = [([0] + list(range(2, rank - 1)), "rm"), ([1], "rn"), ([rank - 1], "rw")]
    gen.channel_mask = f"rn1[:, None] < {n}"
    gen.top.lines += lines
    gen.top.cache[g] = "acc"
    gen.kinds[g] = "f"
    # under recompute the statistics are all the first launch keeps of the output (stats_epilogue.recomputed)
    dropped = p.get("recompute") and p["stats"].buffer
    channel_reductions(gen, 0)  # the tile's rows are its channels
    store_lines(gen, [(m, b) for m, b in kernel.stores.items() if b != dropped])
    if p.get("stats"):  # the next row kernel's partial statistics (stats_epilogue), a batch element at a time
        stored = next(m for m, b in kernel.stores.items() if b == p["stats"].buffer)
        value, ptrs = gen.value(stored), [gen.ptr(b) for b in p["stats"].parts]
        if samples == 1:
            gen.top.lines += p["stats"].tile_lines(value, ptrs, positions, num_w, bn, num_n, s2 > 1)
        for j in range(samples if samples > 1 else 0):
            gen.top.lines += [f"mask_s = mask & (smp == {j})", f"cols_s = cols & (smp == {j})",
                              f"row_s = (q0 + {j}) * {positions} + row % {positions}"]
            gen.top.lines += p["stats"].tile_lines(value, ptrs, positions, num_w, bn, num_n, s2 > 1, row="row_s",
                                                   mask="mask_s", cols="cols_s", width=f"{samples} * BLOCK_M")
    src = kernel_header(name, gen, ["BLOCK_M", "BLOCK_N"]) + ["    " + line for line in gen.top.lines]
    grid = (rows * num_n * num_w, groups)
    launch = Launch(name, grid, list(gen.ptrs), {"BLOCK_M": bm, "BLOCK_N": bn}, p.get("num_warps", 1),
                    p.get("num_stages", 1), p.get("maxnreg", 0))
    if copy is None:
        return KernelCode("\n".join(src), [launch], prep=prep)
    return KernelCode(copy.source + "\n\n\n" + "\n".join(src), copy.launches + [launch], copy.temps, prep=prep)


def render_conv(kernel: Kernel, name: str, p: dict) -> KernelCode:
    if conv_tiles(kernel.nodes[0], p) == "rows":
        return _render_rows(kernel, name, p)
    if conv_tiles(kernel.nodes[0], p) == "stream":
        return _render_stream(kernel, name, p)
    gen = Gen(kernel, name, p)
    g = kernel.nodes[0]
    x, w = g.args
    w, prep = packed_weight(w, p, g.attrs["transposed"])
    attrs = g.attrs
    groups, M, N, K = gemm_dims(g)
    spatial, window = kernel.domain[2:], tuple(w.shape[2:])
    taps = math.prod(window)
    dims, cin_g, k_most = _k_steps(g)
    phased = bool(dims)
    rows = kernel.domain[0] * math.prod(d["rows"] for d in dims) if phased else M
    bm, bn = gemm_block(p, "BLOCK_M", rows), gemm_block(p, "BLOCK_N", N)
    bk = 1 if p.get("BLOCK_K") == 1 else gemm_block(p, "BLOCK_K", k_most)
    last = conv_tiles(g, p) == "positions"
    one_tap = bool(p.get("taps"))  # each K step BLOCK_K channels of one tap (params.tap_steps)
    row, col = _axes(last)
    sx, sw = x.strides, w.strides
    big = ".to(tl.int64)" if gen.big else ""
    xp, wp = gen.ptr(x.base), gen.ptr(w.base)
    # interleaved tiles: a program takes every phase of the last dim, so each output row is stored whole
    inter = phased and conv_tiles(g, p) == "interleaved"
    # 1 unless phased: then a tile's phases are consecutive programs
    phases = math.prod(d["s"] for d in (dims[:-1] if inter else dims))
    pid = "tl.program_id(0)" if phases == 1 else f"tl.program_id(0) // {phases}"
    lines = [f"ph = tl.program_id(0) % {phases}"] if phases > 1 else []
    lines += [f"pid = {pid}", f"num_m = tl.cdiv({rows}, BLOCK_M)", f"num_n = tl.cdiv({N}, BLOCK_N)",
              "width = GROUP_M * num_n", "first_m = (pid // width) * GROUP_M",
              "gsize = tl.minimum(num_m - first_m, GROUP_M)", "pid_m = first_m + (pid % width) % gsize",
              "pid_n = (pid % width) // gsize",
              f"rn1 = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){big}", f"rk = tl.arange(0, BLOCK_K){big}"]
    if phased:
        head, _, body, conds = _phase_lines(dims, kernel.domain[0], cin_g, big, last, 0 if inter else None)
        lines += head
        body.insert(0, "kk = k0 + rk")
        k_extent, row_ok = "ktaps", "row_ok"
    else:
        lines += [f"pid_g = tl.program_id(1){big}", f"rm1 = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){big}"]
        lines += _split_index("rm1", (kernel.domain[0],) + tuple(spatial), "q")  # q0: batch, q1..: output position
        lines += [f"o{i} = q{i + 1}" for i in range(len(spatial))]
        if one_tap:  # a K step takes BLOCK_K of one tap's channels: the tap t and its offsets are scalars
            body = [f"t = k0 // {cin_g}", "ci = rk" if cin_g == bk else f"ci = k0 % {cin_g} + rk"]
            kw = "t"
        elif last:  # channels fastest along K
            body = ["kk = k0 + rk", f"ci = kk % {cin_g}" if cin_g > 1 else "ci = kk * 0"]
            kw = f"(kk // {cin_g})" if cin_g > 1 else "kk"
        else:  # taps fastest along K
            body = ["kk = k0 + rk", f"ci = kk // {taps}" if taps > 1 else "ci = kk"]
            kw = f"(kk % {taps})"
        if taps > 1:
            body += _split_index(kw, window, "kw")
        else:
            body += [f"kw{i} = {'0' if one_tap else 'kk * 0'}" for i in range(len(window))]
        # dot steps (outer products are for phased ones: params.kernel_invalid), the input offsets in two parts
        head, tap_lines, conds = _split_taps(attrs, tuple(x.shape[2:]), sx, last, one_tap)
        lines += head
        body += tap_lines
        k_extent, row_ok = str(K), f"(rm1 < {M})"
        if one_tap:  # the tap's bounds, a vector over the positions
            body.append(f"ok = {' & '.join([row_ok] + conds)}")
    bases, ci_stride = _bases(x, w, attrs["transposed"], xp, wp, cin_g, N, "rn1")
    lines += bases
    if not phased:  # each position's input pointer, once
        lines.append("x_pos = x_row + xr")
    if bk == 1:  # outer products: a K step per tap, its input channels unrolled
        body = _outer_body(body, len(spatial), len(window), sx, sw, ci_stride, cin_g, N, f"{row_ok}{row}", conds,
                           last)
        product, step, depth = "ta * tb", cin_g, "        "
    else:  # a dot step: [BLOCK_M, BLOCK_K] gathered (channel, tap) columns by [BLOCK_K, BLOCK_N] weights
        a_ptr = f"x_pos{row} + xc{col}"
        if phased:  # each element's input coordinates (_phase_lines)
            a_ptr = " + ".join([f"x_row{row}", f"ci{col} * {sx[1]}"] +
                               [f"i{i} * {sx[2 + i]}" for i in range(len(spatial))])
        if one_tap:  # the tap's weight offset a scalar; every step's channels inside the input's: no mask along K
            tap = " + ".join(f"kw{i} * {sw[2 + i]}" for i in range(len(window)))
            b_off, a_mask, b_mask = f"ci[:, None] * {ci_stride} + ({tap})", f"ok{row}", f"rn1[None, :] < {N}"
        else:
            b_off = " + ".join([f"ci[:, None] * {ci_stride}"] +
                               [f"kw{i}[:, None] * {sw[2 + i]}" for i in range(len(window))])
            a_mask = " & ".join([f"{row_ok}{row}", f"(kk{col} < {k_extent})"] + conds)
            b_mask = f"(kk[:, None] < {k_extent}) & (rn1[None, :] < {N})"
        cast = dot_cast(x, w, p.get("operands", "input"))
        load = f"tl.load({a_ptr}, mask={a_mask}, other=0.0)"
        body += [f"ta = {f'tl.trans({load})' if last else load}{cast}",
                 f"tb = tl.load(w_col[None, :] + {b_off}, mask={b_mask}, other=0.0){cast}"]
        product, step, depth = f'tl.dot(ta, tb, input_precision="{p.get("precision", "ieee")}")', "BLOCK_K", "    "
        if hand_split(p):
            body += tf32_parts("ta") + weight_parts(p, "tb")

    def k_loop(acc: str) -> list[str]:
        adds = split_dot(acc, "ta", "tb") if bk > 1 and hand_split(p) else [f"{acc} += {product}"]
        return [f"{acc} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                f"for k0 in range(0, {k_extent}, {step}):"] + ["    " + line for line in body] + \
               [depth + line for line in adds]

    rank = len(kernel.domain)
    if inter:  # [BLOCK_M, BLOCK_N, slots] tiles (_interleave)
        lines += _interleave(dims, kernel.domain[0], cin_g, big, rows, N, k_loop)
        lines.append(f"rn = pid_g * {N} + rn1[None, :, None]")
        gen.groups = [([0] + list(range(2, rank - 1)), "rm"), ([1], "rn"), ([rank - 1], "rw")]
    else:
        lines += k_loop("acc")
        if phased:  # the output's flat (batch, position) index, and the phase's rows that are outputs
            flat = "q0"
            for i, size in enumerate(spatial):
                flat = f"({flat}) * {size} + o{i}"
            lines += [f"rm = ({flat})[:, None]", f"mask = {row_ok}[:, None] & (rn1[None, :] < {N})"]
        else:
            lines += ["rm = rm1[:, None]", f"mask = (rm < {M}) & (rn1[None, :] < {N})"]
        lines.append(f"rn = pid_g * {N} + rn1[None, :]")
        gen.groups = [([0] + list(range(2, rank)), "rm"), ([1], "rn")]
    gen.positions_last = last
    gen.top.lines += lines
    gen.top.cache[g] = "acc"
    gen.kinds[g] = "f"
    store_lines(gen, list(kernel.stores.items()))
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"]
    src = kernel_header(name, gen, meta) + ["    " + line for line in gen.top.lines]
    grid = (math.ceil(rows / bm) * math.ceil(N / bn) * phases, groups)
    launch = Launch(name, grid, list(gen.ptrs), {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                                                 "GROUP_M": p.get("GROUP_M", 8)}, p.get("num_warps", 4),
                    p.get("num_stages", 3), p.get("maxnreg", 0))
    return KernelCode("\n".join(src), [launch], prep=prep)
