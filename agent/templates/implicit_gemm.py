"""Implicit-GEMM convolution: any convolution (1-, 2- or 3-D; grouped, strided, padded, dilated; transposed)
as a GEMM whose rows are output positions (M = batch x output spatial size), whose columns are the output
channels of one group (N), and whose reduction runs over the group's input channels times the kernel window
(K). Each K step gathers its tile of the input straight from memory, with the taps that fall in the padding
(or, when transposed, between the strided inputs) masked to zero, so no im2col buffer is ever written.
Programs: M x N tiles in GROUP_M order along axis 0, one group per program along axis 1. The epilogue (bias,
activations, residual adds) runs on the fp32 accumulator, as in the matrix-product kernel.

    batch, m, n, k = gemm_dims(node)   # a matrix-product node or a convolution node
    code = render_conv(kernel, "_gemm_kernel0", {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32, ...})
"""
from __future__ import annotations

import math

from agent.templates.codegen import Gen, KernelCode, Launch, dot_cast, kernel_header, next_pow2, store_lines
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


def _input_taps(attrs: dict, in_sizes: tuple) -> tuple[list[str], list[str]]:
    """Per spatial dim, the input coordinate each (output position, tap) reads, and when it is valid."""
    lines, conds = [], []
    for i, size in enumerate(in_sizes):
        s, pad, d = attrs["stride"][i], attrs["padding"][i], attrs["dilation"][i]
        tap = f"kw{i}[None, :]" if d == 1 else f"kw{i}[None, :] * {d}"
        if not attrs["transposed"]:  # input = output * stride - pad + tap * dilation
            pos = f"o{i}[:, None]" if s == 1 else f"o{i}[:, None] * {s}"
            lines.append(f"i{i} = {pos} + {tap}" + (f" - {pad}" if pad else ""))
            if pad:  # without padding every tap of a valid output lies inside the input
                conds += [f"(i{i} >= 0)", f"(i{i} < {size})"]
            continue
        # transposed: output = input * stride - pad + tap * dilation, so input = (output + pad - tap * d) / s
        lines.append(f"t{i} = o{i}[:, None] + {pad} - {tap}" if pad else f"t{i} = o{i}[:, None] - {tap}")
        if s == 1:
            lines.append(f"i{i} = t{i}")
            conds += [f"(t{i} >= 0)", f"(t{i} < {size})"]
        else:
            lines += [f"c{i} = tl.maximum(t{i}, 0)", f"i{i} = c{i} // {s}"]
            conds += [f"(t{i} >= 0)", f"(c{i} % {s} == 0)", f"(i{i} < {size})"]
    return lines, conds


def render_conv(kernel: Kernel, name: str, p: dict) -> KernelCode:
    gen = Gen(kernel, name, p)
    g = kernel.nodes[0]
    x, w = g.args
    attrs = g.attrs
    groups, M, N, K = gemm_dims(g)
    spatial, window = kernel.domain[2:], tuple(w.shape[2:])
    taps, cin_g = math.prod(window), x.shape[1] // groups
    bm, bn, bk = (min(p.get(key, 64), max(16, next_pow2(dim))) for key, dim in
                  (("BLOCK_M", M), ("BLOCK_N", N), ("BLOCK_K", K)))
    sx, sw = x.strides, w.strides
    big = ".to(tl.int64)" if gen.big else ""
    xp, wp = gen.ptr(x.base), gen.ptr(w.base)
    lines = ["pid = tl.program_id(0)", f"num_m = tl.cdiv({M}, BLOCK_M)", f"num_n = tl.cdiv({N}, BLOCK_N)",
             "width = GROUP_M * num_n", "first_m = (pid // width) * GROUP_M",
             "gsize = tl.minimum(num_m - first_m, GROUP_M)", "pid_m = first_m + (pid % width) % gsize",
             "pid_n = (pid % width) // gsize", f"pid_g = tl.program_id(1){big}",
             f"rm1 = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){big}",
             f"rn1 = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){big}", f"rk = tl.arange(0, BLOCK_K){big}"]
    lines += _split_index("rm1", (kernel.domain[0],) + tuple(spatial), "q")  # q0: batch, q1..: output position
    lines += [f"o{i} = q{i + 1}" for i in range(len(spatial))]
    lines.append(f"x_row = {xp} + {x.offset} + q0 * {sx[0]} + pid_g * {cin_g * sx[1]}")
    if attrs["transposed"]:  # weight (C_in, C_out / groups, *window)
        lines.append(f"w_col = {wp} + {w.offset} + pid_g * {cin_g * sw[0]} + rn1 * {sw[1]}")
        ci_stride = sw[0]
    else:  # weight (C_out, C_in / groups, *window)
        lines.append(f"w_col = {wp} + {w.offset} + (pid_g * {N} + rn1) * {sw[0]}")
        ci_stride = sw[1]
    tap_lines, conds = _input_taps(attrs, tuple(x.shape[2:]))
    body = ["kk = k0 + rk", f"ci = kk // {taps}" if taps > 1 else "ci = kk"]
    if taps > 1:
        body += _split_index(f"(kk % {taps})", window, "kw")
    else:
        body += [f"kw{i} = kk * 0" for i in range(len(window))]
    body += tap_lines
    a_off = " + ".join([f"ci[None, :] * {sx[1]}"] + [f"i{i} * {sx[2 + i]}" for i in range(len(spatial))])
    b_off = " + ".join([f"ci[:, None] * {ci_stride}"] + [f"kw{i}[:, None] * {sw[2 + i]}" for i in range(len(window))])
    a_mask = " & ".join([f"(rm1[:, None] < {M})", f"(kk[None, :] < {K})"] + conds)
    precision, cast = p.get("precision", "ieee"), dot_cast(x, w, p.get("operands", "input"))
    body += [f"ta = tl.load(x_row[:, None] + {a_off}, mask={a_mask}, other=0.0){cast}",
             f"tb = tl.load(w_col[None, :] + {b_off}, mask=(kk[:, None] < {K}) & (rn1[None, :] < {N}), "
             f"other=0.0){cast}",
             f'acc += tl.dot(ta, tb, input_precision="{precision}")']
    lines += ["acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", f"for k0 in range(0, {K}, BLOCK_K):"]
    lines += ["    " + line for line in body]
    lines += ["rm = rm1[:, None]", f"rn = pid_g * {N} + rn1[None, :]", f"mask = (rm < {M}) & (rn1[None, :] < {N})"]
    rank = len(kernel.domain)
    gen.groups = [([0] + list(range(2, rank)), "rm"), ([1], "rn")]
    gen.top.lines += lines
    gen.top.cache[g] = "acc"
    gen.kinds[g] = "f"
    store_lines(gen, list(kernel.stores.items()))
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"]
    src = kernel_header(name, gen, meta) + ["    " + line for line in gen.top.lines]
    grid = (math.ceil(M / bm) * math.ceil(N / bn), groups)
    launch = Launch(name, grid, list(gen.ptrs), {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                                                 "GROUP_M": p.get("GROUP_M", 8)}, p.get("num_warps", 4),
                    p.get("num_stages", 3))
    return KernelCode("\n".join(src), [launch])
