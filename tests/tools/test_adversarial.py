"""Every trick in the adversarial suite gets the verdict it deserves; the honest kernels pass."""
from pathlib import Path

import pytest
import torch

from tools.evaluate import WarmWorker
from tools.executor import ExecutorConfig, LocalExecutor
from tools.results import EvalJob, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"
HAS_GPU = torch.cuda.is_available()
SECRET = "sk-test-not-for-candidates-1234"

# candidate, task, expected verdict, a fragment the reason must contain
CASES = [
    ("honest.py", "task_softmax.py", "correct", "Correct on every trial"),
    ("honest_identity.py", "task_identity.py", "correct", "Correct"),
    ("linear_relu_declared_mm.py", "task_linear_relu.py", "correct", "Correct"),
    ("no_kernel.py", "task_softmax.py", "rejected", "calls torch.softmax"),  # the candidate language
    ("decoy_kernel.py", "task_softmax.py", "rejected", "calls torch.softmax"),
    ("decomposed_fallback.py", "task_softmax.py", "rejected", "calls .amax()"),
    ("undeclarable_op.py", "task_softmax.py", "rejected", "calls torch.softmax"),
    ("matmul_declared_mm.py", "task_matmul.py", "rejected", "every op of the task ran in PyTorch"),
    ("zeros_output.py", "task_softmax.py", "incorrect", "relative error 1.00e+00"),
    ("constant_output.py", "task_softmax.py", "incorrect", "differs from the reference"),
    ("unwritten_rows.py", "task_softmax.py", "incorrect", "NaN or Inf"),
    ("nan_output.py", "task_softmax.py", "incorrect", "NaN or Inf"),
    ("slightly_off.py", "task_softmax.py", "incorrect", "differs from the reference"),
    ("cached_output.py", "task_softmax.py", "rejected", "never launched a Triton kernel"),  # on its 2nd call
    ("mutates_input.py", "task_softmax.py", "rejected", "modified its input 0"),
    ("alias_identity.py", "task_identity.py", "rejected", "shares memory with an input"),
    ("monkeypatch.py", "task_softmax.py", "rejected", "monkeypatch"),
    ("tf32_switch.py", "task_softmax.py", "rejected", "monkeypatch"),
    ("side_stream.py", "task_softmax.py", "rejected", "side-stream"),
    ("evaluator_access.py", "task_softmax.py", "rejected", "evaluator-access"),
    ("frame_peek.py", "task_softmax.py", "rejected", "introspection"),
    ("reference_swap.py", "task_softmax.py", "rejected", "introspection"),
    ("imported_class_patch.py", "task_softmax.py", "rejected", "python-internals"),
    ("hang.py", "task_softmax.py", "timeout", "did not finish within"),
    # A store far outside any allocation: the interpreter's process dies; on a GPU, an illegal address.
    ("illegal_address.py", "task_softmax.py", "crash", "illegal memory access" if HAS_GPU else "SIGSEGV"),
    ("raises.py", "task_softmax.py", "crash", "index out of range in the wrapper"),
    # Triton reports a kernel that does not compile at its first launch: a compile error on a GPU, an
    # InterpreterError (the same NameError) in the interpreter.
    ("compile_error.py", "task_softmax.py", *(("error", "did not compile") if HAS_GPU else ("crash", "NameError"))),
    ("syntax_error.py", "task_softmax.py", "error", "SyntaxError"),
    ("no_modelnew.py", "task_softmax.py", "error", "no class ModelNew"),
    ("reads_secret.py", "task_softmax.py", "rejected", "imports"),
    ("writes_result.py", "task_softmax.py", "rejected", "builtins"),
]


@pytest.fixture(scope="module", params=["persistent", "fork"])
def results(request, monkeypatch_module):
    monkeypatch_module.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch_module.setenv("MY_SERVICE_TOKEN", SECRET)
    jobs = []
    for candidate, task, verdict, _ in CASES:
        jobs.append(EvalJob(TaskSpec(str(FIXTURES / task)), (FIXTURES / "candidates" / candidate).read_text(),
                            timeout_s=25 if candidate == "hang.py" else 180, trials=3,
                            profile=verdict == "correct"))
    with LocalExecutor(ExecutorConfig(workers_per_device=2, isolation=request.param)) as ex:
        return dict(zip([c[0] for c in CASES], ex.map(jobs)))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("candidate,task,verdict,fragment", CASES, ids=[c[0] for c in CASES])
def test_verdict(results, candidate, task, verdict, fragment):
    r = results[candidate]
    assert (r.verdict, fragment in r.reason) == (verdict, True), r.reason


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


def test_results_cached_by_address_never_pass():
    """Caught whichever way the cache shows itself: a repeat call on the same inputs launches no kernel, a
    trial handed a reused address gets a stale answer, and the check after timing writes new values into
    the same input tensors."""
    source = (FIXTURES / "candidates" / "pointer_cache.py").read_text()
    with LocalExecutor() as ex:
        r = ex.submit(EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")), source, trials=3)).result()
    assert r.verdict in ("incorrect", "rejected"), r.reason
    catches = ("never launched a Triton kernel", "differs from the reference", "reuses earlier results",
               ".data_ptr")  # the last: the candidate language, before it runs
    assert any(c in r.reason for c in catches), r.reason


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
