"""Triton candidate for 12_sum_dim1.py: sum over the middle axis of a (batch, dim1, dim2) tensor.

Program p handles one batch index and BLOCK_I consecutive inner (dim2) positions. It walks the
reduced axis in steps of BLOCK_R, adding (BLOCK_R, BLOCK_I) tiles into a register accumulator whose
rows are summed once at the end. Loads are contiguous along dim2 (the fastest-moving axis), so
every read is coalesced; the input is read exactly once.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK_I = 64  # widest inner tile of one program
TILE_ELEMS = 8192  # BLOCK_R * BLOCK_I: elements loaded per step
NUM_WARPS = 8


class Model(nn.Module):
    """The task's reference, copied so that ModelNew has the same constructor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1, keepdim=True)


@triton.jit
def sum_middle_kernel(
    x_ptr, y_ptr,  # pointers
    n_reduce, n_inner, n_inner_blocks,  # sizes
    stride_xb, stride_xr, stride_xi, stride_yb, stride_yi,  # strides
    BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // n_inner_blocks).to(tl.int64)
    offs_i = (pid % n_inner_blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    offs_r = tl.arange(0, BLOCK_R)
    mask_i = offs_i < n_inner
    x_base = x_ptr + b * stride_xb + offs_i[None, :] * stride_xi
    acc = tl.zeros([BLOCK_R, BLOCK_I], dtype=tl.float32)
    for start in range(0, n_reduce, BLOCK_R):
        r = start + offs_r
        mask = (r[:, None] < n_reduce) & mask_i[None, :]
        acc += tl.load(x_base + r[:, None].to(tl.int64) * stride_xr, mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + b * stride_yb + offs_i * stride_yi, total.to(y_ptr.dtype.element_ty), mask=mask_i)


def sum_dim1(x: torch.Tensor) -> torch.Tensor:
    assert x.dim() == 3, x.shape
    n_batch, n_reduce, n_inner = x.shape
    y = torch.empty((n_batch, 1, n_inner), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    block_i = min(MAX_BLOCK_I, triton.next_power_of_2(n_inner))
    block_r = max(2, min(triton.next_power_of_2(n_reduce), TILE_ELEMS // block_i))
    n_inner_blocks = triton.cdiv(n_inner, block_i)
    grid = lambda meta: (n_batch * n_inner_blocks,)
    sum_middle_kernel[grid](
        x, y,
        n_reduce, n_inner, n_inner_blocks,
        x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(2),
        BLOCK_R=block_r, BLOCK_I=block_i, num_warps=NUM_WARPS,
    )
    return y


class ModelNew(Model):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_dim1(x)
