"""Shape-general template candidates (issue 16): under params["shapes"] = "dynamic" the flat and row kernels take
the batch as a run-time argument, so a candidate tuned at one batch runs its kernels, right, at others (odd ones
and 1 included) and checks only the rank and the inner sizes; a static candidate at another batch runs the
task's reference with one warning. Candidates run in the Triton interpreter, in their own process."""
import json
import os
import subprocess
import sys
from pathlib import Path

from agent.analysis import analyze
from agent.templates import BY_NAME, base
from agent.templates.ir import original
from tools.rules import check_source

ROOT = Path(__file__).resolve().parents[2]

FLAT = (ROOT / "tests" / "agent" / "fixtures" / "shapes_bias_relu.py").read_text()

# a softmax plus a layer norm over the last axis of a reshaped input, and a row sum: a row kernel, two outputs
ROW = """
import torch
import torch.nn as nn

batch_size = 12
dim = 300


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = x.view(x.shape[0], -1)
        return torch.softmax(y, dim=1) + torch.layer_norm(y, (dim,)), y.sum(dim=1)


def get_inputs():
    return [torch.randn(batch_size, 3, dim // 3)]


def get_init_inputs():
    return []
"""

# an L1 norm and a softmax over rows of 3000: a call with fewer rows than the traced 12 splits each row over two
# programs, combined by a second kernel
LONG_ROWS = """
import torch
import torch.nn as nn

batch_size = 12
dim = 3000


class Model(nn.Module):
    def forward(self, x):
        return x / torch.mean(torch.abs(x), dim=1, keepdim=True), torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

# a mean and an argmin over the middle dim: column kernels, the batch their leading outer dim
COL = """
import torch
import torch.nn as nn

batch_size = 12


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1), torch.argmin(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, 19, 45)]


def get_init_inputs():
    return []
"""

# rows of an L2 norm whose traced input is just under 2**31 elements: a batch even slightly larger overflows
# 32-bit offsets
WIDE = """
import torch
import torch.nn as nn

batch_size = 32768
dim = 65535


class Model(nn.Module):
    def forward(self, x):
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

LINEAR = """
import torch
import torch.nn as nn

batch_size = 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(20, 30)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(batch_size, 20)]


def get_init_inputs():
    return []
"""

CALLS = """
import importlib.util, json, sys, warnings, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
for i, path in enumerate(sys.argv[1:]):
    cand = load(path, f"cand{i}")
    torch.manual_seed(0)
    init = cand.get_init_inputs()
    model, new = cand.Model(*init), cand.ModelNew(*init)
    new.load_state_dict(model.state_dict())
    inner = tuple(cand.get_inputs()[0].shape[1:])
    for batch in (1, 7, 33):
        x = torch.randn((batch,) + inner)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs = [new(x), new(x)]  # a broken guard says so once
        for out in outs:
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)  # an argmin's indices: exactly
        said = [str(w.message) for w in caught if str(w.message).startswith("kernelwright")]
        print(json.dumps({"candidate": i, "batch": batch, "warnings": said}))
"""


def _render(tmp_path, name: str, task: str, template: str, params: dict) -> Path:
    (tmp_path / f"{name}_task.py").write_text(task)
    analysis = analyze(str(tmp_path / f"{name}_task.py"), small=True, arch="cpu")
    t = BY_NAME[template]
    assert t.match(analysis)
    full = {**t.default(analysis), **params}
    assert base.invalid(analysis, full) is None
    source = t.render(analysis, full)
    assert check_source(source, task) is None  # the guards and the grids stay in the candidate language
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def test_dynamic_kernels_tuned_at_one_batch_are_right_at_others(tmp_path):
    flat = _render(tmp_path, "flat", FLAT, "elementwise", {"shapes": "dynamic", "evict": 1})
    row = _render(tmp_path, "row", ROW, "rowwise", {"shapes": "dynamic"})
    looped = _render(tmp_path, "looped", ROW, "rowwise", {"shapes": "dynamic", "mode": "looped", "BLOCK_R": 128,
                                                          "BLOCK_O": 1})
    col = _render(tmp_path, "col", COL, "axis_reduce", {"shapes": "dynamic", "BLOCK_R": 8, "BLOCK_I": 64})
    long = _render(tmp_path, "long", LONG_ROWS, "rowwise", {"shapes": "dynamic"})
    static = _render(tmp_path, "static", FLAT, "elementwise", {})
    source = flat.read_text()
    assert "n0, BLOCK: tl.constexpr" in source and "mask = offs < n0 * 111" in source
    assert 'eviction_policy="evict_last"' in source and 'eviction_policy="evict_last"' not in static.read_text()
    assert "x.dim() != 3 or tuple(x.shape[1:]) != (3, 37)" in source  # the guard: rank and inner sizes only
    assert "torch.empty((kw_batch, 3, 37)" in source and "(kw_batch * 111 + 1023) // 1024" in source
    assert "rmask = ro < n0" in row.read_text()
    # the tile by the batch at call time: the tuned 64 columns from 2 programs per SM, narrower below; a program
    # per batch entry and tile of the 45 columns
    assert "_col_kernel0_bi, _col_kernel0_br = (64, 8) if kw_batch >= 264 else (32, 16) if kw_batch >= 132 else " \
           "(16, 32)" in col.read_text()
    assert "[(kw_batch * ((45 + _col_kernel0_bi - 1) // _col_kernel0_bi),)](" in col.read_text()
    # batches 1 and 7 take the split form (fewer rows than the traced 12), 33 the tuned kernel
    assert "if kw_batch < 12:" in long.read_text() and "_row_kernel0_small_final[(kw_batch, 2,)](" in long.read_text()
    (tmp_path / "calls.py").write_text(CALLS)
    done = subprocess.run([sys.executable, str(tmp_path / "calls.py"), str(flat), str(row), str(looped), str(col),
                           str(long), str(static)],
                          capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"},
                          cwd=str(ROOT), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(calls) == 18
    for c in calls[:15]:  # the dynamic kernels ran at batches 1, 7 and 33: no fallback
        assert c["warnings"] == [], c
    # the static candidate: the reference at another batch, with exactly one warning for the broken guard
    said = [w for c in calls[15:] for w in c["warnings"]]
    assert len(said) == 1 and "x of shape (12, 3, 37)" in said[0] and "reference" in said[0]


def test_dynamic_is_refused_where_a_kernel_needs_the_batch_fixed(tmp_path):
    (tmp_path / "linear.py").write_text(LINEAR)
    analysis = analyze(str(tmp_path / "linear.py"), small=True, arch="cpu")
    gemm = BY_NAME["gemm"]
    assert base.invalid(analysis, {**gemm.default(analysis), "shapes": "dynamic"}) is None  # M is the batch: a
    # GEMM that needs it fixed is refused in test_dynamic_gemm.py
    assert base.invalid(analysis, {**gemm.default(analysis), "shapes": "static"}) is None
    assert "shapes must be one of" in base.invalid(analysis, {**gemm.default(analysis), "shapes": "sometimes"})
    (tmp_path / "row.py").write_text(ROW)
    analysis = analyze(str(tmp_path / "row.py"), small=True, arch="cpu")
    rowwise = BY_NAME["rowwise"]
    split = {**rowwise.default(analysis), "mode": "looped", "BLOCK_O": 1, "BLOCK_R": 128, "SPLIT": 2}
    assert base.invalid(analysis, split) is None
    assert "SPLIT" in (base.invalid(analysis, {**split, "shapes": "dynamic"}) or "")


def test_dynamic_is_refused_where_a_piece_of_a_cat_is_written_into_its_place():
    # as traced: rewritten (exclusive_scan), the exclusive running sum has no cat
    analysis = original(analyze(str(Path(__file__).parent / "fixtures" / "low_cat_exclusive.py"), small=True,
                                arch="cpu"))
    scan = BY_NAME["scan"]
    assert base.invalid(analysis, scan.default(analysis)) is None
    assert "into its place" in (base.invalid(analysis, {**scan.default(analysis), "shapes": "dynamic"}) or "")


def test_dynamic_is_refused_where_a_kernel_writes_the_batch_without_reading_it(tmp_path):
    """index_fill_ into a clone: the clone's copy is batched, but the fill reads only the index, so its grid and
    masks kept the traced batch (at batch 1 it wrote past its buffer). It is built for the task's own shapes."""
    task = tmp_path / "task.py"
    filled = FLAT.replace("return torch.relu(x * 2.0 + self.bias) - 0.5",
                          "return (torch.relu(x * 2.0 + self.bias) - 0.5).clone().index_fill_(1, self.cols, -1.0)")
    task.write_text(filled.replace("super().__init__()",
                                   "super().__init__()\n        self.register_buffer('cols', torch.tensor([0, 2]))"))
    assert "index_fill_" in task.read_text()
    analysis = analyze(str(task), small=True, arch="cpu")
    flat = BY_NAME["elementwise"]
    assert base.invalid(analysis, flat.default(analysis)) is None
    assert base.invalid(analysis, {**flat.default(analysis), "shapes": "dynamic"}) == \
        "shapes='dynamic': kernel 2 writes into a buffer that has the batch without reading it"


def test_a_batch_near_two_to_the_31_gets_64_bit_offsets(tmp_path):
    """Traced at 32768 x 65535, the 32-bit limit (2**31 elements) would fall under the traced batch itself, and the
    candidate would take its fallback at the task's own shapes (seen on the H200: "it never launched a Triton
    kernel"). The kernel computes its offsets in 64 bits instead, with no batch limit, and runs right at batch 3."""
    (tmp_path / "wide_task.py").write_text(WIDE)
    analysis = analyze(str(tmp_path / "wide_task.py"), small=False, arch="cpu")
    t = BY_NAME["rowwise"]
    source = t.render(analysis, {**t.default(analysis), "shapes": "dynamic"})
    assert ".to(tl.int64)" in source and "not 1 <= kw_batch <= 2147483647" in source
    static = t.render(analysis, t.default(analysis))
    assert ".to(tl.int64)" not in static  # at its one shape the offsets fit 32 bits
    (tmp_path / "wide.py").write_text(source)
    check = """
import importlib.util, warnings, torch
spec = importlib.util.spec_from_file_location("wide", %r)
cand = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cand)
x = torch.randn(3, 65535)
with warnings.catch_warnings():
    warnings.simplefilter("error")  # the fallback's warning would raise
    out = cand.ModelNew()(x)
torch.testing.assert_close(out, cand.Model()(x), rtol=1e-4, atol=1e-6)
""" % str(tmp_path / "wide.py")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=str(ROOT),
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


ARGMIN_WIDE = """
import torch
import torch.nn as nn

batch_size = 128


class Model(nn.Module):
    def forward(self, x):
        return torch.argmin(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, 4096, 4095)]


def get_init_inputs():
    return []
"""


def test_an_argmin_with_64_bit_offsets_compiles_for_sm_90(tmp_path):
    """With 64-bit offsets the index it keeps stays 32-bit (it counts along the reduced dim): on the H200 the
    kernel failed to compile, its loop-carried index int32 before the loop and int64 in it. Triton compiles for
    sm_90 without a GPU, as the evaluator does on a CPU (tools/compile_info.py)."""
    import importlib.util

    from tools.compile_info import compiled

    (tmp_path / "argmin_task.py").write_text(ARGMIN_WIDE)
    analysis = analyze(str(tmp_path / "argmin_task.py"), small=False, arch="cpu")
    t = BY_NAME["axis_reduce"]
    params = {**t.default(analysis), "shapes": "dynamic"}
    (tmp_path / "argmin.py").write_text(t.render(analysis, params))
    assert ".to(tl.int64)" in (tmp_path / "argmin.py").read_text()
    spec = importlib.util.spec_from_file_location("argmin_wide", tmp_path / "argmin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jit = module._col_kernel0
    args = jit.arg_names
    signature = {a: "constexpr" if a.startswith("BLOCK") else "i32" if a == "n0" else "*fp32" for a in args}
    signature[[a for a in args if a.startswith("p")][-1]] = "*i64"  # the argmin's output
    constexprs = {a: params[a] for a in args if a.startswith("BLOCK")}
    kernel = compiled({"signature": signature, "constexprs": constexprs, "divisible": [],
                       "options": {"num_warps": params["num_warps"]}}, jit)
    assert "ld.global" in kernel.asm["ptx"]
