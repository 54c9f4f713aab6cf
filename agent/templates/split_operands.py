"""fp32 matrix products on tensor cores at fp32's accuracy (the GEMM template's precision "tf32x3" for a matrix
product with static shapes): each operand is split once, by a kernel of its own, into a TF32 high part and a
TF32 low part (x = hi + lo, to 2^-22 of x), written to scratch buffers with K contiguous (A as [M, K], B as
[N, K]: the layout Hopper's TF32 tensor cores read), padded with zeros to whole tiles and K steps so that the
GEMM loads them without masks (on an H200, level 1's 8_Matmul_with_irregular_shapes_, 8205 x 2949 x 5921,
ran 6.252 ms with masked loads and 3.046 without). Each K step of the GEMM then takes three TF32 products,
lo*hi + hi*lo + hi*hi (lo*lo, 2^-22 of the result, dropped), chained in a zeroed accumulator and added to the
running sum in fp32. A convolution gathers its input tiles, so it cannot split them ahead: its "tf32x3" is
Triton's own, which splits both tiles again in registers at every K step (as does a matrix product under
shapes="dynamic", its sizes unknown until the call).

Why it pays: in fp32 without TF32 a GEMM is held to the FMA units (cuBLAS about 51 TFLOP/s on an H200), and
Triton's in-register split costs more than it saves on a plain GEMM. On an H200 (session 33; 2048 x 8192 x
4096 and 4096^3, the splits' launches included), against cuBLAS in fp32: 1.468 and 1.443 ms against 2.663 and
2.688 (1.8x), Triton's FMA dot 3.04 and 3.03, its in-register tf32x3 3.90 and 3.90; 1024 x 2048 x 768: 0.0721
against 0.0824 (64 x 128 tiles). Error against float64 (relative, in norm): 3.2e-07 and 2.4e-07, where cuBLAS's
own fp32 result is 1.6e-06 and 1.2e-06. Chained into the running sum across K steps instead, the same products
were 60x less accurate (1.9e-05): a tensor core's fp32 accumulation loses bits at every step. A persistent
GEMM (gemm.persistent_pays) reads the parts through TMA descriptors that the forward makes (descriptors).

    source, launches, temps = split_launches("k0", a, b, batched=False, padded=(M, N, K))
"""
from __future__ import annotations

import math

import torch

from agent.templates.codegen import Launch, descriptor_name
from agent.templates.implicit_gemm import gemm_dims
from agent.templates.ir import Leaf

TILE = 64  # a split kernel's program takes TILE x TILE elements
INT32_SPAN = 2**31
SPLIT_INTENSITY = 80  # flops a byte of operand from which splitting the operands once pays (pays)


def pays(node) -> bool:
    """Whether a matrix product has flops enough a byte of its operands to pay for splitting them. The split
    reads each operand once and writes it twice, 3 bytes moved a byte, at 4.27 TB/s; the products then gain
    1 / 51 - 1 / 94 ps a flop (cuBLAS's FMA rate against the split form's, TFLOP/s): about 80 flops a byte.
    On an H200 (session 33, `kernelbench_bench.py --budget 3`) the split form won 1.28-1.94x over torch.compile
    on level 1's 2, 7, 10, 11 and 14-18 (8180 down to 367 flops a byte) and 1.03x on 8_Matmul_with_irregular_
    shapes_ (1716), and lost where a weight is read about once: 6_Matmul_with_large_K_dimension_ (64 flops a
    byte) 1.831 ms against 1.310, level 2's 56_Matmul_Sigmoid_Sum and 59_Matmul_Swish_Scaling (a 4 GB weight,
    64) 5.86 against 5.29."""
    batch, m, n, k = gemm_dims(node)
    return 2 * batch * m * n * k / (4 * batch * (m * k + k * n)) >= SPLIT_INTENSITY


def operand_parts(name: str) -> tuple[str, str, str, str]:
    """The scratch buffers of a GEMM kernel's split operands: A's high and low parts, then B's."""
    return f"{name}_ah", f"{name}_al", f"{name}_bh", f"{name}_bl"


def _split_kernel(kname: str, batch: int, size: tuple[int, int], padded: tuple[int, int],
                  strides: tuple[int, int, int], offset: int, big: bool) -> str:
    """A kernel that splits a [batch, rows, cols] view (`size`; source strides: batch, row, col) into
    contiguous hi and lo of `padded` rows and cols, zeros past the view's own."""
    (rows, cols), (rows_p, cols_p), (sb, sr, sc) = size, padded, strides
    i64 = ".to(tl.int64)" if big else ""
    tiles_c = math.ceil(cols_p / TILE)
    src = " + ".join([f"p0 + {offset}" if offset else "p0"] + ([f"pid_b * {sb}"] if batch > 1 else []) +
                     [f"r * {sr}", f"c * {sc}"])
    return "\n".join([
        "@triton.jit",
        f"def {kname}(p0, p1, p2, TILE: tl.constexpr):",
        f"    pid = tl.program_id(0){i64}"] + ([f"    pid_b = tl.program_id(1){i64}"] if batch > 1 else []) + [
        f"    r = (pid // {tiles_c}) * TILE + tl.arange(0, TILE)[:, None]",
        f"    c = (pid % {tiles_c}) * TILE + tl.arange(0, TILE)[None, :]",
        f"    x = tl.load({src}, mask=(r < {rows}) & (c < {cols}), other=0.0)",
        "    u = x.to(tl.uint32, bitcast=True)",
        "    near = ((u + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # rounded to TF32's 10 bits",
        "    cut = (u & 0xFFFFE000).to(tl.float32, bitcast=True)  # truncated: where rounding overflows",
        "    hi = tl.where(tl.abs(near) == float(\"inf\"), cut, near)",
        "    hi = tl.where(x != x, x, tl.where(tl.abs(x) == float(\"inf\"), 0.0, hi))  # an infinity: all in lo",
        "    lo = x - hi",
        "    near = ((lo.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)",
        "    lo = tl.where(tl.abs(lo) == float(\"inf\"), lo, near)",
        f"    at = {f'pid_b * {rows_p * cols_p} + ' if batch > 1 else ''}r * {cols_p} + c",
        f"    m = (r < {rows_p}) & (c < {cols_p})",
        "    tl.store(p1 + at, hi, mask=m)",
        "    tl.store(p2 + at, lo, mask=m)",
    ])


def split_launches(name: str, a: Leaf, b: Leaf, batched: bool, padded: tuple[int, int, int]
                   ) -> tuple[str, list[Launch], dict]:
    """The split kernels' source, their launches and the four scratch buffers, for a GEMM of a [.., M, K] by
    b [.., K, N] (batched: both with a leading batch dim). The parts are `padded` (M, N, K) to whole tiles and
    K steps, with zeros: the GEMM loads them without masks."""
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    mp, np_, kp = padded
    na, nb = (a.shape[0], b.shape[0]) if batched else (1, 1)
    sa, sb = a.strides, b.strides
    ah, al, bh, bl = operand_parts(name)
    # A as [M, K] (its own strides along M and K), B as [N, K]: N along B's last dim, K along its first
    views = [(a, ah, al, na, M, mp, (sa[0] if batched else 0, sa[-2], sa[-1])),
             (b, bh, bl, nb, N, np_, (sb[0] if batched else 0, sb[-1], sb[-2]))]
    sources, launches, temps = [], [], {}
    for i, (leaf, hi, lo, batch, rows, rows_p, strides) in enumerate(views):
        span = leaf.offset + sum((n - 1) * abs(s) for n, s in zip((batch, rows, K), strides)) + 1
        big = max(span, batch * rows_p * kp) >= INT32_SPAN
        kname = f"{name}_split{i}"
        sources.append(_split_kernel(kname, batch, (rows, K), (rows_p, kp), strides, leaf.offset, big))
        grid = (math.ceil(rows_p / TILE) * math.ceil(kp / TILE),) + ((batch,) if batch > 1 else ())
        launches.append(Launch(kname, grid, [leaf.base, hi, lo], {"TILE": TILE}, 4, 1))
        temps[hi] = temps[lo] = ((batch, rows_p, kp), torch.float32)
    return "\n\n\n".join(sources), launches, temps


def descriptors(name: str, temps: dict, blocks: tuple[int, int, int]) -> list[str]:
    """The forward's lines that make a persistent GEMM's TMA descriptors of its four parts, each over its
    batches' rows as one [batch * rows, K] matrix, in tiles of BLOCK_M (A's parts) or BLOCK_N (B's) by BLOCK_K."""
    bm, bn, bk = blocks
    lines = []
    for i, part in enumerate(operand_parts(name)):
        (batch, rows, k), _ = temps[part]
        lines.append(f"{descriptor_name(part)} = TensorDescriptor({part}, [{batch * rows}, {k}], [{k}, 1], "
                     f"[{bm if i < 2 else bn}, {bk}])")
    return lines


def products(a_tiles: tuple[str, str], b_tiles: tuple[str, str]) -> list[str]:
    """A K step's three TF32 products of split tiles (A's [BLOCK_M, BLOCK_K], B's [BLOCK_N, BLOCK_K]), summed in
    a zeroed accumulator and added to acc in fp32."""
    (a1, a2), (b1, b2) = a_tiles, b_tiles
    return [f'step = tl.dot({a2}, tl.trans({b1}), input_precision="tf32")',
            f'step = tl.dot({a1}, tl.trans({b2}), step, input_precision="tf32")',
            f'step = tl.dot({a1}, tl.trans({b1}), step, input_precision="tf32")',
            "acc += step"]
