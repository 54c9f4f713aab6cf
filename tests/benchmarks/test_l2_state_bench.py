"""benchmarks/l2_state_bench.py without a GPU: bad sizes and a missing GPU each refused in one sentence, exit 2."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "l2_state_bench.py"


def bench():
    spec = importlib.util.spec_from_file_location("l2_state_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_sizes_that_are_not_whole_megabytes_are_refused(capsys):
    """The real command once (its exit code), the other bad sizes through main() in this process: they are
    refused before anything looks for a GPU."""
    done = _run("--sizes", "32,1.5")
    assert done.returncode == 2 and done.stdout.strip().count("\n") == 0
    assert "whole MB counts" in done.stdout and "Traceback" not in done.stderr
    for sizes in ("0", ""):
        assert bench().main(["--sizes", sizes]) == 2, sizes
        said = capsys.readouterr().out
        assert said.strip().count("\n") == 0 and "whole MB counts" in said, sizes


def test_without_a_gpu_it_says_so_and_times_nothing():
    done = _run("--sizes", "16")
    assert done.returncode == 2 and "none is visible" in done.stdout and "|" not in done.stdout
    assert "Traceback" not in done.stderr
