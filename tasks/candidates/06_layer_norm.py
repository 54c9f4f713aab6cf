"""Triton candidate for 06_layer_norm.py: layer norm over the last axis, with weight and bias.

One program per row. Rows up to ONE_PASS_MAX wide are held in registers: mean, then the variance of
the centered values (two-pass statistics, no E[x^2] - E[x]^2 cancellation), then the output, from a
single read. Wider rows loop over chunks three times (mean, variance, output). The mean divides rounding to
nearest (tl.math.div_rn): a GPU's fp32 `/` is approximate, and a row of equal values (-1e4, a masked row) then got
a mean one unit of roundoff off and outputs of 0.2 where PyTorch's are exactly the bias (an H100, session 72).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

ONE_PASS_MAX = 16384  # widest row held in registers at once
LOOP_BLOCK = 4096  # chunk width of the looped kernel
ROW_WARPS = 4  # warps of the one-pass kernel (measured best on an H200 at 8K-16K wide rows)
LOOP_WARPS = 4


class Model(nn.Module):
    """The task's reference, copied so that ModelNew builds the same parameters."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.bias = nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


@triton.jit
def layer_norm_row_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,  # pointers
    n_cols,  # sizes
    stride_xm, stride_ym,  # strides (the column stride is 1)
    eps,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.math.div_rn(tl.sum(x, axis=0), n_cols.to(tl.float32))
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_looped_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,  # pointers
    n_cols,  # sizes
    stride_xm, stride_ym,  # strides (the column stride is 1)
    eps,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.math.div_rn(tl.sum(acc, axis=0), n_cols.to(tl.float32))
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        acc += xc * xc
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    n_cols = x.shape[-1]
    assert weight.shape == (n_cols,) and bias.shape == (n_cols,), (x.shape, weight.shape, bias.shape)
    x2 = x.contiguous().view(-1, n_cols)
    weight, bias = weight.contiguous(), bias.contiguous()
    y = torch.empty_like(x2)
    n_rows = x2.shape[0]
    if y.numel() == 0:
        return y.view(x.shape)
    grid = lambda meta: (n_rows,)
    if n_cols <= ONE_PASS_MAX:
        block = triton.next_power_of_2(n_cols)
        kernel, num_warps = layer_norm_row_kernel, ROW_WARPS
    else:
        block = min(LOOP_BLOCK, triton.next_power_of_2(n_cols))
        kernel, num_warps = layer_norm_looped_kernel, LOOP_WARPS
    kernel[grid](
        x2, weight, bias, y,
        n_cols,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_N=block, num_warps=num_warps,
    )
    return y.view(x.shape)


class ModelNew(Model):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)
