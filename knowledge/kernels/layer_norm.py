"""Layer norm over the last dimension, with optional weight and bias, looping over the row in blocks.

family: norm
dtype: float32, float16, bfloat16
arch: any
params: BLOCK_N (256-8192, power of two), num_warps (4-16)
reads: x [M, N], weight [N], bias [N]; writes: y [M, N]

Reference (PyTorch):
    y = torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)

One program per row, three sweeps: sum -> mean, sum of squared deviations -> variance (the two-pass
form avoids the cancellation of E[x^2] - E[x]^2), then normalize and store. When N <= BLOCK_N every
sweep is one block and the re-reads come from L1/L2. Statistics are fp32; variance is biased (/N).
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr,
                       n_cols, eps,
                       stride_xm, stride_ym,
                       HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    # divided rounding to nearest: a GPU's fp32 `/` is approximate, and a row of equal values would not center to 0
    mean = tl.math.div_rn(tl.sum(acc, axis=0), n_cols.to(tl.float32))
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=mask, other=1.0).to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, BLOCK_N: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    n = x.shape[-1]
    assert weight is None or weight.shape == (n,), "weight must have shape [N]"
    assert bias is None or bias.shape == (n,), "bias must have shape [N]"
    x2 = x.reshape(-1, n)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if BLOCK_N is None:
        BLOCK_N = min(triton.next_power_of_2(n), 4096)
    if num_warps is None:
        num_warps = 4 if BLOCK_N <= 1024 else 8
    grid = lambda meta: (m,)
    _layer_norm_kernel[grid](x2, weight if weight is not None else x2, bias if bias is not None else x2, y,
                             n, eps, x2.stride(0), y.stride(0),
                             HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
                             BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y.reshape(x.shape)
