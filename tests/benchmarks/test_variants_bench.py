"""benchmarks/variants_bench.py on a CPU: a template's variants and parameter sets over them, rendered and run in
the Triton interpreter beside eager, with their errors against a float64 run (no times without a GPU); a refused
render and a fallback to the task's PyTorch code say so, and bad arguments exit 2 with one sentence."""
import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "variants_bench.py"
CONV = ROOT / "tests" / "agent" / "fixtures" / "conv_kinds_small.py"


def bench():
    spec = importlib.util.spec_from_file_location("variants_bench", SCRIPT)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*args: str, interpret: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env={**env, "TRITON_INTERPRET": "1"} if interpret else env, cwd=ROOT)


def test_variants_and_sets_of_a_convolution_run_beside_eager_in_the_interpreter():
    done = run(str(CONV), "--template", "gemm", "--variants", "0,1,40", "--set", "wide=BLOCK_N:64,BLOCK_K:32",
               "--set", "odd@1=tiles:sideways")
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[1]: line for line in done.stdout.splitlines() if line.startswith("| conv_kinds_small")}
    assert list(rows) == ["eager", "variant 0", "variant 1", "wide", "odd"]  # variant 40 does not exist
    for label in ("variant 0", "variant 1", "wide"):
        assert float(rows[label].split(" | ")[2]) < 1e-6, rows[label]
    assert "BLOCK_N=64, BLOCK_K=32" in rows["wide"] and "parts=registers" in rows["variant 1"]
    assert "| – | ValueError: Invalid parameters for the gemm template: tiles must be" in rows["odd"]
    assert "errors from the Triton interpreter, no times." in done.stdout and "ms |" not in done.stdout


@pytest.mark.parametrize("args, says", [
    (["--template", "nope"], "no template 'nope'"),
    (["--template", "gemm", "--set", "wide=BLOCK_N"], "--set 'wide=BLOCK_N': give NAME[@I]=KEY:VALUE"),
    (["--template", "gemm", "--variants", "first"], "--variants first: give indices"),
    (["--template", "gemm", "--set", "far@99=BLOCK_N:64"], "--set far@99: the template offers"),
    (["--template", "pooling"], "the pooling template does not match"),
    (["--template", "gemm", "--set", "deep=kernels.SPLIT:8"], "--set deep: give kernels.J.KEY:VALUE"),
])
def test_bad_arguments_exit_2_with_one_sentence(args, says):
    done = run(str(CONV), *args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    missing = run("no_such_task.py", "--template", "gemm")
    assert missing.returncode == 2 and "no task file no_such_task.py" in missing.stderr


def test_a_set_reaches_the_programs_other_kernels():
    """kernels.J.KEY sets a parameter of the program's kernel J (params["kernels"]), beside the main kernel's."""
    got = bench().candidates([{"BLOCK_N": 16, "kernels": {"2": {"num_warps": 4}}}], [], [
        ("split", 0, {"BLOCK_N": 32, "kernels.1.SPLIT": 8, "kernels.2.BLOCK_R": 2048})])
    assert got == [("split", {"BLOCK_N": 32, "kernels": {"1": {"SPLIT": 8}, "2": {"num_warps": 4, "BLOCK_R": 2048}}})]


def test_a_candidate_that_ran_the_tasks_pytorch_code_is_marked():
    """A candidate's shape guard warns and runs the reference: its figures are PyTorch's, and the row says so."""
    b = bench()
    golden = torch.ones(4, dtype=torch.float64)

    def guarded():
        warnings.warn(b.FALLBACK + " x of shape (4,); this call breaks that")
        return torch.ones(4)

    row = b.Row("t", "variant 0")
    assert b._checked(row, guarded, golden) and row.note == "ran PyTorch's code" and row.error == 0.0
    plain = b.Row("t", "variant 1")
    assert b._checked(plain, lambda: torch.full((4,), 2.0), golden) and plain.note == "" and plain.error == 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_every_row_that_ran_has_a_time_each_round():
    done = run(str(CONV), "--template", "gemm", "--variants", "0", "--compile", "--reps", "2", interpret=False)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| conv_kinds_small")]
    assert [r[1] for r in rows] == ["eager", "torch.compile", "variant 0"]
    assert all(len(r[2].split(", ")) == 2 and all(float(t) > 0 for t in r[2].split(", ")) for r in rows)


def test_a_rows_kernels_follow_its_parameters_longest_first():
    """--kernels: a row's kernels (torch.profiler's mean ms a call, longest first) follow its parameters in the
    table, the three longest; on a CPU the script says it split none."""
    b = bench()
    row = b.Row("t", "variant 0", {"BLOCK_M": 64}, [1.5], error=1e-7,
                kernels=[("_gemm_kernel0", 0.9513), ("_row_kernel1", 0.5), ("_final", 0.01), ("_tail", 0.001)])
    line = b.table([row], gpu=True).splitlines()[2]
    assert line.endswith("BLOCK_M=64; kernels: _gemm_kernel0 0.9513, _row_kernel1 0.5000, _final 0.0100 |"), line
    done = run(str(CONV), "--template", "gemm", "--variants", "0", "--kernels")
    assert done.returncode == 0 and "no times and no kernels." in done.stdout, done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_kernels_split_each_rows_time():
    done = run(str(CONV), "--template", "gemm", "--variants", "0", "--kernels", interpret=False)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| conv_kinds_small")]
    assert all("; kernels: " in r and float(r.split("; kernels: ")[1].split(",")[0].split()[-1]) > 0 for r in rows)

