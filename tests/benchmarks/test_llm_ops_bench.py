"""benchmarks/llm_ops_bench.py on a CPU: without a GPU it says so in one sentence and exits 2 (an unknown op
too); its table and geomeans on made-up rows; and every task it writes is one kernelwright's templates take."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import matching

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "llm_ops_bench.py"


def bench():
    spec = importlib.util.spec_from_file_location("llm_ops_bench", SCRIPT)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _run(*args, tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_without_a_gpu_it_says_so_and_exits_2(tmp_path):
    done = _run(tmp_path=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
    said = done.stderr.strip()
    assert said.count("\n") == 0 and said.endswith(".") and "GPU" in said
    assert not (tmp_path / "out").exists()  # nothing built, nothing written


def test_an_unknown_op_is_refused(tmp_path, capsys):
    """Through main() here: the real command's exit 2 and its one sentence are the test above's."""
    assert bench().main(["--ops", "rmsnorm,flash", "--out", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and said.endswith(".")
    assert "flash" in said and "rmsnorm" in said  # the unknown one, and the choices
    assert not (tmp_path / "out").exists()


def test_the_table_on_made_up_rows():
    b = bench()
    rows = [b.Row("rmsnorm", "4096x4096", 0.010, {"eager": 0.040, "compile": 0.012, "liger": 0.011,
                                                  "kernelwright": 0.0105},
                  {"eager": 3e-3, "compile": 2e-3, "liger": 2e-3, "kernelwright": 1e-3}, [],
                  {"eager": 20.4, "compile": 31.0, "liger": 17.2, "kernelwright": 9.6}, copy_ms=0.0125),
            b.Row("cross_entropy", "2048x128256", 0.20, {"eager": 1.0, "compile": 0.5, "liger": 0.4,
                                                         "kernelwright": 0.25},
                  {"eager": 1e-3, "compile": 1e-3, "liger": 1e-3, "kernelwright": 5e-4}),
            b.Row("softmax", "8192x4096", 0.05, {"eager": 0.2, "compile": 0.1}, {"eager": 1e-3, "compile": 1e-3},
                  ["liger: no Liger kernel for softmax", "kernelwright: no verified kernel (see OUT/runs)"])]
    lines = b.table(rows)
    head, sep = lines[0], lines[1]
    assert head.count("|") == sep.count("|") and all(line.count("|") == head.count("|") for line in lines[2:5])
    assert ("| rmsnorm | 4096x4096 | 0.0100 | 0.0125 | 0.0400 | 0.0120 | 0.0110 | 0.0105 | 1.05 | 0.84 | 1.10 | 1.05 |"
            " 1.14 |" in lines[2])  # the floor, the copy of as many bytes, the four times, then the ratios
    assert "| cross_entropy | 2048x128256 | 0.2000 | - |" in lines[3]  # no copy timed: no kw/copy either
    assert "| 1.25 | - | 2.00 | 1.60 | 2.00 |" in lines[3]
    assert "| 3.0e-03, 2.0e-03, 2.0e-03, 1.0e-03 | 20, 31, 17, 10 |" in lines[2]  # errors, then host us per call
    assert "| 0.2000 | 0.1000 | - | - | - | - | - | - | - |" in lines[4] and "1.0e-03, 1.0e-03, -, -" in lines[4]
    text = "\n".join(lines)
    assert "geomean kernelwright best/floor: 1.146" in text  # sqrt(1.05 * 1.25)
    assert "geomean kernelwright best/copy: 0.840" in text  # the one row with a copy timed
    assert "geomean speedup of kernelwright over Liger: 1.295" in text  # sqrt(0.011 / 0.0105 * 1.6)
    assert "softmax 8192x4096: liger: no Liger kernel for softmax" in text


def test_an_empty_table_has_no_geomeans():
    lines = bench().table([])
    assert "- geomean kernelwright best/floor: -" in lines


TEMPLATE = {"rmsnorm": "rowwise", "layernorm": "rowwise", "softmax": "rowwise", "cross_entropy": "rowwise",
            "swiglu": "elementwise", "geglu": "elementwise", "rope": "elementwise", "add_rmsnorm": "rowwise",
            "dyt": "elementwise", "poly_norm": "rowwise", "kl_div": "rowwise", "jsd": "rowwise", "tvd": "rowwise",
            "linear_cross_entropy": "gemm"}


def test_every_op_is_listed_here():
    assert sorted(bench().TASKS) == sorted(TEMPLATE)


@pytest.mark.parametrize("op", sorted(TEMPLATE))
def test_each_task_is_one_the_templates_take(op, tmp_path):
    """At a small shape of the same form (the script's own source, its sizes changed)."""
    b = bench()
    assert len(b.TASKS[op][1]) == 2 and all(t * h >= 2**22 for t, h in b.TASKS[op][1])
    path = tmp_path / f"{op}.py"
    path.write_text(b.task_source(op, (6, 512)).replace("VOCAB = 128256", "VOCAB = 1000"))
    a = analyze(str(path), small=False)
    assert TEMPLATE[op] in [t.NAME for t in matching(a)]
