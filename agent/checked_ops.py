"""Ops whose PyTorch forms check their arguments' values before computing, which a trace cannot follow (the
check reads a tensor as a Python bool), replaced while tracing by the same math without the checks. A kernel
then computes what PyTorch computes for every argument the checks pass; the evaluator runs PyTorch's own op.

    with checked_ops.replaced():
        gm = make_fx(forward)(...)   # torch.cov and torch.corrcoef trace as sums, a product and a division;
                                     # F.gaussian_nll_loss as its math

Functions are replaced at the Python level (a torch-function mode), as PyTorch's are composite ops that call
each other in C++, below a decomposition table."""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def cov(x, correction=1, fweights=None, aweights=None):
    """torch.cov as PyTorch computes it, without its checks that frequency weights are whole and not negative
    and that weights are finite."""
    obs = x.view(1, -1) if x.dim() < 2 else x
    w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    w_sum = torch.sum(w) if w is not None else torch.scalar_tensor(obs.shape[1], dtype=torch.int64)
    avg = torch.sum(obs * w if w is not None else obs, [1]) / w_sum
    if w is not None and correction != 0 and aweights is not None:
        norm = w_sum - correction * torch.sum(w * aweights) / w_sum
    else:
        norm = w_sum - correction
    norm = torch.where(norm <= 0, torch.zeros_like(norm), norm)  # PyTorch warns, then divides by zero
    obs = obs - avg.unsqueeze(1)
    return torch.true_divide(torch.mm(obs, (obs * w if w is not None else obs).t()), norm).squeeze()


def corrcoef(x):
    """torch.corrcoef: the covariance over the outer product of the standard deviations, clipped to [-1, 1]."""
    c = cov(x)
    if c.dim() == 0:
        return c / c
    std = torch.sqrt(torch.diagonal(c))
    return torch.clamp(c / std[:, None] / std[None, :], -1, 1)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """F.gaussian_nll_loss without its check that no variance is negative: a variance one dim short of the input
    is one a row, each at least eps, and the loss 0.5 (log var + (input - target)^2 / var), plus 0.5 log(2 pi) when
    full."""
    if isinstance(var, float):
        var = torch.full_like(input, var)
    elif var.shape == input.shape[:-1]:
        var = var.unsqueeze(-1)
    var = torch.clamp(var, min=eps)
    loss = 0.5 * (torch.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


REPLACED = {torch.cov: cov, torch.Tensor.cov: cov, torch.corrcoef: corrcoef, torch.Tensor.corrcoef: corrcoef,
            F.gaussian_nll_loss: gaussian_nll_loss}


class _Replacing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return REPLACED.get(func, func)(*args, **(kwargs or {}))


@contextlib.contextmanager
def replaced():
    """Inside: the functions of REPLACED trace as the math above."""
    with _Replacing():
        yield
