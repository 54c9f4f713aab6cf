"""Tiled matmul with a fused epilogue: C = act(A @ B + bias), grouped program order for L2 reuse.

family: matmul
dtype: float32, float16, bfloat16 (fp32 accumulation)
arch: any
params: BLOCK_M, BLOCK_N (32-256), BLOCK_K (16-128), GROUP_M (4-16), ACT (none | relu | gelu_tanh | silu), INPUT_PRECISION (ieee | tf32), num_warps (4-8), num_stages (2-5)
reads: A [M, K], B [K, N] (any strides), bias [N]; writes: C [M, N]

Reference (PyTorch):
    C = torch.relu(A @ B + bias)          # ACT="relu"; torch.nn.Linear is A @ W.T + b: pass B = W.t()

Each program owns one BLOCK_M x BLOCK_N tile of C and walks K in BLOCK_K steps, accumulating in fp32.
Program ids are remapped so that GROUP_M consecutive programs share the same column of B tiles.
For fp32 inputs INPUT_PRECISION="ieee" matches a PyTorch reference that has TF32 off; "tf32" is
faster on tensor-core GPUs but carries about 1e-3 relative error.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _matmul_epilogue_kernel(a_ptr, b_ptr, bias_ptr, c_ptr,
                            M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            HAS_BIAS: tl.constexpr, ACT: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        k_mask = (k + offs_k) < K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if ACT == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACT == "gelu_tanh":
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * u)) - 1.0))
    elif ACT == "silu":
        acc = acc / (1.0 + tl.exp(-acc))
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, act: str = "none",
                    input_precision: str = "ieee", BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 32,
                    GROUP_M: int = 8, num_warps: int = 4, num_stages: int = 3) -> torch.Tensor:
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0], "need A [M, K] and B [K, N]"
    assert a.dtype == b.dtype, "A and B must share a dtype"
    assert bias is None or bias.shape == (b.shape[1],), "bias must have shape [N]"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    _matmul_epilogue_kernel[grid](
        a, b, bias if bias is not None else c, c,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        HAS_BIAS=bias is not None, ACT=act, INPUT_PRECISION=input_precision,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        num_warps=num_warps, num_stages=num_stages)
    return c
