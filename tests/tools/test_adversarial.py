"""Every trick in the adversarial suite gets the verdict it deserves; the honest kernels pass."""
import tomllib
from pathlib import Path

import pytest
import torch

from tools.evaluate import WarmWorker
from tools.executor import ExecutorConfig, LocalExecutor
from tools.results import EvalJob, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"
HAS_GPU = torch.cuda.is_available()
SECRET = "sk-test-not-for-candidates-1234"


def _case(c: dict) -> tuple:
    """(candidate, task, expected verdict, fragments the reason must contain, timeout) on this device."""
    c = c | (c.get("cpu", {}) if not HAS_GPU else {})
    return c["candidate"], c["task"], c["verdict"], c["reason"], c.get("timeout_s", 180)


CASES = [_case(c) for c in tomllib.loads((FIXTURES / "cases.toml").read_text())["case"]
         if c["test"] == "test_adversarial.py::test_verdict"]


@pytest.fixture(scope="module", params=["persistent", "fork"])
def results(request, monkeypatch_module):
    monkeypatch_module.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch_module.setenv("MY_SERVICE_TOKEN", SECRET)
    jobs = []
    for candidate, task, verdict, _, timeout_s in CASES:
        jobs.append(EvalJob(TaskSpec(str(FIXTURES / task)), (FIXTURES / "candidates" / candidate).read_text(),
                            timeout_s=timeout_s, trials=3, profile=verdict == "correct"))
    with LocalExecutor(ExecutorConfig(workers_per_device=2, isolation=request.param)) as ex:
        return dict(zip([c[0] for c in CASES], ex.map(jobs)))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("candidate,task,verdict,fragments,timeout_s", CASES, ids=[c[0] for c in CASES])
def test_verdict(results, candidate, task, verdict, fragments, timeout_s):
    r = results[candidate]
    assert (r.verdict, all(f in r.reason for f in fragments)) == (verdict, True), r.reason


def test_secrets_never_reach_the_worker(monkeypatch, tmp_path):
    """Candidates run in children of the worker's server: its environment is what they could read."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET)
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    with WarmWorker() as worker:
        job = EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")), (FIXTURES / "candidates" / "honest.py").read_text(),
                      trials=1, profile=False)
        assert worker.run(job).correct
        environ = Path(f"/proc/{worker.server.pid}/environ").read_bytes().decode(errors="replace")
    assert SECRET not in environ and "OPENAI_API_KEY" not in environ and "MY_SERVICE_TOKEN" not in environ


def test_declared_gemm_is_reported(results):
    assert results["linear_relu_declared_mm.py"].torch_ops == ["aten.mm"]
    assert results["honest.py"].torch_ops == []


def test_correct_result_carries_interpreter_timing_and_compile_metadata(results):
    r = results["honest.py"]
    assert r.interpreted and r.timing.interpreted and r.timing.ms > 0
    assert r.timing.speedup_vs_eager is None and r.timing.floor_ms is None  # never a speedup on a CPU
    assert r.rel_err < 1e-6
    (kernel,) = r.compile.kernels
    assert kernel.name == "softmax_kernel" and kernel.num_warps == 4
    if "compiled for sm_90" in r.compile.source:
        assert kernel.registers > 0 and kernel.spills == 0
    else:
        assert r.compile.source.startswith("not available")


def test_results_cached_by_address_never_pass(warm_executor):
    """Caught whichever way the cache shows itself: a repeat call on the same inputs launches no kernel, a
    trial handed a reused address gets a stale answer, and the check after timing writes new values into
    the same input tensors."""
    source = (FIXTURES / "candidates" / "pointer_cache.py").read_text()
    r = warm_executor.submit(EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")), source, trials=3)).result()
    assert r.verdict in ("incorrect", "rejected"), r.reason
    catches = ("never launched a Triton kernel", "differs from the reference", "reuses earlier results",
               ".data_ptr")  # the last: the candidate language, before it runs
    assert any(c in r.reason for c in catches), r.reason


def test_a_result_kept_while_a_sample_of_the_inputs_reads_the_same_never_passes(warm_executor):
    """A cache checked against every 64th input element passes the trials (their changes cross the sample) and
    would time as a read of 64 elements; after the timing, single elements change, and it returns the old sum."""
    source = (FIXTURES / "candidates" / "sampled_cache.py").read_text()
    r = warm_executor.submit(EvalJob(TaskSpec(str(FIXTURES / "task_sum_dim1.py")), source, trials=3)).result()
    assert (r.verdict, "reuses earlier results" in r.reason) == ("rejected", True), r.reason


def test_a_result_file_counts_only_from_a_worker_that_finished(tmp_path):
    """Defence in depth behind the static rules: a result.json left by a child that did not exit cleanly
    (a candidate that wrote one and left) is never read."""
    from tools.evaluate import _read_result
    from tools.sandbox import SandboxResult
    fake = tmp_path / "result.json"
    fake.write_text('{"verdict": "correct", "reason": "Correct on every trial."}')
    assert _read_result(str(fake), SandboxResult(1, "", False), 60).verdict == "crash"
    assert _read_result(str(fake), SandboxResult(-11, "", False), 60).verdict == "crash"
    assert _read_result(str(fake), SandboxResult(0, "", False), 60).verdict == "correct"


def test_a_candidate_may_import_only_what_its_task_imports():
    """A candidate carries its task's code, so the task's own imports (numpy, einops, ...) are allowed, and
    nothing beyond them."""
    from tools.rules import check_source
    candidate = "import numpy as np\nimport torch\nimport triton\n"
    assert "imports" in check_source(candidate)
    assert check_source(candidate, task_source="import torch\nimport numpy\n") is None
    assert "imports" in check_source(candidate + "import ctypes_free_module\n", task_source="import numpy\n")
