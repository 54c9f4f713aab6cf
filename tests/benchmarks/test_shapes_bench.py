"""benchmarks/shapes_bench.py: --list on a tiny KernelBench-like level written here (it reads the task files
only, so it runs on a CPU), the shape sets it derives from a task's batch, bad input and a run without a GPU
refused in one sentence with exit 2, the task lists its builds take (read by the real suite loader), and its
table, geomeans and targets on made-up rows. On a GPU, the whole benchmark over that tiny level."""
import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tools.task import load_suite

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "shapes_bench.py"
DEV_SET = ROOT.parent / "shared" / "kernelbench"

ROW_NORM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Each row over its L2 norm."""
    def forward(self, x):
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


batch_size = 16
dim = 33


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

GEMM_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, then ReLU."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 64 * 2
in_features, out_features = 24, 40


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


M = 12


def get_inputs():
    return [torch.rand(M, M), torch.rand(M, M)]


def get_init_inputs():
    return []
'''


def bench():
    spec = importlib.util.spec_from_file_location("shapes_bench", SCRIPT)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def kernelbench(tmp_path):
    """Levels 1 and 2 in KernelBench's naming: a row norm, a GEMM with its batch as an expression, and a matmul
    with no batch_size."""
    for level in ("level1", "level2"):
        (tmp_path / "kb" / level).mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "1_Row_l2_norm.py").write_text(ROW_NORM)
    (tmp_path / "kb" / "level1" / "2_Matmul.py").write_text(MATMUL)
    (tmp_path / "kb" / "level2" / "3_Gemm_relu.py").write_text(GEMM_RELU)
    return tmp_path / "kb"


def _script(*args, timeout=120):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_list_on_a_small_level(kernelbench):
    done = _script("--kernelbench", str(kernelbench), "--tasks", "level1/1_Row_l2_norm.py,level2/3_Gemm_relu",
                   "--list")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == [
        "level1/1_Row_l2_norm.py: batch_size=16 (tuned); batch_size=5; batch_size=1; batch_size=14",
        "level2/3_Gemm_relu: batch_size=128 (tuned); batch_size=41; batch_size=1; batch_size=98"]


def test_shapes_replace_the_derived_sets(kernelbench, capsys):
    b = bench()
    args = ["--kernelbench", str(kernelbench), "--tasks", "level1/1_Row_l2_norm.py", "--list"]
    assert b.main(args + ["--shapes", "batch_size=3,16,7"]) == 0  # the task's own 16 is not measured twice
    assert capsys.readouterr().out == "level1/1_Row_l2_norm.py: batch_size=16 (tuned); batch_size=3; batch_size=7\n"
    assert b.main(args + ["--shapes", "batch_size=3,5", "--shapes", "dim=7"]) == 0
    assert capsys.readouterr().out == ("level1/1_Row_l2_norm.py: batch_size=16, dim=33 (tuned); "
                                       "batch_size=3, dim=7; batch_size=5, dim=7\n")


@pytest.mark.parametrize("b, expected", [
    (32768, [32768, 10921, 1, 24578]), (1024, [1024, 341, 1, 770]), (128, [128, 41, 1, 98]),
    (112, [112, 37, 1, 86]), (40, [40, 13, 1, 34]), (16, [16, 5, 1, 14]), (8, [8, 7, 1, 27]), (4, [4, 3, 1, 15]),
    (3, [3, 1, 12]), (1, [1, 6])])
def test_derived_batches(b, expected):
    got = bench().derived_batches(b)
    assert got == expected and len(set(got)) == len(got)
    if len(got) == 4:
        assert got[1] % 2 == 1 and 1 < got[1] < b and got[2] == 1  # a smaller odd size, then 1
    assert got[-1] & (got[-1] - 1) != 0  # the last is no power of two (40: 32 is skipped for 34)


@pytest.mark.parametrize("args, said", [
    (["--tasks", "level1/9_Missing.py"], "There is no task file level1/9_Missing.py under"),
    (["--tasks", "../level1/1_Row_l2_norm.py"], "There is no task file ../level1/1_Row_l2_norm.py under"),
    (["--tasks", "level1/2_Matmul.py"], "Task level1/2_Matmul.py has no integer global batch_size; give its shape "
                                        "sets with --shapes."),
    (["--tasks", "level1/1_Row_l2_norm.py,level1/1_Row_l2_norm"], "--tasks names 1_Row_l2_norm twice."),
    (["--tasks", " , "], "--tasks names no task"),
    (["--tasks", "level2/3_Gemm_relu.py", "--shapes", "dim=4"], "Task level2/3_Gemm_relu.py has no integer global "
                                                                "dim."),
    (["--tasks", "level1/1_Row_l2_norm.py", "--shapes", "batch_size=two"], "--shapes takes NAME=V1,V2,..."),
    (["--tasks", "level1/1_Row_l2_norm.py", "--shapes", "batch_size=0,4"], "values of at least 1."),
])
def test_bad_input_is_one_sentence_and_exit_2(kernelbench, tmp_path, capsys, args, said):
    assert bench().main(["--kernelbench", str(kernelbench), "--out", str(tmp_path / "out"), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and captured.err.rstrip().endswith(".")
    assert said in captured.err
    assert not (tmp_path / "out").exists()


def test_without_a_gpu_it_says_so_and_exits_2(kernelbench, tmp_path):
    done = _script("--kernelbench", str(kernelbench), "--tasks", "level1/1_Row_l2_norm.py", "--out",
                   str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
    said = done.stderr.strip()
    assert said.count("\n") == 0 and said.endswith(".") and "GPU" in said and "--list" in said
    assert not (tmp_path / "out").exists()  # nothing built, nothing written


def test_the_builds_task_lists(kernelbench, tmp_path):
    """Read back by the suite loader batch uses: the general list carries each task's other shape sets (whose
    names it checks against the task's globals), the specialized one none."""
    b = bench()
    tasks = b.resolve(kernelbench, ["level1/1_Row_l2_norm.py", "level2/3_Gemm_relu.py"], None)
    suites = b.write_suites(tmp_path / "out", tasks)
    assert set(suites) == {"specialized", "general"} and suites["general"] == tmp_path / "out" / "general.toml"
    general, specialized = load_suite(suites["general"]), load_suite(suites["specialized"])
    assert [s.name for s in general] == [s.name for s in specialized] == ["1_Row_l2_norm", "3_Gemm_relu"]
    assert [s.shape_sets for s in general] == [[{"batch_size": 5}, {"batch_size": 1}, {"batch_size": 14}],
                                               [{"batch_size": 41}, {"batch_size": 1}, {"batch_size": 98}]]
    assert all(s.shape_sets == [] and Path(s.path).is_file() for s in specialized)


@pytest.mark.skipif(not (DEV_SET / "level1").is_dir(), reason="the KernelBench dev set is not at ../shared")
def test_the_default_tasks_are_in_the_dev_set():
    tasks = bench().resolve(DEV_SET, list(bench().TASKS), None)
    assert len(tasks) == 10 and {t.path.parent.name for t in tasks} == {"level1", "level2"}
    assert all(len(t.sets) == 4 and list(t.sets[0]) == ["batch_size"] for t in tasks)


# --- the table, on made-up rows ------------------------------------------------------------------------------
def made_up_rows(b):
    """Task a: general faster than everything, its kernel dynamic; task b: general 10% slower than specialized at
    the tuned shape and a fallback 1% over eager at batch 1; task c: no general kernel."""
    return [
        b.Row("a", {"batch_size": 16}, True, "H200", {"eager": 2.0, "compile": 1.6, "general": 1.0,
                                                      "specialized": 0.98},
              {"general": False, "specialized": False}, {"compile": 1e-7, "general": 2e-7, "specialized": 3e-7}),
        b.Row("a", {"batch_size": 5}, False, "H200", {"eager": 1.0, "compile": 0.9, "general": 0.5,
                                                      "specialized": 1.01},
              {"general": False, "specialized": True}, {"general": 2e-7, "specialized": 0.0}),
        b.Row("b", {"batch_size": 128}, True, "H200", {"eager": 3.0, "compile": 3.0, "general": 3.3,
                                                       "specialized": 3.0},
              {"general": False, "specialized": False}),
        b.Row("b", {"batch_size": 1}, False, "H200", {"eager": 0.1, "compile": 0.07, "general": 0.101,
                                                      "specialized": 0.101},
              {"general": True, "specialized": True}),
        b.Row("c", {"batch_size": 64}, True, "H200", {"eager": 1.0, "compile": 1.0, "specialized": 0.5},
              {"specialized": False}, notes=["general: no verified kernel (see OUT/general)"]),
    ]


def test_the_table_on_made_up_rows():
    b = bench()
    lines = b.table(made_up_rows(b))
    head, sep = lines[0], lines[1]
    assert all(line.count("|") == head.count("|") == sep.count("|") for line in lines[2:7])
    assert lines[2] == ("| a | batch_size=16 (tuned) | 2.0000 | 1.6000 | 1.0000 | 0.9800 | 1.02x | 2.00x | 1.60x | "
                        "no | no | 2.0e-07 | 3.0e-07 |")
    assert lines[3] == ("| a | batch_size=5 | 1.0000 | 0.9000 | 0.5000 | 1.0100 | - | 2.00x | 1.80x | no | **yes** "
                        "| 2.0e-07 | 0.0e+00 |")
    assert lines[5].startswith("| b | batch_size=1 | 0.1000 | 0.0700 | 0.1010 | 0.1010 | - | 0.99x | 0.69x | **yes** "
                               "| **yes** |")
    assert lines[6] == "| c | batch_size=64 (tuned) | 1.0000 | 1.0000 | - | 0.5000 | - | - | - | - | no | - | - |"
    text = "\n".join(lines)
    over_compile = (1.6 / 1.0 * 0.9 / 0.5 * 3.0 / 3.3 * 0.07 / 0.101) ** 0.25
    assert f"- geomean general over torch.compile, all shapes: {over_compile:.3f}" in text
    assert f"- geomean general over eager, other shapes: {math.sqrt(2.0 * 0.1 / 0.101):.3f}" in text
    assert f"- geomean general time / specialized time, tuned shape: {math.sqrt(1.0 / 0.98 * 1.1):.3f}" in text
    assert f"- geomean specialized over eager, tuned shape: {(2.0 / 0.98 * 1.0 * 2.0) ** (1 / 3):.3f}" in text
    assert ("- target: at the tuned shape, the general kernel within 5% of the specialized one: worst 1.10x its time, "
            "NOT met (missed by b 1.10x; no figures for c batch_size=64)") in text
    assert ("- target: at the other shapes, the general kernel never slower than eager (2% noise): worst 1.01x "
            "eager's time, met") in text
    assert (f"- target: geomean over all shapes at least 1.2x torch.compile: {over_compile:.2f}x, NOT met "
            f"(missed by geomean {over_compile:.2f}x; no figures for c batch_size=64)") in text
    assert "- c batch_size=64: general: no verified kernel (see OUT/general)" in text


def test_targets_met_and_without_rows():
    b = bench()
    rows = made_up_rows(b)[:2]  # task a alone: 2% over the specialized kernel, faster than eager, 1.7x compile
    assert [t.met for t in b.targets(rows)] == [True, True, True]
    assert [t.met for t in b.targets([])] == [None, None, None]
    assert "no rows" in "\n".join(b.table([])) and "- geomean general over eager, all shapes: -" in b.table([])


def test_rows_kept_between_calls(tmp_path):
    b = bench()
    rows = made_up_rows(b)
    (tmp_path / "rows.json").write_text(json.dumps([asdict(r) for r in rows]))
    loaded = b.load_rows(tmp_path / "rows.json")
    assert list(loaded) == [r.key() for r in rows] and list(loaded.values()) == rows
    assert b.load_rows(tmp_path / "none.json") == {}


# --- the builds and the measuring, for real ------------------------------------------------------------------
DRIVER = """
import importlib.util, json, sys, time
from pathlib import Path
import torch
spec = importlib.util.spec_from_file_location("shapes_bench", sys.argv[1])
b = sys.modules["shapes_bench"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(b)
tasks = b.resolve(Path(sys.argv[2]), ["level1/1_Row_l2_norm.py", "level2/3_Gemm_relu.py"], None)
out = Path(sys.argv[3])
for _ in range(2):  # the second call finds both builds done and every row kept
    b.build(out, tasks, 1, 300.0, 200.0)
    rows, left = b.time_rows(out, tasks, time.monotonic() + 300.0, torch.device("cpu"))
    print(json.dumps({"rows": [b.asdict(r) for r in rows], "left": left, "kept": (out / "rows.json").read_text(),
                      "logs": {p.name: p.stat().st_size for p in out.glob("*.log")}}), flush=True)
"""


def check_rows(rows: list[dict]) -> None:
    """The general kernels (a dynamic batch: the row norm's row kernel, the GEMM with M the batch) run their
    kernels at every set, right; the specialized ones take their fallback off their own shape."""
    assert [(r["task"], r["shapes"]["batch_size"], r["tuned"]) for r in rows] == [
        ("1_Row_l2_norm", 16, True), ("1_Row_l2_norm", 5, False), ("1_Row_l2_norm", 1, False),
        ("1_Row_l2_norm", 14, False), ("3_Gemm_relu", 128, True), ("3_Gemm_relu", 41, False),
        ("3_Gemm_relu", 1, False), ("3_Gemm_relu", 98, False)]
    for task in (rows[:4], rows[4:]):
        assert all(set(r["ms"]) == {"eager", "compile", "general", "specialized"} for r in task), task
        assert all(r["fallback"]["general"] is False and r["err"]["general"] < 1e-5 for r in task), task
        assert [r["fallback"]["specialized"] for r in task] == [False, True, True, True]
        assert all(r["err"]["specialized"] < 1e-5 for r in task)


@pytest.mark.slow
def test_builds_and_rows_in_the_interpreter(kernelbench, tmp_path):
    """Both builds by a real `kernelwright batch` (no LLM), then every row measured in one process as on a GPU,
    here with the Triton interpreter (its times say nothing); a second call, in the same process (what it finds
    done is on disk), builds and times nothing again: the same rows, rows.json and build logs as the first's."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(SCRIPT), str(kernelbench), str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"rows"')]
    assert len(calls) == 2, done.stdout[-3000:]
    first, second = calls
    assert first["left"] == []
    check_rows(first["rows"])
    assert all(r["device"] == "cpu" for r in first["rows"])
    assert {p.name for p in out.iterdir()} >= {"specialized", "general", "specialized.toml", "general.toml",
                                                "specialized.log", "general.log", "rows.json"}
    assert set(first["logs"]) == {"specialized.log", "general.log"} and all(first["logs"].values())
    assert second == first and (out / "rows.json").read_text() == first["kept"]


# --- on a GPU: the whole benchmark ---------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.slow
def test_the_benchmark_on_a_tiny_level(kernelbench, tmp_path, monkeypatch):
    """main() over the same two tasks: both builds, every row timed on the GPU, the table and the JSON."""
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "out"
    args = ["--kernelbench", str(kernelbench), "--tasks", "level1/1_Row_l2_norm.py,level2/3_Gemm_relu.py",
            "--out", str(out), "--budget", "1", "--build-seconds", "240", "--max-seconds", "400"]
    assert bench().main(args) == 0
    data = json.loads((out / "shapes.json").read_text())
    assert data["not_timed"] == [] and len(data["targets"]) == 3
    check_rows(data["rows"])
    assert "| 1_Row_l2_norm | batch_size=16 (tuned) |" in (out / "shapes.md").read_text()
    before = (out / "rows.json").read_text()
    assert bench().main(args) == 0 and (out / "rows.json").read_text() == before
