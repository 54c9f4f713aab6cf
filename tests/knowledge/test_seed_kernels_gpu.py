"""The seed kernels compiled for a real GPU, at realistic shapes (skipped without CUDA)."""
import importlib.util

import pytest
import torch

from knowledge.corpus import KERNELS_DIR

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _load(name, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    spec = importlib.util.spec_from_file_location(f"seed_gpu_{name}", KERNELS_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_elementwise_and_reductions(dtype, monkeypatch):
    x = torch.randn(1823, 781, device="cuda", dtype=dtype)
    b = torch.randn_like(x)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    out = _load("elementwise_act", monkeypatch).add_act(x, b, "gelu_tanh", BLOCK_SIZE=2048)
    ref = torch.nn.functional.gelu((x + b).float(), approximate="tanh").to(dtype)
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(_load("softmax_row", monkeypatch).softmax_row(x), torch.softmax(x, -1), **tol)
    torch.testing.assert_close(_load("softmax_online", monkeypatch).softmax_online(x, BLOCK_N=256),
                               torch.softmax(x, -1), **tol)
    w, bias = torch.randn(781, device="cuda", dtype=dtype), torch.randn(781, device="cuda", dtype=dtype)
    torch.testing.assert_close(_load("layer_norm", monkeypatch).layer_norm(x, w, bias),
                               torch.nn.functional.layer_norm(x, (781,), w, bias), **tol)
    rr = _load("row_reduce", monkeypatch)
    torch.testing.assert_close(rr.row_reduce(x, "sum"), x.float().sum(-1).to(dtype),
                               atol=1e-3 if dtype == torch.float32 else 0.5, rtol=1e-3)
    torch.testing.assert_close(rr.row_reduce(x, "max"), x.amax(-1))
    torch.testing.assert_close(_load("cumsum_row", monkeypatch).cumsum_row(x.float()),
                               torch.cumsum(x.float(), -1), atol=1e-3, rtol=1e-3)


def test_matmul_epilogue_ieee_matches_fp32(monkeypatch):
    mod = _load("matmul_epilogue", monkeypatch)
    a, w = torch.randn(1823, 781, device="cuda"), torch.randn(517, 781, device="cuda")
    bias = torch.randn(517, device="cuda")
    ref = torch.relu(torch.nn.functional.linear(a.double(), w.double(), bias.double())).float()
    out = mod.matmul_epilogue(a, w.t(), bias, act="relu", input_precision="ieee", BLOCK_K=32)
    torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-4)


def test_matmul_epilogue_bf16(monkeypatch):
    mod = _load("matmul_epilogue", monkeypatch)
    a = torch.randn(1823, 768, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(768, 1031, device="cuda", dtype=torch.bfloat16)
    out = mod.matmul_epilogue(a, b, None, act="silu", BLOCK_K=64, num_warps=8, num_stages=3)
    ref = torch.nn.functional.silu(a.float() @ b.float())
    torch.testing.assert_close(out.float(), ref, atol=0.25, rtol=2e-2)


def test_maxpool2d(monkeypatch):
    mod = _load("maxpool2d", monkeypatch)
    x = torch.randn(8, 61, 57, 43, device="cuda")
    torch.testing.assert_close(mod.maxpool2d(x, 3, 2, 1), torch.nn.functional.max_pool2d(x, 3, 2, 1))
