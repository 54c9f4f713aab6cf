"""The persistent worker mode: jobs share one warm process per slot, which is replaced after a crash or a
timeout, and every verdict is the same as with a fresh process per candidate."""
from pathlib import Path

from tools.evaluate import WarmWorker, device_name
from tools.results import EvalJob, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"
TASK = TaskSpec(str(FIXTURES / "task_softmax.py"))


def _job(candidate: str, **kw) -> EvalJob:
    return EvalJob(TASK, (FIXTURES / "candidates" / candidate).read_text(), trials=2, **kw)


def test_persistent_worker_keeps_its_process_and_is_replaced_after_a_crash_or_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    with WarmWorker(isolation="persistent") as worker:
        first = worker.run(_job("honest.py"))
        pid = worker.server.pid
        second = worker.run(_job("honest.py", profile=False))
        assert (first.verdict, second.verdict, worker.server.pid) == ("correct", "correct", pid)

        rejected = worker.run(_job("decoy_kernel.py", profile=False))
        assert rejected.verdict == "rejected" and worker.server.pid == pid  # a verdict, not a broken process

        crashed = worker.run(_job("illegal_address.py", profile=False))
        assert crashed.verdict == "crash" and worker.server is None  # replaced at the next job
        assert worker.run(_job("honest.py", profile=False)).correct and worker.server.pid != pid

        hung = worker.run(_job("hang.py", timeout_s=3, profile=False))  # it never returns: any limit will do
        assert hung.verdict == "timeout" and worker.server is None
        after = worker.run(_job("honest.py"))
        assert after.correct and after.timing.ms > 0


def test_unknown_isolation_is_a_clear_error(monkeypatch):
    import pytest
    monkeypatch.setenv("KERNELWRIGHT_ISOLATION", "threads")
    with pytest.raises(ValueError, match="KERNELWRIGHT_ISOLATION must be one of fork, persistent"):
        WarmWorker()


def test_a_worker_lands_on_its_own_gpu_under_cuda_visible_devices(monkeypatch):
    """A benchmark gives each process one GPU with CUDA_VISIBLE_DEVICES; that process's GPU 0 is the one
    named there, not the machine's first (which a worker told "0" would share with another process)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert [device_name(0), device_name(1)] == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f2c")
    assert device_name(0) == "GPU-8f2c"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_name(1) == "1"


def test_what_a_task_s_first_call_sets_up_is_not_counted_against_the_candidate(tmp_path, monkeypatch):
    """torch.vmap registers Python kernels at its first call. Made by the reference during the trials, inside the
    watch on the candidate, it rejected every candidate of a vmap task ("Python operator registrations
    changed"); the reference now makes one call before the candidate's code runs."""
    from agent.analysis import analyze
    from agent.templates import matching
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    task = str(Path(__file__).parents[1] / "agent" / "fixtures" / "low_vmap.py")
    a = analyze(task, small=True)
    source = matching(a)[0].render(a, matching(a)[0].default(a))
    with WarmWorker(isolation="persistent") as worker:
        result = worker.run(EvalJob(TaskSpec(task), source, trials=2, profile=False))
    assert result.verdict == "correct", result.reason
