"""Row softmax with the whole row held in registers: one read and one write of x.

family: softmax
dtype: float32, float16, bfloat16
arch: any
params: BLOCK_N (next power of two >= n_cols; keep <= 16384, else use softmax_online), num_warps
reads: x [M, N] (any row stride, unit column stride); writes: y [M, N]

Reference (PyTorch):
    y = torch.softmax(x, dim=-1)

One program per row. The row max is subtracted before exp for stability; padding lanes load -inf
so they add exp(-inf) = 0 to the sum. Math is fp32.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr,
                        n_cols,
                        stride_xm, stride_ym,
                        BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax_row(x: torch.Tensor, num_warps: int | None = None) -> torch.Tensor:
    assert x.dim() == 2, "x must be 2-D [rows, cols]"
    if x.stride(1) != 1:
        x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    BLOCK_N = triton.next_power_of_2(n)
    if num_warps is None:
        num_warps = 4 if BLOCK_N <= 2048 else (8 if BLOCK_N <= 8192 else 16)
    grid = lambda meta: (m,)
    _softmax_row_kernel[grid](x, y, n, x.stride(0), y.stride(0), BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y
