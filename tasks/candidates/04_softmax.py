"""Triton candidate for 04_softmax.py: softmax over the last axis of a (batch, dim) matrix.

One program per row. Rows up to ONE_PASS_MAX wide are loaded whole into registers (one read, one
write). Wider rows use an online pass (running max and rescaled running sum, kept per lane) followed
by a normalizing pass: two reads, one write.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ONE_PASS_MAX = 16384  # widest row held in registers at once
LOOP_BLOCK = 8192  # chunk width of the looped kernel
ROW_WARPS = 4  # warps of the one-pass kernel (measured best on an H200 at 8K-16K wide rows)
LOOP_WARPS = 16


class Model(nn.Module):
    """The task's reference, copied so that ModelNew has the same constructor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


@triton.jit
def softmax_row_kernel(
    x_ptr, y_ptr,  # pointers
    n_cols,  # sizes
    stride_xm, stride_ym,  # strides (the column stride is 1)
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_looped_kernel(
    x_ptr, y_ptr,  # pointers
    n_cols,  # sizes
    stride_xm, stride_ym,  # strides (the column stride is 1)
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)
    # Per-lane running max and sum. The max starts finite so that lanes that only ever see masked
    # (-inf) values keep exp(m - m_new) = 1 instead of exp(-inf + inf) = nan.
    m = tl.full([BLOCK_N], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    inv_sum = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    assert x.dim() == 2, x.shape
    x = x.contiguous()
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    grid = lambda meta: (n_rows,)
    if n_cols <= ONE_PASS_MAX:
        block = triton.next_power_of_2(n_cols)
        softmax_row_kernel[grid](
            x, y,
            n_cols,
            x.stride(0), y.stride(0),
            BLOCK_N=block, num_warps=ROW_WARPS,
        )
    else:
        block = min(LOOP_BLOCK, triton.next_power_of_2(n_cols))
        softmax_looped_kernel[grid](
            x, y,
            n_cols,
            x.stride(0), y.stride(0),
            BLOCK_N=block, num_warps=LOOP_WARPS,
        )
    return y


class ModelNew(Model):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
