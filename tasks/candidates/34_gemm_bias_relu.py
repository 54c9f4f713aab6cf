"""Triton candidate for 34_gemm_bias_relu.py: y = relu(x @ W^T + b), bias and ReLU fused into the GEMM.

A tiled matmul: program p owns a BLOCK_M x BLOCK_N tile of y and walks K in BLOCK_K steps, with
tl.dot in IEEE fp32 (no TF32, to match the fp32 reference). Programs are ordered in groups of
GROUP_M tile-rows so that neighbouring programs reuse the same x rows and W columns from L2.
The epilogue adds the bias and clamps at zero before the single store: y is written once.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Measured on an H200 at the task's size (8192 x 2048 x 4093): 5.7 ms, against 2.8 ms for cuBLAS's fp32
# SGEMM; Triton lowers an IEEE fp32 tl.dot to CUDA-core FMAs, where cuBLAS's hand-tuned SGEMM is stronger.
BLOCK_M = 128
BLOCK_N = 256
BLOCK_K = 16
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3


class Model(nn.Module):
    """The task's reference, copied so that ModelNew builds the same parameters."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


@triton.jit
def linear_bias_relu_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,  # pointers
    M, N, K,  # sizes
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,  # strides
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    n_tiles_m = tl.cdiv(M, BLOCK_M)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M tile-rows are swept column by column before moving down.
    tiles_per_group = GROUP_M * n_tiles_n
    first_m = (pid // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(n_tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    # W is (N, K); read it as its transpose, a (BLOCK_K, BLOCK_N) tile.
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(x_ptrs, mask=mask_m[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_ok[:, None] & mask_n[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def linear_bias_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    assert x.dim() == 2 and weight.dim() == 2 and bias.dim() == 1, (x.shape, weight.shape, bias.shape)
    M, K = x.shape
    N, K_w = weight.shape
    assert K == K_w and bias.shape[0] == N, (x.shape, weight.shape, bias.shape)
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    linear_bias_relu_kernel[grid](
        x, weight, bias, y,
        M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return y


class ModelNew(Model):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_bias_relu(x, self.linear.weight, self.linear.bias.contiguous())
