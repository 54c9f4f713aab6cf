"""Reduce the last dimension of a 2-D tensor (sum, mean, max or min), several rows per program.

family: reduction
dtype: float32, float16, bfloat16
arch: any
params: BLOCK_M (1-64 rows per program), BLOCK_N (64-4096 columns per step), OP (sum | mean | max | min), num_warps
reads: x [M, N]; writes: y [M] (fp32 accumulation, stored in x's dtype)

Reference (PyTorch):
    y = x.sum(dim=-1)      # OP="sum";  x.mean(-1), x.amax(-1), x.amin(-1) for the others

A [BLOCK_M, BLOCK_N] tile is accumulated elementwise over the columns and reduced across lanes once
at the end. Short rows want a larger BLOCK_M so each program still moves enough bytes; for long rows
use BLOCK_M = 1 and a large BLOCK_N. Reducing a non-last dim: permute it last, or see the playbook.
"""
import torch
import triton
import triton.language as tl

OPS = ("sum", "mean", "max", "min")


@triton.jit
def _row_reduce_kernel(x_ptr, y_ptr,
                       n_rows, n_cols,
                       stride_xm,
                       OP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    if OP == "max":
        acc = tl.full((BLOCK_M, BLOCK_N), -float("inf"), tl.float32)
    elif OP == "min":
        acc = tl.full((BLOCK_M, BLOCK_N), float("inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols[None, :] < n_cols)
        ptrs = x_ptr + rows[:, None] * stride_xm + cols[None, :]
        if OP == "max":
            acc = tl.maximum(acc, tl.load(ptrs, mask=mask, other=-float("inf")).to(tl.float32))
        elif OP == "min":
            acc = tl.minimum(acc, tl.load(ptrs, mask=mask, other=float("inf")).to(tl.float32))
        else:
            acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    if OP == "max":
        out = tl.max(acc, axis=1)
    elif OP == "min":
        out = tl.min(acc, axis=1)
    elif OP == "mean":
        out = tl.sum(acc, axis=1) / n_cols
    else:
        out = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, out.to(y_ptr.dtype.element_ty), mask=row_mask)


def row_reduce(x: torch.Tensor, op: str = "sum", BLOCK_M: int | None = None, BLOCK_N: int | None = None,
               num_warps: int = 4) -> torch.Tensor:
    assert x.dim() == 2, "x must be 2-D [rows, cols]"
    assert op in OPS, f"op must be one of {OPS}"
    if x.stride(1) != 1:
        x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m,), dtype=x.dtype, device=x.device)
    if BLOCK_N is None:
        BLOCK_N = min(triton.next_power_of_2(n), 1024)
    if BLOCK_M is None:
        BLOCK_M = max(1, min(64, 4096 // BLOCK_N))
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]),)
    _row_reduce_kernel[grid](x, y, m, n, x.stride(0), OP=op, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                             num_warps=num_warps)
    return y
