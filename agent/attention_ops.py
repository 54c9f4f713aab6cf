"""Scaled-dot-product attention kept whole in a traced graph, as one custom op
`kernelwright::attention(q, k, v, mask, causal, scale)` that agent/templates lowers to its flash-attention kernel
and agent/analysis counts as attention. Two routes lead there:
- while `kept()` is active, F.scaled_dot_product_attention (what tasks and nn.MultiheadAttention call) is the op
  itself, whatever PyTorch would pick for it: on a CPU trace its math path (3-D inputs, a 3-D mask, a value head
  size unlike the query's) would otherwise arrive as bmm / _safe_softmax / bmm;
- a call PyTorch dispatches on its own (a name imported before tracing) reaches the graph as
  aten._scaled_dot_product_flash_attention_for_cpu, or aten.scaled_dot_product_attention under torch.export:
  DECOMPOSITIONS map both to the op.
Attention with dropout is left to PyTorch (random, so the lowering refuses it).

    with kept():
        gm = make_fx(forward, decomposition_table=DECOMPOSITIONS)(...)   # as agent.analysis.trace does
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

aten = torch.ops.aten
_ORIGINAL = F.scaled_dot_product_attention


def _gqa(q: Tensor, k: Tensor) -> bool:
    """Whether the keys have fewer heads than the queries (grouped-query attention)."""
    return q.dim() > 2 and k.shape[-3] != q.shape[-3]


@torch.library.custom_op("kernelwright::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool, scale: float) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two dims; `mask` is boolean (True keeps) or additive."""
    return _ORIGINAL(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=_gqa(q, k))


@attention.register_fake
def _(q, k, v, mask, causal, scale):
    return q.new_empty(q.shape[:-1] + v.shape[-1:])


def _scale(q: Tensor, scale) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _logsumexp(q, k, mask, causal, scale) -> Tensor:
    """The per-query log-sum-exp of the scores the CPU kernel also returns (traced only where it is used)."""
    if _gqa(q, k):
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    return torch.logsumexp(s.float(), -1)


def flash_for_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if dropout_p > 0:  # random: left as it is, for the lowering to refuse
        return NotImplemented
    scale = _scale(q, scale)
    return attention(q, k, v, attn_mask, is_causal, scale), _logsumexp(q, k, attn_mask, is_causal, scale)


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0:
        return NotImplemented
    return attention(q, k, v, attn_mask, is_causal, _scale(q, scale))


def _routed(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention while kept(): the custom op, or PyTorch's own where dropout applies."""
    if dropout_p > 0:
        return _ORIGINAL(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                         scale=scale, enable_gqa=enable_gqa)
    return attention(query, key, value, attn_mask, is_causal, _scale(query, scale))


@contextlib.contextmanager
def kept():
    """F.scaled_dot_product_attention called inside this block runs as the single custom op above."""
    F.scaled_dot_product_attention = _routed
    try:
        yield
    finally:
        F.scaled_dot_product_attention = _ORIGINAL


DECOMPOSITIONS = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: flash_for_cpu,
    aten.scaled_dot_product_attention.default: sdpa,
}
