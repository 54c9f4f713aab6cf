"""A persistent worker proves it is clean (tools/clean.py): a candidate that changes the process's global state is
`rejected` with what it changed, and the next candidates get the verdicts a fresh worker gives them. Each job
compiles into its own Triton cache (tools/triton_cache.py)."""
import os
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from tools.clean import changes, snapshot
from tools.evaluate import WarmWorker
from tools.results import EvalJob, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"


def _job(candidate: str, task: str) -> EvalJob:
    return EvalJob(TaskSpec(str(FIXTURES / task)), (FIXTURES / "candidates" / candidate).read_text(), trials=2,
                   profile=False)


def test_a_candidate_that_leaves_a_global_hook_is_rejected_and_the_worker_replaced(tmp_path, monkeypatch):
    """The hook comes from code its task file carries (exempt from the candidate language, as the task's own),
    so only the worker's snapshot can see it. Kept warm, the worker would hand the next task's reference zeros:
    a kernel writing zeros would pass and an honest one fail."""
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    with WarmWorker(isolation="persistent") as worker:
        assert worker.run(_job("honest.py", "task_softmax.py")).correct
        pid = worker.server.pid
        hooked = worker.run(_job("hook_via_task_helper.py", "task_softmax_helpers.py"))
        assert hooked.verdict == "rejected", hooked.reason
        assert "global state" in hooked.reason and "_global_forward_hooks" in hooked.reason, hooked.reason
        assert worker.server is None  # replaced at the next job
        zeros = worker.run(_job("zeros_identity.py", "task_identity.py"))
        honest = worker.run(_job("honest_identity.py", "task_identity.py"))
        assert worker.server.pid != pid
    assert zeros.verdict == "incorrect" and honest.verdict == "correct", (zeros.reason, honest.reason)


def test_honest_candidates_leave_the_worker_clean(tmp_path, monkeypatch):
    """Verification and timing (the compiled baseline included) change nothing the snapshot watches."""
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    with WarmWorker(isolation="persistent") as worker:
        first = worker.run(EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")),
                                   (FIXTURES / "candidates" / "honest.py").read_text(), trials=2, profile=True))
        pid = worker.server.pid
        second = worker.run(_job("linear_relu_declared_mm.py", "task_linear_relu.py"))
        assert (first.verdict, second.verdict, worker.server.pid) == ("correct", "correct", pid), second.reason


@pytest.mark.parametrize("change, expected", [
    (lambda: setattr(torch, "softmax", lambda *a, **k: None), "torch.softmax was rebound"),
    (lambda: setattr(torch.nn.functional, "relu", torch.nn.functional.relu6), "torch.nn.functional.relu was rebound"),
    (lambda: torch.set_default_dtype(torch.float64), "default dtype changed from torch.float32 to torch.float64"),
    (lambda: torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: o),
     "torch.nn.modules.module._global_forward_hooks"),
    (lambda: setattr(torch.Tensor, "kw_probe", 1), "torch.Tensor.kw_probe was added"),
    (lambda: torch.set_float32_matmul_precision("medium"), "float32 matmul precision changed"),
    (lambda: torch.set_grad_enabled(False), "grad mode changed from True to False"),
    (lambda: setattr(torch.nn.LayerNorm, "forward", torch.nn.Identity.forward),
     "torch.nn.LayerNorm.forward was rebound"),
])
def test_the_snapshot_names_each_change(change, expected):
    saved = torch.softmax, torch.nn.functional.relu, torch.get_default_dtype(), torch.get_float32_matmul_precision()
    layer_norm = torch.nn.LayerNorm.forward
    before = snapshot()
    handle = change()
    try:
        found = changes(before, snapshot())
        assert any(expected in c for c in found), found
    finally:
        if hasattr(handle, "remove"):
            handle.remove()
        if hasattr(torch.Tensor, "kw_probe"):
            del torch.Tensor.kw_probe
        torch.softmax, torch.nn.functional.relu, torch.nn.LayerNorm.forward = *saved[:2], layer_norm
        torch.set_default_dtype(saved[2])
        torch.set_float32_matmul_precision(saved[3])
        torch.set_grad_enabled(True)
    assert changes(before, snapshot()) == []  # and undone, nothing is left


def test_the_evaluator_s_code_and_tables_changed_in_place_are_changes():
    """A function's code swapped (its identity kept) and a constant table widened in place: the two ways a
    candidate that reached Python's builtins made the evaluator pass the candidates after it."""
    import tools.compare
    import tools.verify
    judge_code, loose = tools.verify.judge.__code__, tools.compare.TOLERANCES[torch.float32]
    before = snapshot()
    tools.verify.judge.__code__ = (lambda setup, inputs, out, expected, checked: None).__code__
    tools.compare.TOLERANCES[torch.float32] = (1.0, 1.0, 1.0)
    try:
        found = changes(before, snapshot())
        assert {"tools.compare.TOLERANCES was changed in place", "tools.verify.judge was changed in place"} <= \
            set(found), found
    finally:
        tools.verify.judge.__code__, tools.compare.TOLERANCES[torch.float32] = judge_code, loose
    assert changes(before, snapshot()) == []


def test_the_evaluator_s_own_caches_filling_are_no_change():
    """Private tables the evaluator fills as it runs (a GPU's spin-loop rate, its default stream): on an H100 the
    first snapshot that read them rejected every honest candidate."""
    import tools.profile
    before = snapshot()
    tools.profile._CYCLES_PER_MS[99] = 1.0
    try:
        assert changes(before, snapshot()) == []
    finally:
        del tools.profile._CYCLES_PER_MS[99]


@triton.jit
def _identity_kernel(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr))


def test_what_triton_and_copy_do_on_their_own_is_no_change():
    """Seen on an H200: Triton's driver loads each new kernel's launcher as the module __triton_launcher, and
    a first copy of a JITFunction caches JITFunction.__slotnames__; every honest kernel did both."""
    import copy
    import types

    before = snapshot()
    saved = sys.modules.get("__triton_launcher")
    sys.modules["__triton_launcher"] = types.ModuleType("__triton_launcher")
    had = "__slotnames__" in vars(triton.runtime.jit.JITFunction)
    try:
        copy.copy(_identity_kernel)
        assert changes(before, snapshot()) == []
        triton.runtime.jit.JITFunction.kw_probe = 1  # a name of the candidate's own still counts
        assert changes(before, snapshot()) == ["triton.runtime.jit.JITFunction.kw_probe was added"]
    finally:
        if hasattr(triton.runtime.jit.JITFunction, "kw_probe"):
            del triton.runtime.jit.JITFunction.kw_probe
        if not had and "__slotnames__" in vars(triton.runtime.jit.JITFunction):
            del triton.runtime.jit.JITFunction.__slotnames__
        if saved is None:
            sys.modules.pop("__triton_launcher", None)
        else:
            sys.modules["__triton_launcher"] = saved


def test_a_graph_compiled_again_is_no_change_and_a_module_replaced_is():
    """torch.compile of a graph compiled before loads its Inductor kernel as a new module of compile_tasks (the
    evaluator's baseline, measured again in a later job of the worker); any other module replaced is a change."""
    import types

    x = torch.randn(8, 16)
    torch.compile(lambda t: torch.softmax(t * 3.0, -1))(x)
    before = snapshot()
    torch.compile(lambda t: torch.softmax(t * 3.0, -1))(x)  # the same graph, compiled anew
    reloaded = [k for k, v in sys.modules.items() if k.startswith("torch._inductor.runtime.compile_tasks.")
                and id(v) != before["modules"].get(k, id(v))]
    assert reloaded and changes(before, snapshot()) == []
    saved = sys.modules["json"]
    sys.modules["json"] = types.ModuleType("json")
    try:
        assert changes(before, snapshot()) == ["the module json was replaced in sys.modules"]
    finally:
        sys.modules["json"] = saved


def test_each_job_compiles_into_its_own_triton_cache(tmp_path, monkeypatch):
    """Kernels land in the job's directory (deleted with it); only Triton's own driver modules are shared."""
    from triton.runtime.cache import get_cache_manager
    job, shared = tmp_path / "job", tmp_path / "shared"
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "tools.triton_cache:JobCache")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(job))
    monkeypatch.setenv("KERNELWRIGHT_TRITON_SHARED", str(shared))
    cache = get_cache_manager("ab" * 32)
    kernel = cache.put(b"cubin", "softmax_kernel.cubin")
    driver = cache.put(b"elf", "cuda_utils" + sysconfig.get_config_var("EXT_SUFFIX"))
    assert kernel.startswith(str(job)) and driver.startswith(str(shared)), (kernel, driver)
    assert cache.get_file("softmax_kernel.cubin") == kernel and Path(driver).read_bytes() == b"elf"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "next_job"))
    later = get_cache_manager("ab" * 32)
    assert later.get_file("softmax_kernel.cubin") is None and later.get_file(os.path.basename(driver)) == driver
