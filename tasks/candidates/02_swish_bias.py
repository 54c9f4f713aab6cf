"""Triton candidate for 02_swish_bias.py: y = x * sigmoid(x) + bias, bias broadcast over rows.

Reads x (rows, dim) and bias (dim,), writes y (rows, dim): one pass over memory. The kernel walks the
flat element index and finds each element's bias as index mod dim. Rows of an odd width do not start
on 16-byte boundaries, so a row-by-row kernel loses vector loads; the flat walk keeps x and y
accesses contiguous and aligned (bias is small and stays in cache).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096  # elements per program
NUM_WARPS = 8
INDEX_64_ABOVE = 2**31 - 1  # element counts above this use 64-bit offsets


class Model(nn.Module):
    """The task's reference, copied so that ModelNew builds the same parameters."""

    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + self.bias


@triton.jit
def swish_bias_kernel(
    x_ptr, bias_ptr, y_ptr,  # pointers (x and y contiguous)
    n_elements, n_cols,  # sizes
    BLOCK: tl.constexpr, INDEX_64: tl.constexpr,
):
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(x) + b
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def swish_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    assert bias.dim() == 1 and x.shape[-1] == bias.shape[0], (x.shape, bias.shape)
    x = x.contiguous()
    bias = bias.contiguous()
    y = torch.empty_like(x)
    n_elements = x.numel()
    if n_elements == 0:
        return y
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK"]),)
    swish_bias_kernel[grid](
        x, bias, y,
        n_elements, x.shape[-1],
        BLOCK=BLOCK, INDEX_64=n_elements > INDEX_64_ABOVE, num_warps=NUM_WARPS,
    )
    return y


class ModelNew(Model):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swish_bias(x, self.bias)
