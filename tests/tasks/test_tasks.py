"""The task suite in tasks/: every task file loads and runs at its SMALL_SHAPES; every task is sized for the
GPU benchmark at its full shapes (checked on the meta device, nothing allocated); suite.toml lists each file
once; every hand-written candidate in tasks/candidates/ matches its task under the Triton interpreter.

Run: /work/venv/bin/pytest tests/tasks/test_tasks.py -q   (about 15 s on a CPU)
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from taskfiles import CANDIDATE_FILES, FAMILIES, TASK_FILES, TASKS_DIR, family_of, load_task

MiB, GiB = 2**20, 2**30

# Extra interpreter runs per candidate with module constants shrunk, so that the looped, multi-block and
# multi-tile paths run at the small shapes too.
CANDIDATE_PATCHES = {
    "02_swish_bias.py": [{"BLOCK": 64}, {"BLOCK": 64, "INDEX_64_ABOVE": 0}],
    "04_softmax.py": [{"ONE_PASS_MAX": 64, "LOOP_BLOCK": 64}, {"ONE_PASS_MAX": 64}],
    "06_layer_norm.py": [{"ONE_PASS_MAX": 64, "LOOP_BLOCK": 64}, {"ONE_PASS_MAX": 64}],
    "12_sum_dim1.py": [{"MAX_BLOCK_I": 8, "TILE_ELEMS": 32}],
    "22_max_pool2d.py": [{"MAX_BLOCK_W": 4, "TILE": 8}],
    "34_gemm_bias_relu.py": [{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}],
}
CANDIDATE_CASES = [(name, patch) for name in CANDIDATE_FILES for patch in [{}] + CANDIDATE_PATCHES.get(name, [])]
REL_ERR_BOUND = 1e-4


def test_suite_has_every_family():
    assert len(TASK_FILES) >= 28
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.py", name) for name in TASK_FILES), TASK_FILES
    numbers = [name[:2] for name in TASK_FILES]
    assert len(set(numbers)) == len(numbers), "two task files share a number"
    found = {family_of(load_task(name, small=False)) for name in TASK_FILES}
    assert found == set(FAMILIES)


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_file_shape(name):
    """Docstring, shape globals and SMALL_SHAPES as the suite's format asks; nothing but definitions at import."""
    module = load_task(name, small=False)
    summary = (module.__doc__ or "").strip().splitlines()
    assert summary and summary[0].endswith("."), "the docstring opens with one line saying what it computes"
    assert family_of(module) in FAMILIES
    small = module.SMALL_SHAPES
    assert small and all(type(getattr(module, key, None)) is int for key in small), \
        "SMALL_SHAPES overrides integer globals of the task"
    assert all(type(value) is int and 0 < value < getattr(module, key) for key, value in small.items()), small
    tree = ast.parse((TASKS_DIR / name).read_text())
    for node in tree.body:
        allowed = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.Assign, ast.Expr)
        assert isinstance(node, allowed), f"line {node.lineno} does more than define"
        if isinstance(node, (ast.Expr, ast.Assign)):
            value = node.value
            constants = value.values if isinstance(value, ast.Dict) else [value]
            assert all(isinstance(v, ast.Constant) for v in constants), f"line {node.lineno} runs code at import"
    assert "device" not in (TASKS_DIR / name).read_text().split("def get_inputs")[1], \
        "get_inputs builds tensors without a device argument"
    assert "allow_tf32" not in (TASKS_DIR / name).read_text(), "fp32 everywhere: the evaluator sets TF32"


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_runs_at_small_shapes(name):
    module = load_task(name, small=True)
    family = family_of(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    assert 0 < sum(x.numel() for x in inputs) <= 20_000, "SMALL_SHAPES are tiny"
    assert all(p.dtype == torch.float32 for p in model.state_dict().values())
    assert all(x.dtype in (torch.float32, torch.int64, torch.bool) for x in inputs)
    with torch.no_grad():
        out = model(*inputs)
    assert isinstance(out, torch.Tensor)
    first = inputs[0]
    if family == "argreduce":
        assert out.dtype == torch.int64 and out.dim() == first.dim() - 1
        assert out.min() >= 0 and out.max() < max(first.shape)
        return
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert out.abs().max() > 0, "the output is not all zeros"
    if family in ("elementwise", "softmax", "norm", "scan", "conv"):
        assert out.shape == first.shape
    elif family == "loss":
        assert out.dim() == 0
    elif family in ("reduction", "pooling"):
        assert out.dim() in (first.dim(), first.dim() - 1) and out.numel() < first.numel()
    else:  # matvec, matmul, gemm_epilogue
        assert out.dim() == first.dim() and out.shape[:-1] == first.shape[:-1]


def test_small_shapes_apply_at_call_time():
    """get_inputs and get_init_inputs read the shape globals when called, so overrides take effect."""
    module = load_task("06_layer_norm.py", small=False)
    module.hidden, module.seq_len, module.batch_size = 40, 3, 2
    (x,) = module.get_inputs()
    assert x.shape == (2, 3, 40) and module.get_init_inputs() == [40]


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_full_size(name):
    """At full size (meta tensors: shapes only), inputs are 256 MiB..4.5 GiB of fp32, or for matmuls the
    work is 50..1000 GFLOP (about 1-20 ms in fp32 on an H200), and the forward's shapes are consistent."""
    module = load_task(name, small=False)
    family = family_of(module)
    with torch.device("meta"):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            out = model(*inputs)
    assert all(x.device.type == "meta" for x in inputs), "get_inputs takes its device from the context"
    assert out.device.type == "meta"
    nbytes = sum(x.numel() * x.element_size() for x in inputs)
    if family in ("matmul", "gemm_epilogue"):
        assert 5e10 <= counter.get_total_flops() <= 1e12, counter.get_total_flops()
    else:
        assert 256 * MiB <= nbytes <= 4.5 * GiB, nbytes / MiB


def test_suite_toml_lists_every_task_once():
    suite = TASKS_DIR / "suite.toml"
    entries = tomllib.loads(suite.read_text())["task"]
    paths = [entry["path"] for entry in entries]
    assert sorted(paths) == TASK_FILES, "every task file exactly once, and nothing else"
    from tools.task import OVERRIDE_KEYS as keys
    for entry in entries:
        assert set(entry) <= keys, entry
        assert (suite.parent / entry["path"]).is_file()
        module = load_task(entry["path"], small=False)
        assert all(type(getattr(module, k, None)) is int for k in entry.get("shapes", {})), entry


def test_suite_toml_loads_in_the_evaluator():
    from tools.task import load_suite

    specs = load_suite(TASKS_DIR / "suite.toml")
    assert [Path(s.path).name for s in specs] == TASK_FILES
    assert all(s.dtype in (None, "float32") and not s.tf32 for s in specs)


@pytest.mark.parametrize("name", CANDIDATE_FILES)
def test_candidate_source(name):
    """A candidate pairs with a task, passes the evaluator's static rules, and computes its dots in fp32."""
    from tools.rules import check_source

    assert name in TASK_FILES
    source = (TASKS_DIR / "candidates" / name).read_text()
    assert check_source(source, (TASKS_DIR / name).read_text()) is None
    assert "class ModelNew" in source and "@triton.jit" in source
    assert source.count("tl.dot(") == source.count('input_precision="ieee"')
    assert "allow_tf32" not in source and "tf32x3" not in source


@pytest.fixture(scope="module")
def interpreted_runs() -> dict:
    """One interpreter process for every candidate case (TRITON_INTERPRET must be set before triton loads)."""
    cases = [{"candidate": name, "patch": patch} for name, patch in CANDIDATE_CASES]
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("check_candidates.py")), json.dumps(cases)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    runs: dict = {}
    for row in rows:
        runs.setdefault((row["candidate"], json.dumps(row["patch"], sort_keys=True)), []).append(row)
    return runs


@pytest.mark.parametrize("name,patch", CANDIDATE_CASES,
                         ids=[f"{n[:-3]}-{'-'.join(f'{k}{v}' for k, v in p.items()) or 'default'}"
                              for n, p in CANDIDATE_CASES])
def test_candidate_matches_task(interpreted_runs, name, patch):
    rows = interpreted_runs[(name, json.dumps(patch, sort_keys=True))]
    assert len(rows) == 2
    for row in rows:
        assert "error" not in row, row["error"]
        assert row["same_params"], "ModelNew builds the task's parameters from the same seed"
        assert row["same_shape"], "same output shape and dtype"
        assert row["rel_err"] < REL_ERR_BOUND, row
