"""Every seed kernel under the Triton interpreter, against PyTorch, at small irregular shapes.

The checks live in seed_kernel_checks.py and run in one child process with TRITON_INTERPRET=1, since
triton reads that variable when it is first imported and another test may have imported it already.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge.code import kernel_header
from knowledge.corpus import KERNELS_DIR, seed_kernels

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from seed_kernel_checks import CHECKS  # noqa: E402

sys.path.remove(str(HERE))


@pytest.fixture(scope="module")
def outcomes():
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, str(HERE / "seed_kernel_checks.py")], capture_output=True, text=True,
                         env=env, timeout=300, cwd=HERE.parents[1])
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_seed_kernel_has_a_header_and_checks():
    names = {p.stem for p in KERNELS_DIR.glob("*.py") if not p.name.startswith("_")}
    checked = {name.split("[")[0] for name in CHECKS} | {"softmax_row", "softmax_online"}
    assert names <= checked
    for k in seed_kernels():
        head = kernel_header(k.source)
        assert {"family", "dtype", "arch", "params"} <= head.keys(), k.id
        assert "Reference (PyTorch)" in k.source, k.id


@pytest.mark.parametrize("check", list(CHECKS))
def test_seed_kernel_matches_pytorch(outcomes, check):
    assert outcomes[check] == "ok", outcomes[check]
