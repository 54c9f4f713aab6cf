"""On a CUDA GPU: every task runs at its full size, and every hand-written candidate compiles and matches its
task there (fp32, TF32 off, the evaluator's relative-error bound). Skipped without a GPU.

Run on the GPU machine: pytest tests/tasks/test_tasks_gpu.py -q   (about 10 s on an H200)
"""
from __future__ import annotations

import pytest
import torch

from taskfiles import CANDIDATE_FILES, TASK_FILES, family_of, load_candidate, load_task

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
REL_ERR_BOUND = 2e-5  # tools/verify.py's bound on ||out - ref|| / ||ref|| for fp32


@pytest.fixture(autouse=True)
def fp32_without_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    torch.cuda.empty_cache()


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_runs_at_full_size(name):
    task = load_task(name, small=False)
    with torch.device("cuda"):
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs())
        inputs = task.get_inputs()
    assert all(x.is_cuda for x in inputs)
    with torch.no_grad():
        out = model(*inputs)
    assert out.is_cuda
    if family_of(task) != "argreduce":
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", CANDIDATE_FILES)
def test_candidate_matches_task_at_full_size(name):
    task, candidate = load_task(name, small=False), load_candidate(name)
    with torch.device("cuda"):
        torch.manual_seed(0)
        reference = task.Model(*task.get_init_inputs())
        torch.manual_seed(0)
        new = candidate.ModelNew(*task.get_init_inputs())
        torch.manual_seed(1)
        inputs = task.get_inputs()
    with torch.no_grad():
        expected = reference(*inputs)
        out = new(*inputs)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    rel = ((out.double() - expected.double()).norm() / expected.double().norm()).item()
    assert rel < REL_ERR_BOUND, rel
