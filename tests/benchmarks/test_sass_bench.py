"""benchmarks/sass_bench.py on a CPU: a candidate's GEMM kernel compiled for sm_90 by the installed Triton, its
registers, spills and K-loop instructions in a table; a refused render says why in its row, and bad arguments
exit 2 with one sentence."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "sass_bench.py"
CONV = ROOT / "tests" / "agent" / "fixtures" / "conv_kinds_small.py"
DEEP = ROOT / "tests" / "agent" / "fixtures" / "conv_deep_small.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_tap_steps_take_fewer_integer_instructions_a_k_step():
    """A 32-channel 3x3 convolution's channel tiles at K steps of 32, with and without tap steps (params.tap_steps):
    both compile for sm_90 with the same tensor-core products a step, and tap steps take fewer integer
    instructions in the K loop."""
    done = run(str(DEEP), "--template", "gemm", "--variants", "", "--set", "plain=BLOCK_K:32",
               "--set", "taps=BLOCK_K:32,taps:1", "--set", "odd=tiles:sideways")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Compiled for sm_90 by Triton ")
    rows = {line.split(" | ")[1]: line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| conv_deep_small")}
    assert list(rows) == ["plain", "taps", "odd"]
    loops = {}
    for label in ("plain", "taps"):
        registers, spilled, loop = rows[label][2:5]
        assert 0 < int(registers) <= 255 and int(spilled) >= 0
        total, integer, products = (int(n) for n in loop.replace("(", "").replace(",", "").replace(")", "").split())
        assert total > integer and products > 0
        loops[label] = integer, products
    assert loops["taps"][1] == loops["plain"][1] and loops["taps"][0] < loops["plain"][0]
    assert "ValueError: Invalid parameters for the gemm template: tiles must be" in rows["odd"][5]


@pytest.mark.parametrize("args, says", [
    (["--template", "nope"], "no template 'nope'"),
    (["--template", "gemm", "--set", "wide=BLOCK_N"], "--set 'wide=BLOCK_N': give NAME[@I]=KEY:VALUE"),
    (["--template", "gemm", "--variants", "first"], "--variants first: give indices"),
    (["--template", "pooling"], "the pooling template does not match"),
])
def test_bad_arguments_exit_2_with_one_sentence(args, says):
    done = run(str(CONV), *args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    missing = run("no_such_task.py", "--template", "gemm")
    assert missing.returncode == 2 and "no task file no_such_task.py" in missing.stderr


def test_a_launchs_meta_parameters_are_read_as_the_gpu_gives_them():
    """Ints as they are, a tensor's .is_cuda as True (the special-function switch of a candidate's kernels); any
    other host expression is refused in one sentence, not guessed. An argument the candidate made a TMA
    descriptor for is one, of its block's shape; the others are fp32 pointers."""
    spec = importlib.util.spec_from_file_location("sass_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    line = "        _gemm_kernel0[(264,)](x, w_desc, buf, BLOCK_M=64, PROGRAMS=264, SFU=x.is_cuda, num_warps=4, num_stages=3)"
    assert bench.launch_of(line) == ("_gemm_kernel0", {"BLOCK_M": 64, "PROGRAMS": 264, "SFU": True},
                                     {"num_warps": 4, "num_stages": 3}, ["*fp32"] * 3)
    made = "        w_desc = TensorDescriptor(w, [64, 32], [32, 1], [16, 32])\n"  # a TMA descriptor for w
    assert bench.launch_of(made + line)[3] == ["*fp32", "tensordesc<fp32[16, 32]>", "*fp32"]
    with pytest.raises(ValueError, match="gives meta-parameter ROWS as x.shape"):
        bench.launch_of(line.replace("PROGRAMS=264", "ROWS=x.shape[0]"))
    with pytest.raises(ValueError, match="launches no _gemm_kernel"):
        bench.launch_of("_row_kernel0[(1,)](x, BLOCK=4)")
