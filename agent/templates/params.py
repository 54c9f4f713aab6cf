"""Parameter spaces, defaults and validity per kernel layout. The numbers target an H100/H200-class GPU
(132 SMs, 227 KB shared memory per block, 64K registers per SM); on the CPU interpreter they only change
how many programs run.

  flat  BLOCK, num_warps, evict (1: the tensors it walks loaded evict_last; 2: the smaller tensors it reads
        again along them: elementwise.variants)
  plane layout (plane | flat), BLOCK_H, BLOCK_W, ROWS tiles a program takes down the plane, num_warps,
        unaligned (1: one element per lane in every load; on by default where a window's taps along a row are
        not 16-byte aligned: unaligned_taps), VEC (outputs a lane takes along the row, its windows built from
        16-byte loads: lane_width), walk (1: a program takes its tile of every output plane of a 3-D window's
        first dim in turn, carrying the planes its outputs share: codegen.walks), pairs (1: taps along a row
        at stride 2 loaded two at a time: codegen.pair_window)
  row   mode (one_pass | looped), BLOCK_O rows per program, BLOCK_R, num_warps, num_stages, SPLIT programs per
        row and GROUP rows per launch of a split (0: all) or LAG (its passes in one launch), FLAT (1: a split's
        per-element output a flat kernel over the row values its combining kernel stores), pass fusions online,
        welford, fold, and tail_first,
        PERSIST (0: a program per block of rows; k: k programs per SM, each taking blocks of rows in turn),
        pipeline (1: chunk loops pipelined over num_stages), evict (1: eviction hints: a row read again kept
        in L2 for its later pass; a one-pass row loaded evict_last)
  col   BLOCK_I, BLOCK_R, num_warps, num_stages, SPLIT (programs a column tile, each a chunk of the reduced axis,
        their partials merged by a second kernel: kernels._col_split)
  gemm  BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, SAMPLES (rows tiles: batch elements a
        program takes) (+ SPLIT_K, impl, precision at plan level, and
        operands, input or fp32, where bf16/fp16 operands meet tl.dot: base.default_operands); a matrix
        product's parts (tf32x3's operands split once in memory, or each tile in registers at every K step:
        gemm.registers_split) and persistent (1: in precision tf32x3, a program per SM walking the tiles, its
        split operands read by TMA descriptors: gemm.persistent_pays); a convolution's
        tiles, channels, positions, interleaved, rows or stream (the axis its tiles walk, a transposed
        convolution's last dim's phases in one program, channels by one row of outputs, or a convolution's
        positions streamed through programs holding the weight, by TMA for a 1x1 one: implicit_gemm.render_conv; by
        default its rule, stream where it applies: stream_tiles), stats (1: in rows tiles, the next group,
        instance or batch norm's statistics computed in the epilogue: stats_epilogue), recompute (1: with
        stats, the convolution launched again for the norm's output, its own never written) and parts (tf32x3's
        tiles split into TF32 parts by Triton in every tl.dot, "registers", or once where loaded, "hand":
        implicit_gemm.hand_split)
  rnn   BLOCK_H hidden units per program, BLOCK_K, num_warps
  attention  BLOCK_M queries per program, BLOCK_N keys per step, num_warps, num_stages (+ precision)
"""
from __future__ import annotations

import math

from agent.templates.attention_kernel import attention_dims
from agent.templates.codegen import lane_window, next_pow2, pair_rows, pair_window, walks
from agent.templates.implicit_gemm import (conv_tiles, gemm_dims, interleave_slots, outer_steps, phase_ks, phased,
                                           pointwise, row_offsets, rows_fit, rows_k, rows_layout, rows_smem,
                                           stacks, STREAM_POSITIONS, stream_blocks, stream_smem, streams, WINDOW_K)
from agent.templates.ir import Leaf, Node, contiguous_strides
from agent.templates.fold import fold_sums, foldable
from agent.templates.kernels import col_splittable, looped_passes, reduction_stages, online_pairs, welford_pairs
from agent.templates.codegen import SM_SMEM_BYTES, SM_THREADS, SMEM_BYTES, SMS, register_programs
from agent.templates.schedule import Kernel

L2_BYTES = 50 * 2**20
MAX_PER_SM = 4  # the most programs an SM streamed tiles launch (per_sm)
ONE_PASS_MAX = 32768  # widest row a program holds in registers
POW2 = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]


def sizes(kernel: Kernel) -> tuple[int, int, int]:
    """(O, R, I): kept outer positions, reduced size, trailing kept size (col layout)."""
    d, rd = kernel.domain, kernel.rdims
    r = math.prod(d[k] for k in rd) if rd else 1
    if kernel.layout == "col":
        last = max(rd)
        i = math.prod(d[k] for k in range(last + 1, len(d)) if k not in rd)
        return math.prod(d) // (r * i), r, i
    return math.prod(d) // r, r, 1


def splittable(kernel: Kernel, p: dict | None = None) -> bool:
    """Row reductions that fit one pass once online-softmax and Welford pairs share it and selected sums are
    folded into it (no reduction reads another's result otherwise): SPLIT programs may share a row. `p` may
    turn any of these fusions off."""
    p = p or {}
    if kernel.layout != "row" or kernel.scan_reverse is not None:
        return False
    kernel = fold_sums(kernel) if p.get("fold", 1) else kernel
    reduces = [m for m in kernel.nodes if m.op == "reduce"]
    if not reduces or any(r.fn not in ("sum", "max", "min") for r in reduces):
        return False
    pairs = {**(online_pairs(kernel) if p.get("online", 1) else {}),
             **(welford_pairs(kernel) if p.get("welford", 1) else {})}
    return set(reduction_stages(kernel, pairs).values()) == {1}


# A convolution's K tile where its output tile is at most 64 channels wide. Its input tile is gathered: per
# element an input position from the (channel, tap) column and the output row, and a bound check per spatial
# dim. At 32 wide those index tiles spilled registers (sm_90, ptxas: 2.7-2.9 KB a thread in level 2's 3-channel
# transposed convolutions). Over KernelBench's convolutions on H200s, Triton's times at 16 against 32: level 2's
# 3-channel ones 0.52-0.63x, 58_conv_transposed_3D 0.59x; over the 114 Triton candidates 0.94x in geomean, but
# 1.03-1.27x on most with 128-channel tiles (87_conv_pointwise_2D 1.27x), where each K step's gather feeds twice
# the products. At most 64 channels: 0.93x, the worst 1.14x (70_conv_transposed_3D).
CONV_BLOCK_K = 16


LAG_CHUNK = 16384  # elements a lagged split's ticket reads (on an H200: 16384-32768 alike, 8192 4% slower)


HELD_CHUNK, HELD_WARPS = 8192, 4  # a held split's chunk and warps (on an H200: 16384 at 8 warps 2-6% slower)


def held_split(kernel: Kernel) -> dict:
    """The parameters of a split whose chunks stay in registers (kernels._held): chunks of HELD_CHUNK."""
    return {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": HELD_CHUNK, "num_warps": HELD_WARPS, "COOP": 1, "LAG": 0,
            "GROUP": 0, "SPLIT": -(-sizes(kernel)[1] // HELD_CHUNK)}


def _held_invalid(kernel: Kernel, p: dict, r: int, width: int) -> str | None:
    """Why a held split (COOP) cannot run under `p`, or None."""
    if p.get("SPLIT", 1) == 1 or p.get("LAG") or p.get("GROUP") or p.get("shapes") == "dynamic":
        return "COOP holds a split's chunks (SPLIT > 1) in one launch: no LAG, no GROUP, no dynamic shapes"
    if p.get("BLOCK_O", 1) != 1:
        return "COOP takes one row a program (BLOCK_O 1)"
    if not kernel.writes_elements:
        return "COOP keeps a chunk for its per-element output: it needs one"
    if p["SPLIT"] != -(-r // width):
        return f"COOP takes a chunk of BLOCK_R a program: SPLIT must be {-(-r // width)}"
    if p.get("welford", 1) == 2:
        # one chunk a program leaves per-lane updates one step; Triton 3.6 (the H200's) fails to compile them
        # (TritonGPURemoveLayoutConversions: level 1's 34 and 35 crashed so in session 53's search)
        return "COOP takes one chunk a program: welford 2's per-lane updates have one step to take (welford 1)"
    threads, cap = 32 * p.get("num_warps", 4), p.get("maxnreg")
    per_sm = SM_THREADS // threads  # an SM's programs by their threads, then by the cap on their registers
    if cap:
        per_sm = min(per_sm, register_programs(cap, threads))
    if SMS * per_sm < p["SPLIT"]:
        # a row's programs wait for each other: where fewer fit at once, they poll until SPINS runs out and the
        # row's last program re-reads their chunks (level 1's 35, SPLIT 256 at 32 warps under a cap of 80, one
        # program an SM: past 300 s on an H200 in session 53's search)
        capped = f" under a cap of {cap} registers" if cap else ""
        return f"COOP runs a row's {p['SPLIT']} programs at once: {per_sm} of {threads // 32} warps{capped} fit an " \
               f"SM, {SMS * per_sm} on {SMS} SMs"
    return None


def lag_split(kernel: Kernel) -> int:
    """The SPLIT of a lagged split (kernels._lagged): chunks of about LAG_CHUNK elements."""
    return max(2, -(-sizes(kernel)[1] // LAG_CHUNK))


def gemm_tiles(kernel: Kernel) -> dict:
    """A GEMM's (or a convolution's) default tiles, its accumulator one [BLOCK_M, BLOCK_N] tile.

    A convolution whose tiles are at most 64 channels wide takes 16 channels by 256 rows at 4 warps (512 where
    its rows walk positions, as gemm.variants' dot-step form of the few-channel ones below). On an H200 (session
    13), against 128 (or 64) rows by up to 64 channels at 8 (or 4) warps: level 1's 54, 59, 66_conv_standard_3D
    4.16 -> 3.19, 3.72 -> 2.98, 5.76 -> 4.52 ms; 72_conv_transposed_3D 1.03 -> 0.75, 75_conv_transposed_2D
    1.08 -> 0.94, 79_conv_transposed_1D 2.53 -> 1.82, 81_conv_transposed_2D 1.34 -> 1.33; walking positions,
    level 2's six 3-channel transposed convolutions (50, 58, 60, 72, 89, 96) 2-11% faster (89: 2.90 -> 2.59).
    Two with 128-wide channel tiles ran slower at 256 rows by 16 (50_conv_standard_2D 4.47 -> 4.84,
    67_conv_standard_1D 10.78 -> 11.11) and keep theirs.
    A convolution over so few input channels that its K steps may be outer products (implicit_gemm.outer_steps)
    takes them, with channel tiles of 256 rows by 16 at 2 warps. On an H200 (session 14), level 2's six 3-channel
    transposed convolutions at 2 warps against 4 (a column a step): 50 1.69 -> 1.36 ms, 60 2.69 -> 2.35, 72
    2.94 -> 2.65, 89 1.85 -> 1.47; 512 rows at 4 warps came within 3.5% of it, at 8 warps 5-10% slower than 256
    rows at 4."""
    node = kernel.nodes[0]
    if outer_steps(node):
        return {"tiles": "channels", "BLOCK_M": 256, "BLOCK_N": 16, "BLOCK_K": 1, "GROUP_M": 8, "num_warps": 2,
                "num_stages": 3}
    _, m, n, _ = gemm_dims(node)
    bm, bn = min(128, max(16, next_pow2(m))), min(128, max(16, next_pow2(n)))
    bk = CONV_BLOCK_K if node.fn == "conv" and bn <= 64 else 32
    if node.fn == "conv" and bn <= 64:
        return {"BLOCK_M": min(256, max(16, next_pow2(m))), "BLOCK_N": 16, "BLOCK_K": bk, "GROUP_M": 8,
                "num_warps": 4, "num_stages": 3}
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": 8 if bm * bn >= 8192 else 4,
            "num_stages": 3}


def stream_tiles(node: Node) -> dict:
    """A convolution's default where it can stream (implicit_gemm.streams): 64 positions a tile, every output
    channel, 4 warps; a 1x1 one every input channel in one step and 4 stages, one with a window 3 stages and 2
    programs an SM. On an H200 (session 44, by hand; ms), level 1's 87_conv_pointwise_2D against its tiles
    before (pointwise_tiles) 5.34 -> 3.58, and 86_conv_depthwise_separable_2D's pointwise half (64 -> 128
    channels over 16 x 512 x 512) 1.26 -> 0.88; at 3 stages 4.19 and 1.04, 5 or 6 stages 1-2% slower than 4,
    128 positions at 4 or 8 warps 3.78-3.81 and 0.92, 64 at 8 warps 5.90, 32 at 4 5.64. With a window, see
    implicit_gemm._render_stream, and stream_stages."""
    bk, bn = stream_blocks(node)
    p = {"tiles": "stream", "BLOCK_M": 64, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4}
    return {**p, "num_stages": 4} if pointwise(node) else {**p, "num_stages": 3, "per_sm": 2}


def stream_stages(kernel: Kernel, p: dict) -> int:
    """A streamed window's stages under p (its plan's kernel, the convolution's): 2 where its programs at 3
    would not fit an SM's shared memory together (one would run an SM at a time) and at 2 they do, else 3. A
    kernel that stores no full tile (a reduction over the channels in its epilogue) asks its tiles alone
    (implicit_gemm.stream_smem without scratch). On an H200 (session 46), 144 columns into 64 channels, 148 KB a
    program at 3 stages: level 2's 25_Conv2d_Min_Tanh_Tanh (reduced, 111 KB at 2 in Triton's sm_90 compile)
    2.96 -> 2.02 ms; the same convolution under a ReLU (SqueezeNet's 3x3 expand, 16 -> 64 over 64 x 126 x 126)
    0.458 at 3, 0.538 at 2, its output tile's scratch past half an SM; level 1's 74_conv_transposed_1D_dilated
    (160 columns, one an SM either way) 2.22 at 3, 2.33 at 2."""
    node, per_sm = kernel.nodes[0], p.get("per_sm", 1)
    if per_sm * stream_smem({**p, "num_stages": 3}, node) <= SM_SMEM_BYTES:
        return 3
    two = per_sm * stream_smem({**p, "num_stages": 2}, node, scratch=kernel.writes_elements)
    return 2 if two <= SM_SMEM_BYTES else 3


def pointwise_tiles(node: Node) -> dict:
    """A 1x1 convolution's tiles where its tf32x3 products split each loaded tile (implicit_gemm.pointwise): 64
    rows by up to 128 channels, K steps of up to 64 channels, 4 warps, 3 stages. Its input tile is a plain
    load, which pipelines as a matrix product's does; a gathered tile does not (level 1's 50, 55, 64, 67, 69
    and 76 ran 2.4-2.6x slower at 2 or 3 stages). On an H200 (session 39, ms), against 128 x 128 x 32 at 8
    warps and one stage: level 1's 87_conv_pointwise_2D (64 to 128 channels over 16M positions) 7.23 -> 5.30
    (5.56 in K steps of 32, 5.79 at 4 stages, 7.10 at 32 rows, 11.58 at 8 warps); 86's pointwise half, in K
    steps of 32, 2.35 -> 1.95 for both kernels."""
    _, _, n, k = gemm_dims(node)
    return {"BLOCK_M": 64, "BLOCK_N": min(128, max(16, next_pow2(n))), "BLOCK_K": min(64, max(16, next_pow2(k))),
            "num_warps": 4, "num_stages": 3}


def wide_tiles(node: Node) -> dict:
    """Channel tiles of a convolution's tf32x3 dot steps over 17-64 output channels a group: every channel in one
    tile, 128 rows by the next power of two, K steps of 32 at 4 warps ({} elsewhere); the 256 x 16 x 16 tiles of
    gemm_tiles gather each input tile once a 16-channel block and split it into TF32 parts as often. On an H200
    (session 39, ms), against those: level 1's 54, 57, 59, 60, 62, 65, 66, 68, 70, 71, 74, 78, 80 2.06 -> 0.91,
    26.9 -> 16.5, 2.08 -> 1.07, 6.64 -> 4.63, 16.1 -> 8.9, 16.5 -> 10.6, 3.34 -> 2.28, 75.8 -> 56.0, 32.5 -> 21.4,
    3.43 -> 2.49, 3.77 -> 2.20, 8.0 -> 5.55, 16.2 -> 9.4 (70: 24 channels in a 32-wide tile); 61 (48 channels)
    14.3 -> 14.5; level 2's 21 3.10 -> 2.94. In K steps of 16 most were 5-65% slower (70: 35.3). Over 16 channels,
    128 x 16 x 32 ran level 1's 58 2.0x slower. Level 2's 43 (3-D, 32 input channels; 255 registers a thread)
    stopped the GPU with an invalid address in this form: gemm.variants offers the 256 x 16 tiles next."""
    _, _, n, _ = gemm_dims(node)
    if node.fn != "conv" or not 16 < n <= 64:
        return {}
    return {"BLOCK_M": 128, "BLOCK_N": next_pow2(n), "BLOCK_K": 32, "num_warps": 4}


DEEP_K = 256  # the least K (input channels times taps) that deep_steps takes K steps of 64 for


def deep_steps(node: Node, p: dict) -> dict:
    """K steps of 64 for the channel tiles `p` of a tf32x3 convolution at K steps of 32 that is plain (2-D or
    3-D, stride 1, undilated, ungrouped, not transposed) and has K of at least DEEP_K ({} elsewhere): its gathered
    input tile is split into TF32 parts once for twice the products. On an H200 (session 63, variants_bench, ms,
    over the separable input offsets of implicit_gemm._split_taps): level 1's 62_conv_standard_2D 8.669 -> 7.873,
    66_conv_standard_3D (3 channels, K 315) 2.134 -> 1.582; level 2's 47_Conv3d_Mish_Tanh 7.472 -> 4.812 (cuDNN
    under the epilogue 5.018), 43 6.954 -> 5.972 (padded; cuDNN's 5.823), 31 6.542 -> 5.902, 17 6.880 -> 6.168, 32
    13.138 -> 12.254. Slower: level 1's 80 (dilated) 7.846 -> 8.459, 54 (K 81) 0.845 -> 1.603; at 128 most ran
    1.3-9x slower (43 48.9)."""
    a, dims = node.attrs, len(node.shape) - 2
    plain = node.fn == "conv" and dims in (2, 3) and not a["transposed"] and a["groups"] == 1 and \
        set(a["stride"]) == {1} and set(a["dilation"]) == {1}
    channels = p.get("tiles", "channels") == "channels" and p.get("BLOCK_K") == 32
    return {"BLOCK_K": 64} if plain and channels and gemm_dims(node)[3] >= DEEP_K else {}


def tap_steps(node: Node, p: dict) -> dict:
    """{"taps": 1} where the dot steps of channel tiles `p` can each take BLOCK_K input channels of one tap
    (taps_fit; BLOCK_K lowered to 32 or 16 where those divide a group's channels and p's does not), {} elsewhere.
    Its K runs tap by tap, each tap's channels innermost: the tap and its input offset are scalars of the step,
    its bounds a vector over the output positions, and an element of the gathered tile costs its pointer's add,
    where taps fastest along K give each column its own tap, offset and bounds. Compiled for sm_90 on a CPU
    (Triton 3.6, ptxas), level 1's 69_conv_transposed_2D (64 channels, 3x5 taps, 128 x 128 x 32 tiles at 8
    warps): 830 SASS instructions a K step (629 integer, 12 tensor-core products) -> 412 (215), 238 -> 248
    registers; 128 x 64 x 64: 792 -> 442. Steps of 64 over tiles of 128 x 64 or more take 8 warps: at 4, level 2's
    54_Conv2d_Multiply_LeakyReLU_GELU spilled 520 bytes (592 without tap steps), at 8 none (219 registers, 432
    instructions a step, 681 without). Over the 19 of levels 1-2's convolutions whose first Triton candidate is in
    channel tiles, against the same tiles without tap steps, 1.5-4.6x fewer K-loop instructions (geomean 2.6x;
    benchmarks/sass_bench.py); in positions tiles, whose threads each hold few columns, 1-2% fewer (57, 65, 71):
    taps_fit lets the search take them there. Timed on an H200 (session 69, ms, the first channel-tile candidate
    without -> with tap steps), they ran slower on all four tried: level 1's 69 10.41 -> 16.41, 62 7.87 -> 10.25,
    55 11.47 -> 13.27, 80 7.85 -> 10.17. So no variant offers them; the search's moves still may."""
    if node.fn != "conv" or not p.get("BLOCK_K", 32) > 1 or conv_tiles(node, p) != "channels":
        return {}
    for bk in (p.get("BLOCK_K", 32), 32, 16):
        if taps_fit(node, {**p, "BLOCK_K": bk}):
            out = {"taps": 1, **({"BLOCK_K": bk} if bk != p.get("BLOCK_K", 32) else {})}
            if bk == 64 and p.get("BLOCK_M", 64) * p.get("BLOCK_N", 64) >= 128 * 64 and p.get("num_warps", 4) < 8:
                out["num_warps"] = 8
            return out
    return {}


def taps_fit(node: Node, p: dict) -> bool:
    """Whether tiles `p` of a convolution can take tap steps (tap_steps): dot steps (BLOCK_K above 1) in channels
    or positions tiles of an unphased convolution whose input channels a group BLOCK_K divides. Not a strided
    transposed one: its phases' K loops (16 channels a step, few taps a phase) compiled for sm_90 to as many
    instructions either way (level 2's 15, 26, 93; within 4%)."""
    if node.fn != "conv" or phased(node) or conv_tiles(node, p) not in ("channels", "positions"):
        return False
    bk = p.get("BLOCK_K", 32)
    return bk > 1 and (node.args[0].shape[1] // node.attrs["groups"]) % bk == 0


def packed_default(node: Node) -> bool:
    """Whether a convolution reads its weight packed by default (implicit_gemm.packed_weight): a strided
    transposed one (phased), whose weight (C_in, C_out / groups, *window) puts a phase's taps a window apart
    along both K and N. On an H200 (session 21), the default Triton variant of KernelBench's convolutions with
    and without: of 28 phased ones 25 ran faster (level 2's 78_ConvTranspose3d_Max_Max_Sum 14.27 -> 8.69 ms,
    34 5.92 -> 4.07, level 1's 77 1.405 -> 1.147, 81 0.424 -> 0.388; rows tiles 2-6%), two within 0.5% and
    level 2's 5 9% slower; of 18 unstrided transposed ones, six ran 1.38-1.63x slower (level 1's 64 and 69,
    level 2's 11, 42, 61 and 77) and the rest within 3.2%; of 43 whose weight has K contiguous already, 35 ran
    slower, thirteen by 1.41-1.67x (level 1's 50 1.98 -> 3.09 ms)."""
    return phased(node)


def transposed_positions(node: Node) -> dict:
    """Positions tiles over the weight packed (tiles "positions", packed 1) for an unstrided transposed 2-D or 3-D
    convolution over at most 64 output channels a group ({} elsewhere): its tf32x3 dot steps' default, the channel
    tiles over the weight as it is next (gemm.variants). On an H200 (session 61, variants_bench at each task's
    default tiles, ms), against those: level 1's 57_conv_transposed_2D 16.40 -> 13.16, 65 10.48 -> 7.57 (eager
    8.34), 78 5.48 -> 5.21, 71 2.465 -> 2.454; at the tiles the search reached from the default (kernelbench_bench,
    budget 24): 3-D 68 54.5 -> 36.1 (25.4 at 256 rows, 8 warps), 61 14.2 -> 10.7, 58 3.72 -> 2.71, 70 21.27 ->
    20.86. Not for 1-D: 74_conv_transposed_1D_dilated 2.21 -> 3.11. Nor over 128 channels, where the packed weight
    alone ran six unstrided ones 1.38-1.63x slower (packed_default) and positions tiles level 2's 61 and 77 7.42 ->
    9.33 and 21.8 -> 38.4."""
    a = node.attrs
    if node.fn != "conv" or not a["transposed"] or set(a["stride"]) != {1} or len(node.shape) < 4:
        return {}
    return {"tiles": "positions", "packed": 1} if gemm_dims(node)[2] <= 64 else {}


def interleaved_tiles(kernel: Kernel, split: bool = False) -> dict:
    """Interleaved tiles (implicit_gemm._interleave) for a transposed convolution strided along its last dim
    ({} for others), the default unless its rows walk positions (implicit_gemm.conv_tiles): 16 channels by as
    many rows as 128 registers a thread hold for every slot's accumulator at 4 warps, up to 256. On an H200
    (session 13), against the channel tiles' defaults: level 1's 81_conv_transposed_2D 1.346 -> 0.726 ms
    (stride 5, 128 rows), 75_conv_transposed_2D 1.075 -> 0.812, 72/73/77_conv_transposed_3D 1.034 -> 0.726,
    5.35 -> 3.67, 3.36 -> 2.10, 79_conv_transposed_1D 2.53 -> 1.61; level 2's 3-channel ones, whose rows walk
    positions, 3.99 -> 4.12 and 3.87 -> 3.95.
    With `split` (tf32x3 dot steps: gemm.split_products) 32 channels by up to 128 rows, as many as 128 registers
    a thread hold at 4 warps. On an H200 (session 17), against 16 channels by 256 rows (128 at stride 5): level 1's
    72, 73, 75, 77, 79, 81 0.797 -> 0.739, 3.068 -> 2.223, 0.586 -> 0.485, 1.766 -> 1.405, 1.259 -> 0.949, 0.486
    -> 0.423 ms; level 2's 2, 3, 5, 16, 26 (the Triton candidate) 6.78 -> 5.00, 3.95 -> 3.73, 12.66 -> 9.01, 8.95
    -> 7.93, 3.25 -> 3.14. At 64 rows by 32, or 64 by 64, most ran slower than the default.
    Where every phase reads 32 K (channels by taps), one 32-wide K step a phase: level 1's 81 (32 channels, one
    tap a phase) 0.3870 -> 0.3474 ms on an H200 (session 22); 75, whose phases read 24 and 48, ran slower so
    (0.4828 -> 0.5631)."""
    slots = interleave_slots(kernel.nodes[0]) if kernel.nodes[0].fn == "conv" else 0
    if not slots:
        return {}
    bk = 32 if phase_ks(kernel.nodes[0]) == {32} else CONV_BLOCK_K
    if split:
        return {"tiles": "interleaved", "BLOCK_M": min(128, 512 // slots), "BLOCK_N": 32, "BLOCK_K": bk,
                "num_warps": 4}
    return {"tiles": "interleaved", "BLOCK_M": min(256, 1024 // slots), "BLOCK_N": 16, "BLOCK_K": bk,
            "num_warps": 4}


ROWS_TILES = {"tiles": "rows", "BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 1, "num_warps": 1, "num_stages": 1}
# rows tiles in tl.dot steps (implicit_gemm.rows_k): 256 outputs of a row by 64 channels, 32 input channels a step
ROWS_DOT_TILES = {"tiles": "rows", "BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 1}


def rows_stacked(node: Node) -> dict:
    """Rows tiles in dot steps whose K stacks a row's column offsets (implicit_gemm.stacks), where a group's
    input channels times those offsets fill a 16-wide step; {} elsewhere. 128 outputs a slot by 16 channels at
    4 warps, each tile split into its TF32 parts once (parts "hand"). On an H200 (session 38, ms): level 1's
    75_conv_transposed_2D 0.376-0.378 against its interleaved tiles' 0.485; 0.388 at 256 outputs a slot, 0.554-0.557
    at 8 warps, 0.411 in Triton's tf32x3; its phases' three taps unrolled (tl.static_range under an if) 0.410-0.421."""
    if not stacks(node) or node.args[0].shape[1] // node.attrs["groups"] * len(row_offsets(node)) < 16:
        return {}
    return {"tiles": "rows", "BLOCK_M": 128 * max(1, interleave_slots(node)), "BLOCK_N": 16, "BLOCK_K": 16,
            "num_warps": 4, "num_stages": 1, "parts": "hand"}


def xlast_fits(node: Node, p: dict) -> bool:
    """Whether a convolution's kernel can read its input from a copy with the channels innermost
    (implicit_gemm.channels_last): rows tiles whose K steps are dot products over the input channels (not
    stacked with the row's column offsets, whose few channels a position would load as short runs), and an
    input leaf read whole (no piece of a pad or a cat) with its spatial dims contiguous, as the copy reads them."""
    x = node.args[0]
    return node.fn == "conv" and conv_tiles(node, p) == "rows" and rows_k(node, p) > 1 and not stacks(node) and \
        isinstance(x, Leaf) and x.kind == "tensor" and not x.bounds and \
        tuple(x.strides[2:]) == contiguous_strides(x.shape[2:])


def rows_form(node: Node) -> dict:
    """Rows tiles' sizes for a convolution: outer-product steps where its input channels fit them (ROWS_TILES,
    implicit_gemm.rows_fit), dot steps elsewhere (ROWS_DOT_TILES). On an H200 (session 23), the dot form at
    tf32x3 against the interleaved tiles of its default: level 1's 73_conv_transposed_3D 1.940 -> 1.546 ms,
    81_conv_transposed_2D 0.348 -> 0.325 (0.516 at 32 channels a tile, 0.426 at 8 warps); level 2's 3, 20, 26,
    34, 38, 49, 78, 100 (3-D, stride 2, 32-64 input channels) 1.10-1.70x faster (20: 1.271 -> 0.748). Slower:
    the 2-D ones of level 2 (2, 5, 16, 36, 44, 91, 93: 1.4-2.4x; faster over the channels-last copy: phased_pair),
    level 1's 77 (dilated) and 79 (1-D), and the 3-D ones over 16 channels (level 2's 15, 74: 1.14-1.16x; at two
    batch elements a program faster: rows_samples)."""
    return dict(ROWS_TILES) if rows_fit(node) else {**ROWS_DOT_TILES, **rows_samples(node, ROWS_DOT_TILES)}


def rows_samples(node: Node, tiles: dict) -> dict:
    """SAMPLES 2 for rows tiles in dot steps whose tile (implicit_gemm.rows_layout) is at most 2048 outputs, so
    that both batch elements' accumulators take at most 32 registers a thread, where the batch is even; {}
    elsewhere. Each weight a program loads then serves twice the outputs. Where they apply, these tiles are a
    phased convolution's default (kernel_default), its interleaved tiles next. On an H200 (session 43,
    variants_bench, ms): level 2's 26_ConvTranspose3d_Add_HardSwish (32 outputs of a row by 64 channels) 1.968 ->
    1.616 (interleaved 2.53), 15 and 74 (64 by 32) 0.592 -> 0.437 and 0.496 -> 0.311, faster than their
    interleaved tiles (0.487, 0.437). Larger tiles lose: at 4096 outputs 7-12% (level 2's 3, 20, 34, 38, 49; 78
    1.6% faster), at 8192 1.7-3.5x (level 2's 100, level 1's 73 and 77), level 1's 75 (512 by 16, stacked) 5x.
    Four samples: 15 0.431, 74 0.301, 26 1.786, the 4096-output tiles 1.3-1.7x slower. Over the channels-last
    copy at two stages, two samples win at 4096 outputs too: rows_paired."""
    return {"SAMPLES": 2} if _pair_fits(node, tiles, 32) else {}


def rows_paired(node: Node, p: dict) -> dict:
    """SAMPLES 2 at two stages for rows tiles `p` that read the channels-last copy (xlast), where both batch
    elements' accumulators take at most 64 registers a thread (tiles of up to 4096 outputs at 4 warps) and the
    batch is even; {} elsewhere. gemm.variants offers it right after `p`. On an H200 (session 59, variants_bench,
    ms), against `p` alone: level 2's 3-D transposed convolutions in tiles of 4096 outputs 78 4.834 -> 3.755, 20
    0.644 -> 0.478, 34 3.023 -> 2.568, 38 2.206 -> 1.870, 3 2.080 -> 1.737, 49 0.802 -> 0.709 (each faster than
    two samples or two stages alone); at 2048, where `p` has two samples already, 26 1.369 -> 1.330, 15 and 74
    within 1%. At 8192 it lost: level 1's 73 1.390 -> 3.159, 77 1.049 -> 1.898; at 8 warps too (session 60: 73
    1.397 -> 1.66, 77 1.055 -> 1.95, level 2's 100 7.60 -> 16.42)."""
    return {"SAMPLES": 2, "num_stages": 2} if _pair_fits(node, p, 64) else {}


def phased_pair(node: Node) -> dict:
    """For a strided transposed 2-D convolution, ungrouped and undilated, its window wider than its stride along both
    dims (as measured: 3x3 and 4x4 at stride 2), into 64 to 128 output channels ({} elsewhere): rows tiles over the
    channels-last copy (xlast) holding every output channel, 4096 outputs a tile (64 x 64, 32 x 128), K steps of 32, a
    row of two batch elements a program at two stages (rows_paired): its tf32x3 default (gemm.default), then the same in
    256 x 64 tiles at K steps of 16 (gemm.variants), then the interleaved tiles these replace. On an H200 (session 62,
    variants_bench, ms), against the interleaved tiles, their 256 x 64 rows tiles over the copy at K steps of 32, and at
    16 over two stages: level 2's 91_ConvTranspose2d_Softmax (4x4 window, 128 channels) 3.843 against 5.574, 5.120,
    5.159; 93 3.241 against 3.535, 3.839, 4.521; 5 (64 channels: kernelbench_bench at budget 24) 5.785 against 9.065,
    8.343; in 3x3 windows 2 2.795 against 4.982, 2.951, 2.671; 16 3.103 against 4.178, 3.310, 2.982; 36 0.805 against
    1.119, 0.829, 0.780. From it the search (budget 24) reached 3.620 on 91 (the same tile at 8 warps) and 3.245 on 93,
    against 4.964 and 3.533 before."""
    a = node.attrs
    window = node.args[1].shape[2:]
    if not phased(node) or len(node.shape) != 4 or a["groups"] != 1 or set(a["dilation"]) != {1} or \
            any(k <= s for k, s in zip(window, a["stride"])):
        return {}
    bn = next_pow2(gemm_dims(node)[2])
    p = {**ROWS_DOT_TILES, "BLOCK_M": 4096 // bn, "BLOCK_N": bn, "xlast": 1}
    paired = rows_paired(node, p) if 64 <= bn <= 128 and xlast_fits(node, p) else {}
    return {**p, **paired} if paired else {}


def _pair_fits(node: Node, p: dict, registers: int) -> bool:
    """Whether rows tile `p` can take a row of two batch elements: an even batch, and both elements'
    accumulators in at most `registers` registers a thread."""
    _, bm, bn, _ = rows_layout(node, p)
    return bm * bn * 2 <= registers * 32 * p.get("num_warps", 4) and node.shape[0] % 2 == 0


def rows_tiles(kernel: Kernel) -> dict:
    """Rows tiles (implicit_gemm._render_rows) for a convolution whose K steps may be outer products
    (implicit_gemm.outer_steps: strided, transposed, over a few input channels; {} for others): 16 channels by 64
    outputs of a row at one warp. On an H200 (session 17, kernelbench_bench at a budget of 2), against the channel
    tiles they replace: level 2's six 3-channel ones 50, 58, 60, 72, 89, 96 1.170 -> 0.758, 1.196 -> 0.782, 1.826
    -> 1.380, 2.307 -> 1.869, 1.317 -> 0.982, 1.130 -> 0.714 ms, their convolutions 0.83-1.00 -> 0.54-0.58 ms
    (60's wrote its 1 GB output in 3.2x the L2 sectors it needs); at 2 warps, or 128 outputs a row, 5-20% slower.
    Where else they go among the variants, and what was measured there: gemm._rows_second."""
    return dict(ROWS_TILES) if kernel.nodes[0].fn == "conv" and outer_steps(kernel.nodes[0]) else {}


def kernel_default(kernel: Kernel, rows: bool = True) -> dict:
    """A kernel's default parameters; with `rows` False, a convolution's as if rows tiles were not a form (the
    tiles they replace: gemm.variants gives those next)."""
    layout = kernel.layout
    if layout == "rnn":
        return {"BLOCK_H": 32, "BLOCK_K": 32, "num_warps": 4}
    if layout == "attention":  # FlashAttention-2's forward tiles; smaller ones for short sequences or wide heads
        lq, lk, d, dv = attention_dims(kernel)
        bm = min(128 if max(d, dv) <= 64 else 64, max(16, next_pow2(lq)))
        bn = min(64, max(16, next_pow2(lk)))
        return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 8 if bm >= 128 else 4, "num_stages": 2}
    if layout == "flat":
        return {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}
    if layout == "plane":
        bw = min(next_pow2(kernel.domain[-1]), 256)  # wide rows of outputs: the input rows they read coalesce
        bh = max(1, min(next_pow2(kernel.domain[-2]), 1024 // bw))
        if strided_rows(kernel):  # tiles a warp wide and one row tall (two or more where rows are narrow), its
            # lanes along the row; a program takes as many outputs as the 2-D tile would, in ROWS tiles
            rows_of = min(bh, max(1, 32 // bw))
            return {"layout": "plane", "BLOCK_H": rows_of, "BLOCK_W": bw, "ROWS": max(1, bh // rows_of),
                    "num_warps": max(1, min(4, rows_of * bw // 32)), "num_stages": 1}
        return {"layout": "plane", "BLOCK_H": bh, "BLOCK_W": bw,
                "num_warps": 4, "num_stages": 1, **({"unaligned": 1} if unaligned_taps(kernel) else {})}
    if layout in ("gemm", "torch"):
        node = kernel.nodes[0]
        walks = conv_tiles(node, {}) if node.fn == "conv" else None
        dot_rows = rows_form(node) if rows and node.fn == "conv" and phased(node) else {}
        return {**gemm_tiles(kernel), **(interleaved_tiles(kernel) if walks == "channels" else {}),
                **(rows_tiles(kernel) if rows else {}), **(dot_rows if "SAMPLES" in dot_rows else {}),  # rows_samples
                **({"packed": 1} if packed_default(node) else {}),
                **(stream_tiles(node) if rows and node.fn == "conv" and streams(node) else {})}
    o, r, i = sizes(kernel)
    rp = next_pow2(r)
    if layout == "row":
        if kernel.scan_reverse is not None:  # scans: a row in registers, or a carried loop over its chunks
            if rp <= 4096:
                block_o = max(1, min(next_pow2(o), 4096 // rp, 64))
                return {"mode": "one_pass", "BLOCK_O": block_o, "BLOCK_R": rp,
                        "num_warps": max(1, min(8, block_o * rp // 512)), "num_stages": 1}
            # H200, rows of 32768 fp32: forward, a row in registers at 16 warps ran 2.040-2.052 ms against
            # 2.113-2.127 in chunks (KernelBench's 90 and 92, floors 2.02-2.03); reversed, 2.709 against 2.164 (91)
            if not kernel.scan_reverse and rp <= ONE_PASS_MAX:
                return {"mode": "one_pass", "BLOCK_O": 1, "BLOCK_R": rp, "num_warps": min(16, rp // 2048),
                        "num_stages": 1}
            return {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 1024, "num_warps": 4, "num_stages": 2}
        if rp <= 16384:
            block_o = max(1, min(next_pow2(o), 4096 // rp, 64))
            warps = max(1, min(16, block_o * rp // 512))
            p = {"mode": "one_pass", "BLOCK_O": block_o, "BLOCK_R": rp, "num_warps": warps, "num_stages": 1}
        else:
            p = {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 4096, "num_warps": 8, "num_stages": 2}
        if r > 256 and online_pairs(kernel):
            p["online"] = online_form(kernel)
        if r > 256 and welford_pairs(kernel):
            p["welford"] = 1
        if r > 256 and foldable(kernel):
            p["fold"] = 1
        if r > 256 and _rewrites_row(kernel):
            p["tail_first"] = 1
        if p["mode"] == "looped" and _rewrites_row(kernel) and o >= 4 * SMS:  # rows read twice, many in flight
            wide = persistent(kernel, p, kernel_space(kernel))
            if wide.get("PERSIST") == 1:  # one row a SM: its chunks and warps run faster a program per row
                wide["PERSIST"] = 0
            p.update(wide)
        if splittable(kernel) and o < split_below(kernel) and r >= 65536:  # too few rows to fill the GPU
            p.update(split_rows(o, r, _rewrites_row(kernel)))
        return p
    block_i = min(next_pow2(i), 512)  # wide contiguous column chunks, but enough programs to fill the GPU
    while block_i > 32 and o * math.ceil(i / block_i) < 8 * SMS:
        block_i //= 2
    block_r = min(rp, max(1, 4096 // block_i), 2 if strided_rows(kernel) else rp)  # lanes along I: strided_rows
    return {"BLOCK_I": block_i, "BLOCK_R": block_r, "num_warps": 8 if block_i * block_r >= 2048 else 4,
            "num_stages": 2}


def split_below(kernel: Kernel) -> int:
    """The rows under which a row kernel's rows are split over programs (split_rows): 4 an SM where it writes
    the rows back (4 warps a program), 2 where it only reduces them (8 warps). On an H200 (session 42), level
    2's 15's statistics over 512 rows of 123,039 (3.9 an SM) unsplit took the whole candidate to 0.4875 ms,
    against 0.513 split in 2 and 0.530 in 4."""
    return (4 if _rewrites_row(kernel) else 2) * SMS


def split_rows(o: int, r: int, rewrites: bool) -> dict:
    """The row kernel's parameters for `o` rows of `r` too few to fill the GPU: each row split over SPLIT
    programs. Where the rows are written back whole after their statistics (`rewrites`: norms), in 1024-wide
    chunks at 4 warps, both passes' chunk loops software-pipelined over 4 stages; else in 4096-wide chunks at 8
    warps. On an H200 (session 14), the pipelined form against the other: level 2's 60 (512 group rows of
    492,156), its statistics 0.373 -> 0.271 ms and its output pass 0.845 -> 0.556 (1 GB read and 1 GB written),
    level 1's 37_FrobeniusNorm_ (one row of 1.9 G) 1.665 -> 1.677 and 3.892 -> 3.792; but a sum alone, level 2's
    65 (128 rows of 63,504), 1.690 -> 1.889, and level 1's 98_KLDivLoss 0.617 -> 0.625. A norm's output pass
    is a flat kernel of its own (FLAT: kernels.flat_output) over the row statistics its combining kernel stores."""
    split = min(2048, next_pow2(math.ceil(8 * SMS / o)), next_pow2(r // 8192))
    if not rewrites:
        return {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 4096, "num_warps": 8, "SPLIT": split}
    return {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 1024, "num_warps": 4, "pipeline": 1, "num_stages": 4,
            "SPLIT": split, "FLAT": 1}


def unaligned_taps(kernel: Kernel) -> bool:
    """Whether a window of the kernel steps one input element per output along its last dim and has a tap there
    off a 16-byte boundary from its output: Triton then loads those taps an element at a time, at the vector
    width of the aligned ones (kernels._plane). Measured on an H200, the taps loaded one element per lane took
    KernelBench's 3x7 depthwise convolution from 1.095 to 0.444 ms; stride-2 pools did not change."""
    for m in kernel.nodes:
        if m.op != "window":
            continue
        a, vector = m.attrs, 16 // m.args[0].dtype.itemsize
        stride, pad, dil, size = a["stride"][-1], a["padding"][-1], a["dilation"][-1], a["kernel"][-1]
        if stride == 1 and any((t * dil - pad) % vector for t in range(size)):
            return True
    return False


WIDE_ROW_TAPS = 7  # a window this wide along the row or wider: one warp a program (lanes)


def lane_width(kernel: Kernel) -> int:
    """The outputs a lane can take along the row where every window of a plane kernel has its taps there at
    fixed offsets from its outputs' (codegen.lane_window) over rows 16-byte aligned: as many as one 16-byte
    load of its input holds; else 0. Gen.window_lanes builds their windows from aligned chunks, a vector load
    each."""
    windows = [m for m in kernel.nodes if m.op == "window"]
    if kernel.layout != "plane" or not windows or not all(lane_window(m) for m in windows):
        return 0
    vec = min(16 // m.args[0].dtype.itemsize for m in windows)
    return vec if all(_aligned_rows(m.args[0], vec) for m in windows) else 0


def pairs(kernel: Kernel) -> bool:
    """Whether a plane kernel has a window whose taps its programs can load in pairs (codegen.pair_window)."""
    return kernel.layout == "plane" and any(pair_window(m) for m in kernel.nodes)


def walk_window(kernel: Kernel) -> bool:
    """Whether a plane kernel has a window its programs can walk down its first dim (codegen.walks)."""
    return kernel.layout == "plane" and any(walks(m, len(kernel.domain)) for m in kernel.nodes)


def lanes(kernel: Kernel, p: dict) -> dict:
    """The changes to a plane kernel's parameters `p` that give each lane VEC outputs along the row (lane_width),
    or {} where its windows cannot take them: a row of up to 512 outputs a program (rows enough for a warp
    where they are short), one vector a lane; 4 tiles a program in turn down the plane at stride 1, one at
    larger strides. On an H200 (session 20) KernelBench's 3x7 and 3x3 depthwise convolutions ran 0.3555 ->
    0.3425 and 2.3243 -> 2.2193 ms with 4 tiles a program (0.3433 and 2.3545 with 8); its 3-D max pool at stride
    2 ran 1.286 with one, 1.398 with 4 and 1.391 with 16 (its strided default's).
    Where every window spans WIDE_ROW_TAPS taps or more along the row, one warp a program, each lane taking
    several vectors of the row. On an H200 (session 40, against one vector a lane): level 1's 85 (3x7) 0.3008 ->
    0.2744 ms, 44 (8 taps) 1.0310 -> 1.0214, 41 (8 taps dilated by 3) 1.567 -> 1.52; with fewer taps slower
    (84, 3x3, 2.191 -> 2.586; 83, 3x1, 0.274 -> 0.358)."""
    vec = lane_width(kernel)
    if not vec or p.get("layout") == "flat" or p.get("VEC", 1) > 1:
        return {}
    oh, ow = kernel.domain[-2], kernel.domain[-1]
    bw = min(512, max(vec, next_pow2(ow)))
    bh = max(1, min(next_pow2(oh), 32 * vec // bw))
    windows = [m for m in kernel.nodes if m.op == "window"]
    stride_one = all(m.attrs["stride"][-1] == 1 for m in windows)
    wide = all(m.attrs["kernel"][-1] >= WIDE_ROW_TAPS for m in windows)
    return {"VEC": vec, "BLOCK_H": bh, "BLOCK_W": bw, "ROWS": 4 if stride_one else 1,
            "num_warps": 1 if wide else max(1, min(8, bh * bw // (32 * vec))),
            **({"unaligned": 0} if p.get("unaligned") else {})}


def _aligned_rows(v, vec: int) -> bool:
    """Whether every tensor `v` reads (a leaf, or the leaves of a pointwise tree) is contiguous along its rows,
    and its rows start on multiples of `vec` elements: else a chunk is no vector load, and a lane's VEC
    elements an element at a time span four times the cache lines (own task 36, rows of 509: 0.626 -> 1.370 ms
    on an H200)."""
    if isinstance(v, Leaf):
        rows = [st for st, n in zip(v.strides[:-1], v.shape[:-1]) if n > 1]
        if v.kind != "tensor":
            return True
        return v.strides[-1] in (0, 1) and v.offset % vec == 0 and all(st % vec == 0 for st in rows)
    return all(_aligned_rows(a, vec) for a in getattr(v, "args", ()) if isinstance(a, (Leaf, Node)))


def strided_rows(kernel: Kernel) -> bool:
    """Whether a window of the kernel steps more than one input element per output along its last dim. Its
    loads are then contiguous along no dim of a 2-D tile, and Triton 3.6 (the H200's) gives such a tile's
    lanes to its first dim: each lane of a warp in another row, 8-32 cache lines a load where 2 would do. A
    tile one row (a plane kernel's output row; rows a warp wide where rows are narrower) or two (a column
    kernel's reduced rows) tall keeps the lanes along the row; a plane kernel's program loops over ROWS such
    tiles, as many outputs as the 2-D tile had (a program per row tile left level 2's pools after convolutions
    up to 22% slower). Measured on an H200: KernelBench's 3-D max pool 3.542 -> 1.357 ms, its 3-D average pool
    3.974 -> 2.681, a logsumexp over channels of a 2x2x2 max pool 0.55 -> about 0.12 ms."""
    return any(m.op == "window" and m.attrs["stride"][-1] > 1 for m in kernel.nodes)


def kernel_space(kernel: Kernel) -> dict[str, list]:
    layout = kernel.layout
    if layout == "rnn":
        return {"BLOCK_H": [16, 32, 64, 128], "BLOCK_K": [16, 32, 64], "num_warps": [1, 2, 4, 8]}
    if layout == "attention":
        lq, lk, _, _ = attention_dims(kernel)
        return {"BLOCK_M": [b for b in (16, 32, 64, 128) if b <= max(16, next_pow2(lq))],
                "BLOCK_N": [b for b in (16, 32, 64, 128) if b <= max(16, next_pow2(lk))],
                "num_warps": [2, 4, 8], "num_stages": [1, 2, 3, 4]}
    if layout == "flat":
        return {"BLOCK": [256, 512, 1024, 2048, 4096, 8192], "num_warps": [1, 2, 4, 8, 16], "num_stages": [1],
                "evict": [0, 1, 2]}
    if layout == "plane":
        return {"layout": ["plane", "flat"], "BLOCK_H": [b for b in POW2[:8] if b <= next_pow2(kernel.domain[-2])],
                "BLOCK_W": [b for b in POW2 if 16 <= b <= max(16, min(1024, next_pow2(kernel.domain[-1])))],
                "BLOCK": [256, 1024, 4096], "num_warps": [1, 2, 4, 8], "num_stages": [1], "unaligned": [0, 1],
                "ROWS": [1, 2, 4, 8, 16, 32], **({"VEC": [1, lane_width(kernel)]} if lane_width(kernel) else {}),
                **({"walk": [0, 1]} if walk_window(kernel) else {}), **({"pairs": [0, 1]} if pairs(kernel) else {})}
    if layout == "gemm":
        space = {"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [16, 32, 64, 128, 256], "BLOCK_K": [16, 32, 64, 128],
                 "GROUP_M": [1, 4, 8, 16], "num_warps": [2, 4, 8], "num_stages": [1, 2, 3, 4, 5]}
        if kernel.nodes[0].fn == "conv":  # which axis the tiles walk (implicit_gemm.render_conv)
            space["num_warps"] = [1] + space["num_warps"]  # rows tiles' default: a warp a program
            space["tiles"] = ["channels", "positions"] + ["interleaved"] * bool(interleave_slots(kernel.nodes[0])) \
                + ["rows"] + ["stream"] * streams(kernel.nodes[0])  # in dot steps any convolution takes rows tiles
            space["packed"] = [0, 1]  # 1: the weight copied with its output channels innermost (implicit_gemm)
            space["SAMPLES"] = [1, 2, 4]  # rows tiles: batch elements a program takes (implicit_gemm._render_rows)
            space["parts"] = ["registers", "hand"]  # tf32x3: Triton's split in every tl.dot, or each tile's once
            space["maxnreg"] = [128, 168, 0]  # a cap on a thread's registers, for more programs an SM (0: none)
            space["xlast"] = [0, 1]  # 1: rows tiles read a copy of the input, channels innermost (xlast_fits)
            space["taps"] = [0, 1]  # 1: each dot step BLOCK_K channels of one tap (tap_steps)
        else:
            space["persistent"] = [0, 1]  # 1: split operands (tf32x3) read by TMA, a program per SM (kernels._gemm)
            space["parts"] = ["memory", "registers"]  # tf32x3's operands split once, or each tile at every K step
        if outer_steps(kernel.nodes[0]) or kernel.nodes[0].fn == "conv" and rows_fit(kernel.nodes[0]):
            space["BLOCK_K"] = [1] + space["BLOCK_K"]  # outer products (rows tiles' alone where not outer_steps)
        return space
    o, r, i = sizes(kernel)
    rp = next_pow2(r)
    if layout == "row":
        space = {"mode": (["one_pass"] if rp <= ONE_PASS_MAX else []) + (["looped"] if r > 256 else []),
                 "BLOCK_O": [b for b in POW2[:8] if b <= next_pow2(o)],
                 "BLOCK_R": [b for b in POW2 if 128 <= b <= min(rp, 16384)] or [rp],
                 "num_warps": [1, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3, 4]}
        if splittable(kernel) and r >= 16384:
            space["SPLIT"] = [1, 8, 32, 128, 512, 2048]
            space["GROUP"] = [0] + l2_groups(kernel)
            space["LAG"] = [0, 1]  # 1: the split's two passes in one persistent launch (kernels._lagged)
            space["COOP"] = [0, 1]  # 1: a chunk a program, held in registers across the row's combine (kernels._held)
            # a held split's cap on a thread's registers, for more chunks held an SM (ptxas for sm_90: level 1's
            # 35_GroupNorm_ takes 103 at 4 warps, 4 programs an SM; at 96 none spill (5), at 80 28 bytes (6);
            # on an H200 4.83 ms uncapped, 5.23 at 96, 4.38 at 80, 6.05 at 72)
            space["maxnreg"] = [96, 80, 0]
        if "looped" in space["mode"]:
            space["pipeline"] = [0, 1]  # the chunk loops software-pipelined over num_stages (tl.range)
        if "one_pass" in space["mode"] or "looped" in space["mode"] and looped_passes(kernel, {}) > 1:
            # 1: a looped row's earlier passes evict_last, its last evict_first; a one-pass row loaded evict_last
            # (kernels._reduction)
            space["evict"] = [0, 1]
        if "looped" in space["mode"] and o > SMS:
            space["PERSIST"] = [0, 1, 2]  # SMS x PERSIST programs, each taking blocks of rows in turn
        if "one_pass" in space["mode"] and pair_rows(kernel):
            space["pairs"] = [0, 1]  # a bf16 row held as 32-bit pairs, its values recomputed per stage
        if "looped" in space["mode"] and online_pairs(kernel):  # pass-fusion choices matter only when looping
            space["online"] = [1, 2, 3, 0]  # a max per lane, per chunk, per group of lanes (online_start), off
        if "looped" in space["mode"] and welford_pairs(kernel):
            space["welford"] = [1, 2, 0]  # pivoted sums, per-lane Welford, off (a separate variance pass)
        if "looped" in space["mode"] and _rewrites_row(kernel):
            space["tail_first"] = [1, 0]
        if "looped" in space["mode"] and foldable(kernel):
            space["fold"] = [1, 0]
        return space
    return {"BLOCK_I": [b for b in POW2 if 16 <= b <= max(16, min(1024, next_pow2(i)))],
            "BLOCK_R": [b for b in POW2 if b <= min(256, rp)], "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3],
            **({"SPLIT": [1, 2, 4, 8, 16]} if col_splittable(kernel) else {})}  # kernels._col_split


def online_form(kernel: Kernel) -> int:
    """The online softmax's running max (reductions.online_start) that was fastest on an H200 (session 12): one
    per group of a thread's 16 bytes over 16-bit rows (bf16 cross-entropy over 128k logits 0.173 -> 0.141 ms),
    one per chunk over wider ones (fp32 logsumexp 0.474 -> 0.249 ms; groups of 4 took 0.320)."""
    return 3 if any(m.dtype.itemsize == 2 for m in online_pairs(kernel).values()) else 2


def row_item(kernel: Kernel) -> int:
    """Bytes an element of a row kernel's widest floating-point input (4 where it has none)."""
    return max([a.dtype.itemsize for m in kernel.nodes for a in m.args
                if isinstance(a, Leaf) and a.kind == "tensor" and a.dtype.is_floating_point] or [4])


def l2_groups(kernel: Kernel) -> list[int]:
    """Rows per launch of a split (GROUP) whose rows take a quarter to half of L2, so the combining kernel's
    second read of a group's rows comes from L2; none where all rows fit already."""
    o, r, _ = sizes(kernel)
    return [g for g in POW2 if g < o and L2_BYTES // 4 <= g * r * row_item(kernel) <= L2_BYTES // 2]


def persistent(kernel: Kernel, p: dict, space: dict) -> dict:
    """Persistent programs (k per SM, the most whose rows in flight, at 4 bytes an element, fit L2) with warps
    and chunks enough to keep bytes in flight; {} where rows that many do not fit or `p` is already persistent.
    On an H200, L1 and L2 normalization over 32768 rows of 65535 went from 7.6 to 6.3 ms this way (k = 1, 32
    warps, 16384-wide chunks, against 8 warps and 4096), 1.87x to 1.54x the floor; but the same warps and
    chunks with a program per row took 5.39 ms (session 11), so where k = 1 the default takes those alone
    (PERSIST 0) and rowwise.variants tries the persistent form second. At k = 2 (16 warps, 8192) persistence
    helped: 6.11 ms, against 6.46 with a program per row; the default keeps it there."""
    row_bytes = 4 * sizes(kernel)[1] * p.get("BLOCK_O", 1)
    k = max((k for k in space.get("PERSIST", []) if k and k * SMS * row_bytes <= L2_BYTES), default=0)
    if not k or p.get("PERSIST") or p.get("SPLIT", 1) > 1:
        return {}
    warps = max(space["num_warps"]) // k
    return {"mode": "looped", "PERSIST": k, "num_warps": warps, "BLOCK_R": min(max(space["BLOCK_R"]), 512 * warps)}


def _rewrites_row(kernel: Kernel) -> bool:
    """A looped row kernel that writes the whole row after its reductions (softmax, norms): its last pass
    may walk the row from the end (`tail_first`), re-reading first what the previous pass left in L2."""
    return kernel.scan_reverse is None and kernel.writes_elements \
        and any(m.op == "reduce" for m in kernel.nodes)


PER_THREAD = 64  # tile elements per thread: beyond this, registers spill and compile times explode
# A one-pass row keeps only the row and one temporary live: measured on an H200, a 16384-wide softmax row
# over 4 warps (128 elements a thread, 168 registers, no spills) beat 8, 16 and 32 warps by 20-25%.
PER_THREAD_ROW = 128


def _stream_invalid(kernel: Kernel, p: dict) -> str | None:
    """Why a convolution cannot take streamed tiles (implicit_gemm._render_stream) under p, or None."""
    node = kernel.nodes[0]
    if not streams(node) or p.get("shapes", "static") != "static":
        return "stream tiles are for a convolution of one group at stride 1 in fp32, its input contiguous, at " \
               f"most 128 output channels and at least {STREAM_POSITIONS} outputs an image, static shapes; a 1x1 " \
               "one at most 64 input channels (its positions a multiple of 4), one with a window at most " \
               f"{WINDOW_K} (channel, tap) columns whose weight fits a block's shared memory at 3 stages"
    if p.get("BLOCK_M", 64) not in (16, 32, 64, 128, 256) or p.get("BLOCK_K", 16) == 1 or p.get("SAMPLES", 1) > 1:
        return "stream tiles take BLOCK_M a power of two from 16 to 256, dot steps and one sample"
    if p.get("per_sm", 1) not in range(1, MAX_PER_SM + 1):
        return f"stream tiles take 1 to {MAX_PER_SM} programs an SM (per_sm)"
    if p.get("BLOCK_N", 128) < node.shape[1]:
        return "stream tiles hold every output channel: BLOCK_N at least the channels"
    if stream_smem(p, node) > SMEM_BYTES:
        return "the streamed input tiles, the weight and the output tile need more shared memory than a block has"
    if p.get("BLOCK_M", 64) * stream_blocks(node)[1] > 128 * 32 * p.get("num_warps", 4):
        return "the accumulator needs more than 128 registers per thread"
    return None


def kernel_invalid(kernel: Kernel, p: dict) -> str | None:
    """Why a configuration cannot run well (registers, shared memory) or at all, or None."""
    layout = kernel.layout
    threads = 32 * p.get("num_warps", 4)
    tile = {"flat": p.get("BLOCK", 1024), "plane": p.get("BLOCK_H", 8) * p.get("BLOCK_W", 64),
            "col": p.get("BLOCK_I", 64) * p.get("BLOCK_R", 32)}.get(layout)
    if layout == "plane" and p.get("layout") == "flat":
        tile = p.get("BLOCK", 1024)
    if layout == "row":
        o, r, _ = sizes(kernel)
        width = next_pow2(r) if p.get("mode") == "one_pass" else min(p.get("BLOCK_R", 1024), next_pow2(r))
        tile = min(p.get("BLOCK_O", 1), next_pow2(o)) * width
    per_thread = PER_THREAD_ROW if layout == "row" and p.get("mode") == "one_pass" else PER_THREAD
    if tile is not None and tile > per_thread * threads:
        return f"a tile of {tile} elements over {threads} threads would spill registers"
    if layout == "row":
        o, r, _ = sizes(kernel)
        rp = next_pow2(r)
        if p.get("mode") != "one_pass" and any(n.fn in ("sort", "sort_indices") for n in kernel.nodes):
            return "a sort holds its whole row in one block (mode one_pass)"
        if p.get("mode") == "one_pass" and rp > ONE_PASS_MAX:
            return f"a one-pass row of {r} elements does not fit in registers"
        width = rp if p.get("mode") == "one_pass" else min(p.get("BLOCK_R", 1024), rp)
        if p.get("BLOCK_O", 1) * width > 65536:
            return "the tile holds more than 65536 elements"
        if p.get("SPLIT", 1) > 1 and not splittable(kernel, p):
            return "SPLIT needs row reductions that can share one pass"
        if p.get("SPLIT", 1) > 1 and 2 * math.ceil(r / p["SPLIT"]) < min(p.get("BLOCK_R", 1024), rp):
            return "each split would hold less than half a block"
        if p.get("pipeline") and p.get("num_stages", 1) * p.get("BLOCK_O", 1) * width * 4 > SMEM_BYTES:
            return "the pipelined chunks need more shared memory than a block has"
        if p.get("PERSIST") and p.get("SPLIT", 1) > 1:
            return "PERSIST takes whole rows in turn; it cannot split them"
        if p.get("pairs") and p.get("mode") == "one_pass" and (p.get("SPLIT", 1) > 1 or "EPI_PARTS" in p):
            return "pairs load a whole row once, in one program; a split row is loaded a chunk at a time"
        if p.get("GROUP") and p.get("SPLIT", 1) == 1:
            return "GROUP launches the rows of a split in groups; it needs SPLIT > 1"
        if p.get("LAG") and (p.get("SPLIT", 1) == 1 or p.get("GROUP") or p.get("shapes") == "dynamic"):
            return "LAG runs a split (SPLIT > 1) in one launch: no GROUP, no dynamic shapes"
        if p.get("LAG") and not kernel.writes_elements:
            return "LAG overlaps a split's two passes: it needs a per-element output"
        if p.get("COOP"):
            reason = _held_invalid(kernel, p, r, width)
            if reason:
                return reason
        elif p.get("maxnreg"):
            return "maxnreg caps a held split's registers (COOP 1)"
        if p.get("GROUP") and p["GROUP"] % min(p.get("BLOCK_O", 1), next_pow2(o)):
            return "GROUP must be a multiple of BLOCK_O"
    if layout == "plane" and p.get("BLOCK_H", 8) * p.get("BLOCK_W", 64) > 8192:
        return "the tile holds more than 8192 outputs"
    if layout == "plane" and p.get("walk") and not (walk_window(kernel) and p.get("ROWS", 1) == 1 and
                                                     p.get("layout") != "flat"):
        return "walk takes a plane kernel down a 3-D max or average window's first dim (codegen.walks), a tile " \
               "at a time: ROWS 1"
    if layout == "plane" and p.get("pairs") and (not pairs(kernel) or p.get("VEC", 1) > 1
                                                 or p.get("layout") == "flat"):
        return "pairs takes a window's taps two at a time along rows it steps 2 an output (codegen.pair_window), " \
               "in a plane tile of one output a lane: no VEC, no flat layout"
    if layout == "plane" and p.get("VEC", 1) > 1:
        if not lane_width(kernel) or p["VEC"] > lane_width(kernel):
            return f"VEC takes windows at fixed offsets along 16-byte aligned rows, at most {lane_width(kernel)} a lane"
        if p.get("unaligned") or p.get("layout") == "flat":
            return "VEC loads aligned vectors in a plane tile: no unaligned, no flat layout"
    if layout == "col" and p.get("BLOCK_I", 64) * p.get("BLOCK_R", 32) > 65536:
        return "the tile holds more than 65536 elements"
    if layout == "col" and p.get("SPLIT", 1) > 1:
        if not col_splittable(kernel):
            return "SPLIT splits a column kernel's sums, maxima or minima of its input, with no per-element output"
        if p["SPLIT"] > math.ceil(sizes(kernel)[1] / p.get("BLOCK_R", 32)):
            return "SPLIT gives each program at least BLOCK_R rows of the reduced axis"
    if layout == "gemm":
        inter, rows = p.get("tiles") == "interleaved", p.get("tiles") == "rows"
        if p.get("tiles", "channels") not in ("channels", "positions", "interleaved", "rows", "stream"):
            return "tiles must be channels, positions, interleaved, rows or stream"
        if p.get("tiles") == "stream":
            return _stream_invalid(kernel, p)
        if inter and not interleave_slots(kernel.nodes[0]):
            return "interleaved tiles need a transposed convolution whose last dim is strided"
        if rows and rows_k(kernel.nodes[0], p) == 1 and not rows_fit(kernel.nodes[0]):
            return "rows tiles in outer-product steps (BLOCK_K 1) are for at most 8 input channels a group"
        if p.get("packed") and kernel.nodes[0].fn != "conv":
            return "packed weights are for convolutions"
        if p.get("taps") and not taps_fit(kernel.nodes[0], p):
            return "taps (a K step of one tap's input channels) is for the dot steps of an unphased convolution's " \
                   "channels or positions tiles, its input channels a group a multiple of BLOCK_K"
        if p.get("xlast") and not xlast_fits(kernel.nodes[0], p):
            return "xlast (the input copied with its channels innermost) is for rows tiles in unstacked dot steps " \
                   "over an input read whole, its spatial dims contiguous"
        if p.get("SAMPLES", 1) > 1 and (not rows or kernel.domain[0] % p["SAMPLES"]):
            return f"SAMPLES takes a row of {p['SAMPLES']} batch elements a program: rows tiles, a batch it divides"
        bm, bn, bk = p.get("BLOCK_M", 64), p.get("BLOCK_N", 64), p.get("BLOCK_K", 32)
        if rows:  # the tile a row takes: no wider than the row needs (implicit_gemm.rows_layout)
            _, bm, bn, _ = rows_layout(kernel.nodes[0], p)
        if bk == 1 and not outer_steps(kernel.nodes[0]) and not rows:  # rows tiles: rows_k
            return "outer-product K steps (BLOCK_K 1) are for convolutions over a few input channels"
        # tf32x3 on a matrix product with static shapes: two parts of each operand (split_operands), and a
        # K step's products summed in a second accumulator
        parts = 2 if p.get("precision") == "tf32x3" and kernel.nodes[0].fn != "conv" and \
            p.get("shapes", "static") == "static" and p.get("parts", "memory") == "memory" else 1
        if p.get("parts", "memory") not in ("memory", "registers", "hand"):
            return "parts must be memory, registers or hand"
        if p.get("parts") == "hand" and kernel.nodes[0].fn != "conv":
            return "parts hand (tiles split by the kernel's own lines) is for convolutions"
        if p.get("persistent") and parts == 1:
            return "persistent tiles read a matrix product's operands split in memory: precision tf32x3, parts " \
                   "memory, static shapes"
        staged = bm * bn * 2 if p.get("persistent") else 0  # half an fp32 output tile, by TMA (kernels._stored_by_tma)
        if not rows and max(1, p.get("num_stages", 3)) * (bm * bk + bk * bn) * 4 * parts + staged > SMEM_BYTES:
            return "the pipelined tiles need more shared memory than a block has"
        if rows and rows_smem(kernel.nodes[0], p) > SMEM_BYTES:
            return "the pipelined input and weight tiles of a rows tile's dot steps need more shared memory " \
                   "than a block has: fewer stages, SAMPLES or BLOCK_N"
        slots = interleave_slots(kernel.nodes[0]) if inter else 1  # an accumulator a slot (in a rows tile's BLOCK_M)
        if bm * bn * slots * p.get("SAMPLES", 1) * parts > 128 * 32 * p.get("num_warps", 4):
            return "the accumulator needs more than 128 registers per thread"
    if layout == "attention":
        _, _, d, dv = attention_dims(kernel)
        bm, bn = p.get("BLOCK_M", 64), p.get("BLOCK_N", 64)
        if max(1, p.get("num_stages", 2)) * bn * (d + dv) * 4 > SMEM_BYTES:
            return "the pipelined key and value tiles need more shared memory than a block has"
        if bm * (bn + dv) > 128 * 32 * p.get("num_warps", 4):
            return "the scores and the accumulator need more than 128 registers per thread"
    if p.get("num_warps", 4) not in (1, 2, 4, 8, 16, 32):
        return "num_warps must be a power of two up to 32"
    return None
