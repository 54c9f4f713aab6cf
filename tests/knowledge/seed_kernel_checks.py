"""Checks of every seed kernel against PyTorch at small, irregular shapes, under the Triton interpreter.

Run in its own process with TRITON_INTERPRET=1 (triton must see it before its first import, and other
tests in the same pytest process may already have imported it):

    TRITON_INTERPRET=1 python tests/knowledge/seed_kernel_checks.py [CHECK ...]

Prints one JSON object: check name -> "ok" or the failure. test_seed_kernels.py runs it once.
"""
import importlib.util
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

KERNELS = Path(__file__).resolve().parents[2] / "knowledge" / "kernels"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"seed_{name}", KERNELS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _close(out, ref, tol=1e-5):
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)


def elementwise_act(act):
    a, b = torch.randn(37, 29), torch.randn(37, 29)
    ref = {"none": lambda x: x, "relu": torch.relu, "silu": F.silu, "sigmoid": torch.sigmoid,
           "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[act](a + b)
    _close(_load("elementwise_act").add_act(a, b, act, BLOCK_SIZE=256), ref)


def softmax():
    x = torch.randn(7, 181) * 5
    x[2, :50] = -float("inf")  # masked positions, as attention masks produce
    ref = torch.softmax(x, dim=-1)
    _close(_load("softmax_row").softmax_row(x), ref)
    _close(_load("softmax_online").softmax_online(x, BLOCK_N=64), ref)
    xt = torch.randn(181, 5).t()  # a non-contiguous view
    _close(_load("softmax_row").softmax_row(xt), torch.softmax(xt, -1))


def layer_norm():
    mod = _load("layer_norm")
    x = torch.randn(3, 5, 97) * 3 + 10  # a large mean: the two-pass variance must not cancel
    w, b = torch.randn(97), torch.randn(97)
    _close(mod.layer_norm(x, w, b, BLOCK_N=32), F.layer_norm(x, (97,), w, b, 1e-5), 1e-4)
    _close(mod.layer_norm(x), F.layer_norm(x, (97,)), 1e-4)


def row_reduce(op):
    x = torch.randn(45, 133)
    ref = {"sum": x.sum(-1), "mean": x.mean(-1), "max": x.amax(-1), "min": x.amin(-1)}[op]
    _close(_load("row_reduce").row_reduce(x, op, BLOCK_M=8, BLOCK_N=32), ref, 1e-4)


def matmul_epilogue(act):
    a, w, bias = torch.randn(45, 70), torch.randn(53, 70), torch.randn(53)
    ref = a @ w.t() + bias
    ref = {"none": ref, "relu": torch.relu(ref), "gelu_tanh": F.gelu(ref, approximate="tanh")}[act]
    out = _load("matmul_epilogue").matmul_epilogue(a, w.t(), bias, act=act, BLOCK_M=32, BLOCK_N=32,
                                                   BLOCK_K=16, GROUP_M=2)
    _close(out, ref, 1e-4)


def maxpool2d(k, s, p, d):
    x = torch.randn(2, 3, 13, 11)
    _close(_load("maxpool2d").maxpool2d(x, k, s, p, d, BLOCK=128), F.max_pool2d(x, k, s, p, d))


def cumsum_row():
    x = torch.randn(6, 301)
    _close(_load("cumsum_row").cumsum_row(x, BLOCK_N=64), torch.cumsum(x, -1), 1e-4)


CHECKS = {
    **{f"elementwise_act[{a}]": (elementwise_act, a) for a in ("none", "relu", "gelu_tanh", "silu", "sigmoid")},
    "softmax_row+online": (softmax,),
    "layer_norm": (layer_norm,),
    **{f"row_reduce[{op}]": (row_reduce, op) for op in ("sum", "mean", "max", "min")},
    **{f"matmul_epilogue[{a}]": (matmul_epilogue, a) for a in ("none", "relu", "gelu_tanh")},
    **{f"maxpool2d[{c}]": (maxpool2d, *c) for c in ((3, 2, 1, 1), (2, 2, 0, 1), (3, 1, 1, 2))},
    "cumsum_row": (cumsum_row,),
}


def main(names):
    out = {}
    for name in names or CHECKS:
        fn, *args = CHECKS[name]
        torch.manual_seed(0)
        try:
            fn(*args)
            out[name] = "ok"
        except Exception:
            out[name] = traceback.format_exc(limit=3)[-1500:]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
