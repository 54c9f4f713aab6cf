"""Ties in PyTorch's sorts and selections. Where a row holds equal values, the index that torch.sort (unstable),
torch.topk, torch.kthvalue, torch.median or torch.nanmedian returns among them is PyTorch's own choice: it
differs between a CPU and a GPU and between row lengths (a CPU's topk gave [7, 5] for two NaNs at 5 and 7).

    with IndexOrder():
        ordered = reference(*inputs)   # every such op breaks its ties by index, as a stable sort does

The evaluator accepts a candidate's index outputs where they are PyTorch's, or where they are those of the
reference run under IndexOrder (tools/verify.judge): the one order a kernel can give on every device. The
values these ops return are the same under either order."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
TIE_OPS = {"sort", "topk", "kthvalue", "median", "nanmedian"}  # op_base names whose indices order ties freely


def _sorted(x: torch.Tensor, dim: int = -1, descending: bool = False):
    return aten.sort.stable(x, stable=True, dim=dim, descending=descending)


def _at(pair, dim: int, at: torch.Tensor, keepdim: bool):
    """Each row's element at position `at` (a tensor of size 1 along dim) of a sorted (values, indices)."""
    values, indices = (torch.gather(t, dim, at) for t in pair)
    return (values, indices) if keepdim else (values.squeeze(dim), indices.squeeze(dim))


def _topk(x, k, dim=-1, largest=True, sorted=True):
    """The first k of a stable sort: NaN ranks above every value, as in torch.topk. Unsorted (sorted=False),
    in this order too, one of those PyTorch may give."""
    return tuple(t.narrow(dim, 0, k) for t in _sorted(x, dim, largest))


def _row(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Positions along dim, as a tensor of size 1 there (for torch.gather)."""
    shape = list(x.shape)
    shape[dim] = 1
    return torch.zeros(shape, dtype=torch.long, device=x.device)


def _kthvalue(x, k, dim=-1, keepdim=False):
    return _at(_sorted(x, dim), dim, _row(x, dim) + (k - 1), keepdim)


def _median(x, dim, keepdim=False):
    """The lower middle; in a row that holds NaN, its first NaN (NaNs sort last, in index order)."""
    n, nans = x.shape[dim], torch.isnan(x).sum(dim, keepdim=True)
    at = torch.where(nans > 0, n - nans, (n - 1) // 2 + _row(x, dim))
    return _at(_sorted(x, dim), dim, at, keepdim)


def _nanmedian(x, dim, keepdim=False):
    """The lower middle of a row's values other than NaN; a row of NaNs only gives its first."""
    count = (~torch.isnan(x)).sum(dim, keepdim=True)
    return _at(_sorted(x, dim), dim, torch.clamp((count - 1) // 2, min=0), keepdim)


RULES = {aten.sort.default: _sorted, aten.topk.default: _topk, aten.kthvalue.default: _kthvalue,
         aten.median.dim: _median, aten.nanmedian.dim: _nanmedian}


class IndexOrder(TorchDispatchMode):
    """While active, the ops of RULES break ties by index (a 0-dim input has none); every other op runs as it
    is."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rule = RULES.get(func)
        return (rule if rule and args[0].dim() else func)(*args, **(kwargs or {}))
