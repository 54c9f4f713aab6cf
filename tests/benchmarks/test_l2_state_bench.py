"""benchmarks/l2_state_bench.py without a GPU: bad sizes and a missing GPU each refused in one sentence, exit 2."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "l2_state_bench.py"


def _run(*args):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_sizes_that_are_not_whole_megabytes_are_refused():
    for sizes in ("32,1.5", "0", ""):
        done = _run("--sizes", sizes)
        assert done.returncode == 2 and done.stdout.strip().count("\n") == 0, sizes
        assert "whole MB counts" in done.stdout and "Traceback" not in done.stderr, sizes


def test_without_a_gpu_it_says_so_and_times_nothing():
    done = _run("--sizes", "16")
    assert done.returncode == 2 and "none is visible" in done.stdout and "|" not in done.stdout
    assert "Traceback" not in done.stderr
