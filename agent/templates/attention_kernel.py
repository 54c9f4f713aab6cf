"""Scaled-dot-product attention (agent/attention_ops.py keeps it one node) as one flash-attention kernel:

    out[b, i] = sum_j softmax_j(q[b, i] . k[b, j] * scale + mask[b, i, j]) v[b, j]   (causal: only j <= i)

Each program takes BLOCK_M queries of one batch position (every leading dim: batch, heads) and walks the keys
BLOCK_N at a time with an online softmax: a running maximum and sum per query rescale the fp32 accumulator,
so the scores never reach memory. Head sizes pad to a power of two with masked loads (48 -> 64). The scores
and the accumulator are fp32; 16-bit inputs multiply as such (probabilities cast to the values' type, as
FlashAttention does), or upcast first with `operands="fp32"`; the output rounds once, on the store. A causal
program stops at its last query's diagonal. Keys with fewer heads than the queries (grouped-query attention)
are shared by each group of query heads; a mask (boolean, True keeps; or additive) broadcasts over whatever
dims it lacks. A query that no key may see gives 0 after a safe softmax (SDPA's), NaN after a plain one, as
PyTorch's do.

    code = render_attention(kernel, "_attention_kernel0", {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4})
"""
from __future__ import annotations

import math

import torch

from agent.templates.codegen import KernelCode, Launch, next_pow2
from agent.templates.ir import Leaf
from agent.templates.schedule import Kernel

LOG2E = 1.4426950408889634
FLT_MAX = float(torch.finfo(torch.float32).max)
INT32_MAX = 2**31 - 1


def attention_dims(kernel: Kernel) -> tuple[int, int, int, int]:
    """(queries, keys, padded query/key head size, padded value head size) of an attention kernel."""
    q, k, v = kernel.nodes[0].args[:3]
    return q.shape[-2], k.shape[-2], max(16, next_pow2(q.shape[-1])), max(16, next_pow2(v.shape[-1]))


def _batch_offset(leaf: Leaf, batch: tuple, index: list[str]) -> str:
    """The element offset of `leaf` at the batch position whose per-dim indices are `index` (its leading dims
    right-aligned against `batch`; a dim of size 1 broadcasts, a smaller one is shared by groups of heads)."""
    lead = len(leaf.shape) - 2
    terms = [str(leaf.offset)] if leaf.offset else []
    for j in range(len(batch)):
        d = j - (len(batch) - lead)
        if d < 0 or leaf.shape[d] == 1 or leaf.strides[d] == 0:
            continue
        size = leaf.shape[d]
        i = index[j] if size == batch[j] else f"({index[j]} // {batch[j] // size})"
        terms.append(f"{i} * {leaf.strides[d]}")
    return " + ".join(terms) or "0"


def _digit(flat: str, inner: int, size: int, first: bool) -> str:
    """The index along one leading dim of the flat batch position `flat` (`inner` positions per step)."""
    out = flat if inner == 1 else f"({flat} // {inner})"
    return out if first else f"({out} % {size})"


def _tail_strides(leaf: Leaf) -> tuple:
    """The strides of a leaf's last two dims (0 where it broadcasts, or lacks the dim)."""
    shape = (1, 1) + tuple(leaf.shape)
    strides = (0, 0) + tuple(leaf.strides)
    return tuple(0 if shape[d] == 1 else strides[d] for d in (-2, -1))


def _mask_lines(mask: Leaf) -> list[str]:
    """Applies the mask's tile of this key block to the scores `s` (in log2 units) or to `valid`."""
    sm, sn = _tail_strides(mask)
    load = f"tl.load(m_base + rm[:, None] * {sm} + rn[None, :] * {sn}, mask=inside, other="
    if mask.dtype.is_floating_point:  # a finite mask stays finite in log2 units: torch.finfo(dtype).min there
        # is -inf here otherwise, and a row masked whole by it is PyTorch's uniform average, not nothing seen
        return [f"mv = {load}0.0).to(tl.float32)",
                f'mv = tl.where(mv == float("-inf"), mv, tl.maximum(mv * {LOG2E}, {-FLT_MAX!r}))', "s += mv"]
    return [f"valid = valid & ({load}0) != 0)"]


def _mask_offset(mask: Leaf, batch: tuple, index: list[str], attrs: dict) -> str:
    """The mask's element offset at this batch position. A matched mask (attention_match.py) has leading dims
    of its own (`mask_batch`: (batch, heads) where the kernel's batch is their product), aligned with those."""
    own = tuple(attrs.get("mask_batch", batch))
    if own == batch:
        return _batch_offset(mask, batch, index)
    digits = [_digit("pid_b", math.prod(own[j + 1:]), own[j], j == 0) for j in range(len(own))]
    return _batch_offset(mask, own, digits)


def _source(name: str, kernel: Kernel, p: dict, num_m: int) -> str:
    q, k, v, mask = kernel.nodes[0].args[:4]
    a = kernel.nodes[0].attrs
    lq, lk, _, _ = attention_dims(kernel)
    d, dv = q.shape[-1], v.shape[-1]
    batch = tuple(kernel.domain[:-2])
    big = max(x.offset + sum((n - 1) * abs(s) for n, s in zip(x.shape, x.strides))
              for x in (q, k, v, mask) if x is not None) > INT32_MAX or math.prod(kernel.domain) > INT32_MAX
    i64 = ".to(tl.int64)" if big else ""
    index = [_digit("pid_b", math.prod(batch[j + 1:]), batch[j], j == 0) for j in range(len(batch))]
    (sqm, sqd), (skn, skd), (svn, svd) = (_tail_strides(x) for x in (q, k, v))
    prec = p.get("precision", "ieee")
    up = ".to(tl.float32)" if p.get("operands", "input") == "fp32" else ""
    lines = ["pid = tl.program_id(0)", f"pid_b = (pid // {num_m}){i64}" if num_m > 1 else f"pid_b = pid{i64}",
             f"pid_m = pid % {num_m}" if num_m > 1 else "pid_m = 0",
             f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){i64}", "rd = tl.arange(0, BLOCK_D)",
             "rdv = tl.arange(0, BLOCK_DV)",
             f"q_base = q_ptr + {_batch_offset(q, batch, index)}",
             f"k_base = k_ptr + {_batch_offset(k, batch, index)}",
             f"v_base = v_ptr + {_batch_offset(v, batch, index)}",
             f"qt = tl.load(q_base + rm[:, None] * {sqm} + rd[None, :] * {sqd}, "
             f"mask=(rm[:, None] < {lq}) & (rd[None, :] < {d}), other=0.0){up}",
             *([f"m_base = m_ptr + {_mask_offset(mask, batch, index, a)}"] if mask is not None else []),
             'm_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)',
             "l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)",
             "acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)"]
    end = f"tl.minimum({lk}, (pid_m + 1) * BLOCK_M)" if a["causal"] else f"{lk}"
    body = [f"rn = (n0 + tl.arange(0, BLOCK_N)){i64}",
            f"kt = tl.load(k_base + rn[None, :] * {skn} + rd[:, None] * {skd}, "
            f"mask=(rn[None, :] < {lk}) & (rd[:, None] < {d}), other=0.0){up or '.to(qt.dtype)'}",
            f's = tl.dot(qt, kt, input_precision="{prec}") * {a["scale"] * LOG2E!r}',
            f"inside = (rm[:, None] < {lq}) & (rn[None, :] < {lk})", "valid = inside"]
    if a["causal"]:
        body.append("valid = valid & (rn[None, :] <= rm[:, None])")
    if mask is not None:
        body += _mask_lines(mask)
    body += ['s = tl.where(valid, s, float("-inf"))',
             "m_new = tl.maximum(m_i, tl.max(s, 1))",
             'm_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing to see yet stay at 0',
             "alpha = tl.exp2(m_i - m_use)", "pt = tl.exp2(s - m_use[:, None])",
             "l_i = l_i * alpha + tl.sum(pt, 1)",
             f"vt = tl.load(v_base + rn[:, None] * {svn} + rdv[None, :] * {svd}, "
             f"mask=(rn[:, None] < {lk}) & (rdv[None, :] < {dv}), other=0.0){up}",
             f'acc = acc * alpha[:, None] + tl.dot(pt.to(vt.dtype), vt, input_precision="{prec}")',
             "m_i = m_new"]
    lines += [f"for n0 in range(0, {end}, BLOCK_N):"] + ["    " + b for b in body]
    # a query no key may see: 0 after a safe softmax (SDPA's), NaN (0 / 0) after a plain one, as PyTorch's
    lines += ["out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]" if a.get("safe") else "out = acc / l_i[:, None]",
              f"tl.store(o_ptr + pid_b * {lq * dv} + rm[:, None] * {dv} + rdv[None, :], out, "
              f"mask=(rm[:, None] < {lq}) & (rdv[None, :] < {dv}))"]
    args = ["q_ptr", "k_ptr", "v_ptr"] + (["m_ptr"] if mask is not None else []) + ["o_ptr"]
    args += [f"{m}: tl.constexpr" for m in ("BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_DV")]
    return "\n".join(["@triton.jit", f"def {name}({', '.join(args)}):"] + ["    " + line for line in lines])


def render_attention(kernel: Kernel, name: str, p: dict) -> KernelCode:
    node = kernel.nodes[0]
    q, k, v, mask = node.args[:4]
    lq, lk, d, dv = attention_dims(kernel)
    bm = min(p.get("BLOCK_M", 64), max(16, next_pow2(lq)))
    bn = min(p.get("BLOCK_N", 64), max(16, next_pow2(lk)))
    num_m = math.ceil(lq / bm)
    source = _source(name, kernel, {**p, "BLOCK_M": bm}, num_m)
    args = [q.base, k.base, v.base] + ([mask.base] if mask is not None else []) + [kernel.stores[node]]
    grid = (num_m * math.prod(kernel.domain[:-2]),)
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": d, "BLOCK_DV": dv}
    return KernelCode(source, [Launch(name, grid, args, meta, p.get("num_warps", 4), p.get("num_stages", 2))])
