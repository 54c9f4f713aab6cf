"""Inclusive prefix sum along the last dimension, looping over long rows with a running carry.

family: scan
dtype: float32, float16, bfloat16 (fp32 carry)
arch: any
params: BLOCK_N (256-4096, power of two), num_warps (4-8)
reads: x [M, N]; writes: y [M, N]

Reference (PyTorch):
    y = torch.cumsum(x, dim=-1)

One program per row. Each block is scanned in registers with tl.cumsum, the carry (the sum of all
earlier blocks) is added, and the block total becomes the next carry. Rows are independent, so no
inter-program communication is needed; for a single very long row, see the scans playbook.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_row_kernel(x_ptr, y_ptr,
                       n_cols,
                       stride_xm, stride_ym,
                       BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    carry = tl.zeros((1,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=0) + carry
        tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


def cumsum_row(x: torch.Tensor, BLOCK_N: int | None = None, num_warps: int = 4) -> torch.Tensor:
    assert x.dim() == 2, "x must be 2-D [rows, cols]"
    if x.stride(1) != 1:
        x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if BLOCK_N is None:
        BLOCK_N = min(triton.next_power_of_2(n), 1024)
    grid = lambda meta: (m,)
    _cumsum_row_kernel[grid](x, y, n, x.stride(0), y.stride(0), BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y
