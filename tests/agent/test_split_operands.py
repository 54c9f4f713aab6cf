"""fp32 matrix products as three TF32 products of operands split once in memory (split_operands.py)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[2]

# The split kernel over special and ordinary values, in the interpreter (its own process: TRITON_INTERPRET
# must be set before triton is imported): what comes back is checked in the test.
SPLIT_VALUES = r"""
import os, sys, tempfile, importlib.util
os.environ["TRITON_INTERPRET"] = "1"
import torch
from agent.templates.ir import Leaf
from agent.templates.split_operands import split_launches
x = torch.tensor([[1.0, 1.0 + 2**-12, -(1.0 + 3 * 2**-12), 3.4028235e38, -3.4e38, float("inf"), float("-inf"),
                   float("nan"), 1e-40, 0.0, -0.0, 0.1, -7.3e-12, 123456.789, 2**-126, 5e-30]] * 3)
a = Leaf("a", tuple(x.shape), torch.float32, base="x", strides=x.stride())
b = Leaf("b", (x.shape[1], x.shape[0]), torch.float32, base="x", strides=(1, x.shape[1]))  # x.t(): its [N, K] is x
source, launches, temps = split_launches("k", a, b, batched=False, padded=(4, 8, 32))
path = os.path.join(tempfile.mkdtemp(), "split.py")
open(path, "w").write("import triton\nimport triton.language as tl\n\n\n" + source)
spec = importlib.util.spec_from_file_location("split", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
bufs = {"x": x, **{name: torch.empty(shape) for name, (shape, dtype) in temps.items()}}
for launch in launches:
    getattr(mod, launch.kernel)[launch.grid](*[bufs[arg] for arg in launch.args], **launch.meta)
torch.save({"x": x, **bufs}, sys.argv[1])
"""


def test_the_parts_are_tf32_values_that_sum_to_the_operand(tmp_path):
    """The parts are padded with zeros to whole tiles and K steps. hi keeps x's top 11 bits (rounded; truncated where rounding would overflow to infinity), lo the rest
    rounded to 11 bits: both have their low 13 bits zero (a TF32 product reads no others), hi + lo is x to
    2^-22 of it, an infinity splits into 0 and itself (so that no part of it meets a low part of 0), and a NaN
    stays a NaN. A value far below
    1 (here under 2^-100, 1e-40 among them) may keep fewer bits: its lo is a subnormal number."""
    import torch

    out = tmp_path / "parts.pt"
    done = subprocess.run([sys.executable, "-c", SPLIT_VALUES, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    parts = torch.load(out)
    x = parts["x"][0]
    for part in ("k_ah", "k_al", "k_bh", "k_bl"):  # padded to 4 (A) or 8 (B) rows of 32 with zeros
        padding = torch.ones_like(parts[part], dtype=torch.bool)
        padding[0, :3, :16] = False
        assert parts[part].shape[1:] == ((4, 32) if part[2] == "a" else (8, 32)) and not parts[part][padding].any()
    for hi, lo in ((parts["k_ah"][0, 0, :16], parts["k_al"][0, 0, :16]),
                   (parts["k_bh"][0, 0, :16], parts["k_bl"][0, 0, :16])):
        finite = torch.isfinite(x)
        assert torch.equal(hi.view(torch.int32)[finite] & 0x1FFF, torch.zeros_like(hi[finite], dtype=torch.int32))
        assert torch.equal(lo.view(torch.int32) & 0x1FFF, torch.zeros_like(lo, dtype=torch.int32))
        normal = finite & (x.abs() >= 2**-100) | (x == 0)
        exact = x.double()[normal]
        assert ((hi.double() + lo.double())[normal] - exact).abs().le(exact.abs() * 2**-22).all()
        assert (lo.double().abs()[normal] <= exact.abs() * 2**-10).all()  # 2^-11 where rounded
        assert hi[5] == 0 and hi[6] == 0 and lo[5] == float("inf") and lo[6] == float("-inf")
        assert torch.isnan(hi[7])
        assert torch.isfinite(hi[3]) and torch.isfinite(lo[3])  # FLT_MAX: rounding it up would overflow


def test_products_of_infinities_split_into_parts_are_pytorch_s(runner):
    """An infinite operand split as inf + (inf - inf) made every product it met NaN, and as inf + 0 a NaN where it
    met a weight TF32 holds exactly (inf * 0 in hi * lo): a finite result after it (a tanh, a minimum) was NaN.
    Both the convolution's parts split in registers and the GEMM's split once in memory (asked for: at these
    sizes its flops a byte would split its tiles in registers)."""
    from test_templates import check

    source = check("split_inf", "gemm", {"precision": "tf32x3", "kernels": {"2": {"parts": "memory"}}}, runner)
    assert "tah = " in source and "_split0[(" in source


@pytest.mark.parametrize("shapes, precision", [
    ({"m": 4096, "k": 4096, "n": 4096}, "tf32x3"),  # 1024 flops a byte of operand
    ({"m": 1024, "k": 2048, "n": 768}, "tf32x3"),  # 219, and 64 x 128 tiles: 48 of 128 x 128 for 132 SMs
    ({"m": 256, "k": 524288, "n": 256}, "ieee"),  # 64: the split would move more than the products save, and
    # 4 tiles split 16 ways leave half the SMs idle for tiles split in registers
    ({"m": 128, "k": 16384, "n": 16384}, "tf32x3"),  # 64, a weight read once: its tiles split in registers
])
def test_fp32_products_split_their_operands_where_their_flops_a_byte_pay_for_it(shapes, precision):
    d = BY_NAME["gemm"].default(analyze(str(FIXTURES / "split_mm_ragged.py"), small=False, shapes=shapes))
    assert d["precision"] == precision
    assert d.get("parts", "memory") == ("registers" if shapes["m"] == 128 else "memory")
    assert d["impl"] == ("triton" if precision == "tf32x3" else "torch")  # else the vendor's, under the epilogue
    assert (d["BLOCK_M"], d["num_warps"]) == ((64, 4) if shapes["m"] == 1024 else (128, 8))
    assert d.get("persistent", 0) == (shapes["m"] == 4096)  # 1024 tiles: eight waves of 132 SMs; 96 under one


@pytest.mark.parametrize("task, params", [
    ("split_mm_ragged", {}),  # 37 x 45 x 29, A read through its transpose: every tile ragged
    ("split_mm_ragged", {"BLOCK_K": 16, "SPLIT_K": 2}),  # two K chunks, the last one short
    ("tpl_bmm", {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),  # batched, B given transposed
    ("split_mm_ragged", {"persistent": 1, "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),  # TMA, ragged tiles
    ("split_bmm_many_tiles", {"persistent": 1, "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),  # 150 tiles, 132
])
def test_fp32_products_split_their_operands_once_and_match_the_reference(task, params, runner):
    from test_templates import check

    source = check(task, "gemm", {**params, "precision": "tf32x3"}, runner)
    assert source.count("_gemm_kernel0_split0[(") == 1 and source.count("_gemm_kernel0_split1[(") == 1
    gemm = source[source.index("def _gemm_kernel0("):]
    assert len(re.findall(r'tl\.dot\([^\n]*input_precision="tf32"\)', gemm)) == 3 and "tf32x3" not in gemm
    assert "acc += step" in gemm
    assert all("mask" not in line for line in gemm.splitlines() if "_ptrs)" in line)  # padded parts
    if params.get("persistent"):  # a program an SM, each taking tiles in turn, its parts read by descriptors
        k_loop = gemm[gemm.index("for k0"):gemm.index("acc += step")]
        assert source.count("TensorDescriptor(_gemm_kernel0_") == 4 and k_loop.count(".load([") == 4
        assert "tl.load(" not in k_loop
        assert re.search(r"_gemm_kernel0\[\(\d+, 1, 1\)\]", source) and "PROGRAMS=" in source


TMA_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn({n}))

    def forward(self, x, y):
        return {body}


def get_inputs():
    return [torch.randn({x}), torch.randn({y})]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body, x, y, n, tma", [
    ("torch.relu(x @ y)", "790, 24", "24, 48", 48, True),  # 150 tiles for 132 programs, the last row of tiles ragged
    ("torch.relu(torch.bmm(x, y))", "3, 64, 24", "3, 24, 48", 48, True),  # batches of whole tiles
    ("torch.relu(torch.bmm(x, y))", "3, 70, 24", "3, 24, 48", 48, False),  # a tile across two batches
    ("torch.relu(x @ y)", "70, 24", "24, 46", 46, False),  # rows of 184 bytes, not a multiple of 16
    ("torch.relu(x @ y)", "70, 144", "144, 48", 48, False),  # 9 K steps of 16
    ("torch.relu(x @ y + self.bias)", "70, 24", "24, 48", 48, False),  # an epilogue that loads
])
def test_a_persistent_gemm_stores_its_output_tiles_by_tma_where_they_fit(body, x, y, n, tma, tmp_path, runner):
    """kernels._stored_by_tma: two halves of each output tile through a descriptor, the tile loop flattened."""
    task = tmp_path / "mm.py"
    task.write_text(TMA_TASK.format(body=body, x=x, y=y, n=n))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    source = t.render(a, {**t.default(a), "precision": "tf32x3", "persistent": 1, "BLOCK_M": 16, "BLOCK_N": 16,
                          "BLOCK_K": 16})
    out = runner.run(task, source)
    assert out["error"] is None and max(out["rel_errors"]) <= 1e-5, out
    gemm = source[source.index("def _gemm_kernel0("):source.index("class ModelNew")]
    assert (gemm.count(".store([") == 2 and "flatten=True" in gemm and "tl.store(" not in gemm) == tma
    assert ("TensorDescriptor(buf_" in source) == tma


def test_tiles_split_in_registers_take_tritons_own_tf32x3_and_match_the_reference(runner):
    """parts "registers": no split kernels, no scratch parts; each K step's tl.dot splits its tiles itself."""
    from test_templates import check

    source = check("split_mm_ragged", "gemm", {"precision": "tf32x3", "parts": "registers"}, runner)
    assert "_split0" not in source and "_gemm_kernel0_ah" not in source
    assert source.count('input_precision="tf32x3"') == 1


def test_the_split_form_compiles_to_tf32_tensor_core_products_for_sm_90(tmp_path):
    """On Hopper the three products are TF32 wgmma instructions, reading their tiles from shared memory."""
    import importlib.util

    from tools.compile_info import compiled

    a = analyze(str(FIXTURES / "split_mm_ragged.py"), small=True)
    t = BY_NAME["gemm"]
    params = {**t.default(a), "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3,
              "precision": "tf32x3"}
    (tmp_path / "mm.py").write_text(t.render(a, params))
    spec = importlib.util.spec_from_file_location("split_mm", tmp_path / "mm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    constexprs = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": params["GROUP_M"]}
    ptx = compiled({"signature": {**{f"p{i}": "*fp32" for i in range(6)}, **{k: "constexpr" for k in constexprs}},
                    "constexprs": constexprs, "divisible": [f"p{i}" for i in range(6)],
                    "options": {"num_warps": 4, "num_stages": 3}}, module._gemm_kernel0).asm["ptx"]
    assert re.search(r"wgmma\.mma_async\S*\.tf32", ptx), re.findall(r"\b(?:w?gmma|mma)\S*", ptx)[:10]


def test_the_persistent_form_compiles_to_tma_loads_for_sm_90_from_its_recorded_launch(tmp_path):
    """The launch recorder keeps a descriptor argument as its dtype and tile, from which the CPU's sm_90 compile
    (the evaluator's registers and shared memory) builds Triton's own signature: bulk tensor copies (TMA) feeding
    TF32 wgmma."""
    import importlib.util

    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from tools.compile_info import _signature, compiled
    from tools.guard import DescriptorArg, Launch, _light

    a = analyze(str(FIXTURES / "split_mm_ragged.py"), small=True)
    t = BY_NAME["gemm"]
    params = {**t.default(a), "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3,
              "precision": "tf32x3", "persistent": 1}
    (tmp_path / "mm.py").write_text(t.render(a, params))
    spec = importlib.util.spec_from_file_location("persistent_mm", tmp_path / "mm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parts = [TensorDescriptor(torch.zeros(1, 64, 64), [64, 64], [64, 1], [64, 32]) for _ in range(4)]
    args = _light((*parts, torch.zeros(8), torch.zeros(37, 29)))
    assert args[0] == DescriptorArg(torch.float32, (64, 32))
    launch = Launch("_gemm_kernel0", module._gemm_kernel0, args, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32,
                    "GROUP_M": params["GROUP_M"], "PROGRAMS": 1, "num_warps": 4, "num_stages": 3}, None)
    sig = _signature("_gemm_kernel0", launch)
    assert sig["signature"]["p0"] == "tensordesc<fp32[64, 32]>" and sig["signature"]["p4"] == "*fp32"
    ptx = compiled(sig, module._gemm_kernel0).asm["ptx"]
    assert "cp.async.bulk.tensor" in ptx and re.search(r"wgmma\.mma_async\S*\.tf32", ptx)


def test_the_tma_store_form_compiles_for_sm_90_within_a_blocks_shared_memory(tmp_path):
    """At the tiles level 1's 7 ships (128 x 128 x 32, 3 stages, 8 warps) the flattened loop and the halves stored
    by TMA fit a block's 227 KB (three stages of parts, 192 KB, and a 32 KB half tile), and the stores are bulk
    tensor copies from shared memory."""
    import importlib.util

    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from tools.compile_info import _signature, compiled
    from tools.guard import Launch, _light

    task = tmp_path / "mm.py"
    task.write_text(TMA_TASK.format(body="x @ y", x="790, 64", y="64, 512", n=512))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    params = {**t.default(a), "precision": "tf32x3", "persistent": 1, "BLOCK_M": 128, "BLOCK_N": 128,
              "BLOCK_K": 32, "num_warps": 8, "num_stages": 3}
    (tmp_path / "cand.py").write_text(t.render(a, params))
    spec = importlib.util.spec_from_file_location("tma_store_mm", tmp_path / "cand.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parts = [TensorDescriptor(torch.zeros(896, 64), [896, 64], [64, 1], [128, 32]) for _ in range(2)] + \
        [TensorDescriptor(torch.zeros(512, 64), [512, 64], [64, 1], [128, 32]) for _ in range(2)]
    out = TensorDescriptor(torch.zeros(790, 512), [790, 512], [512, 1], [128, 64])
    launch = Launch("_gemm_kernel0", module._gemm_kernel0, _light((*parts, out)), {
        "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": params["GROUP_M"], "PROGRAMS": 132,
        "num_warps": 8, "num_stages": 3}, None)
    kernel = compiled(_signature("_gemm_kernel0", launch), module._gemm_kernel0)
    assert kernel.metadata.shared <= 227 * 1024, kernel.metadata.shared
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared", kernel.asm["ptx"])



def test_a_second_product_splits_its_operands_in_memory_only_where_that_pays(runner):
    """The plan's tf32x3 reaches every product, but splitting operands once in memory is each product's own call
    (split_operands.pays): a 1024-cubed product splits its operands, the narrow product after it (8 columns, 4
    flops a byte) splits its tiles in registers instead. It took memory parts too (level 3's NetVLAD: 1.07 GB
    written for a 419 MB operand read once). At small shapes in tf32x3, the two forms together match."""
    a = analyze(str(FIXTURES / "two_products.py"), small=False, shapes={"m": 1024, "k": 1024, "n": 1024, "p": 8})
    t = BY_NAME["gemm"]
    d = t.default(a)
    source = t.render(a, d)
    assert d["precision"] == "tf32x3" and "parts" not in d
    assert re.findall(r"(_\w+)\[\(", source) == ["_gemm_kernel0_split0", "_gemm_kernel0_split1", "_gemm_kernel0",
                                                 "_gemm_kernel1"]
    assert 'input_precision="tf32x3"' in source[source.index("def _gemm_kernel1("):]
    from test_templates import check

    small = check("two_products", "gemm", {"precision": "tf32x3"}, runner)
    assert "_gemm_kernel0_split0[(" in small and "_gemm_kernel1_split0[(" not in small
