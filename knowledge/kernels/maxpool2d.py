"""2-D max pooling over NCHW input with kernel size, stride, padding and dilation; one output per lane.

family: pool
dtype: float32, float16, bfloat16
arch: any
params: KH, KW (window, constexpr: the window loop is unrolled), BLOCK (128-1024 outputs per program), num_warps
reads: x [N, C, H, W] (any strides); writes: y [N, C, OH, OW] contiguous

Reference (PyTorch):
    y = torch.nn.functional.max_pool2d(x, kernel_size, stride, padding, dilation)

OH = floor((H + 2*pad - dil*(KH-1) - 1) / stride) + 1 (same for OW; ceil_mode=False). Out-of-image taps
load -inf, so padding never wins. Each program covers BLOCK consecutive outputs of the flattened
output, so stores are coalesced; window loads are gathers that mostly hit L1/L2 because neighbouring
outputs share input rows.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _maxpool2d_kernel(x_ptr, y_ptr,
                      C, H, W, OH, OW, n_out,
                      stride_xn, stride_xc, stride_xh, stride_xw,
                      stride, pad, dil,
                      KH: tl.constexpr, KW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    ow = offs % OW
    oh = (offs // OW) % OH
    c = (offs // (OW * OH)) % C
    n = offs // (OW * OH * C)
    base = x_ptr + n * stride_xn + c * stride_xc
    best = tl.full((BLOCK,), -float("inf"), tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * stride - pad + kh * dil
        row_ok = mask & (ih >= 0) & (ih < H)
        for kw in tl.static_range(KW):
            iw = ow * stride - pad + kw * dil
            ok = row_ok & (iw >= 0) & (iw < W)
            v = tl.load(base + ih * stride_xh + iw * stride_xw, mask=ok, other=-float("inf"))
            best = tl.maximum(best, v.to(tl.float32))
    tl.store(y_ptr + offs, best.to(y_ptr.dtype.element_ty), mask=mask)


def maxpool2d(x: torch.Tensor, kernel_size: int, stride: int | None = None, padding: int = 0,
              dilation: int = 1, BLOCK: int = 256, num_warps: int = 4) -> torch.Tensor:
    assert x.dim() == 4, "x must be NCHW"
    stride = stride or kernel_size
    assert 2 * padding <= kernel_size, "padding must be at most half the kernel size (as in PyTorch)"
    N, C, H, W = x.shape
    OH = (H + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1
    OW = (W + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1
    y = torch.empty((N, C, OH, OW), dtype=x.dtype, device=x.device)
    n_out = y.numel()
    if n_out == 0:
        return y
    grid = lambda meta: (triton.cdiv(n_out, meta["BLOCK"]),)
    _maxpool2d_kernel[grid](x, y, C, H, W, OH, OW, n_out,
                            x.stride(0), x.stride(1), x.stride(2), x.stride(3),
                            stride, padding, dilation,
                            KH=kernel_size, KW=kernel_size, BLOCK=BLOCK, num_warps=num_warps)
    return y
