"""Row softmax for rows of any length: an online (running max and rescaled sum) pass, then a write pass.

family: softmax
dtype: float32, float16, bfloat16
arch: any
params: BLOCK_N (1024-8192, power of two), num_warps (4-16)
reads: x [M, N] twice (the second read usually hits L2); writes: y [M, N]

Reference (PyTorch):
    y = torch.softmax(x, dim=-1)

Pass 1 keeps, per lane, a running maximum m and a sum s of exp(x - m); when m grows, s is rescaled by
exp(m_old - m_new). The lanes are combined once at the end. Pass 2 recomputes exp(x - m) / s.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_online_kernel(x_ptr, y_ptr,
                           n_cols,
                           stride_xm, stride_ym,
                           BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes still at -inf would give exp(-inf - -inf) = nan: keep their scale at 0 instead
        scale = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(m_new == -float("inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - m_row)), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - m_row) / s_row
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax_online(x: torch.Tensor, BLOCK_N: int = 4096, num_warps: int = 8) -> torch.Tensor:
    assert x.dim() == 2, "x must be 2-D [rows, cols]"
    if x.stride(1) != 1:
        x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    BLOCK_N = min(BLOCK_N, triton.next_power_of_2(n))
    grid = lambda meta: (m,)
    _softmax_online_kernel[grid](x, y, n, x.stride(0), y.stride(0), BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y
