"""Fused add + activation over two same-shape tensors: y = act(a + b), one pass over memory.

family: elementwise
dtype: float32, float16, bfloat16
arch: any
params: BLOCK_SIZE (512-4096, power of two), ACT (none | relu | gelu_tanh | silu | sigmoid), num_warps (4-8)
reads: a, b (n elements each); writes: y (n elements). Bytes moved: 3 * n * element size.

Reference (PyTorch):
    y = torch.nn.functional.gelu(a + b, approximate="tanh")   # for ACT="gelu_tanh"

Math runs in fp32 in registers whatever the storage dtype; the result is cast back on store.
Offsets are int64 so tensors past 2**31 elements index correctly.
"""
import torch
import triton
import triton.language as tl

ACTIVATIONS = ("none", "relu", "gelu_tanh", "silu", "sigmoid")


@triton.jit
def _add_act_kernel(a_ptr, b_ptr, y_ptr,
                    n_elements,
                    BLOCK_SIZE: tl.constexpr, ACT: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = a + b
    if ACT == "relu":
        x = tl.maximum(x, 0.0)
    elif ACT == "gelu_tanh":
        # tanh(u) = 2*sigmoid(2u) - 1, written with exp so it needs no libdevice call
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * u)) - 1.0))
    elif ACT == "silu":
        x = x / (1.0 + tl.exp(-x))
    elif ACT == "sigmoid":
        x = 1.0 / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


def add_act(a: torch.Tensor, b: torch.Tensor, act: str = "relu", BLOCK_SIZE: int = 1024,
            num_warps: int = 4) -> torch.Tensor:
    assert a.shape == b.shape and a.dtype == b.dtype, "a and b must have the same shape and dtype"
    assert act in ACTIVATIONS, f"act must be one of {ACTIVATIONS}"
    a, b = a.contiguous(), b.contiguous()
    y = torch.empty_like(a)
    n = a.numel()
    if n == 0:
        return y
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    _add_act_kernel[grid](a, b, y, n, BLOCK_SIZE=BLOCK_SIZE, ACT=act, num_warps=num_warps)
    return y
