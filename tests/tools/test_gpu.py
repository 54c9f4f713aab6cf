"""What only a GPU can show: runtime stream checks, illegal addresses, real timings and floors."""
from pathlib import Path

import pytest

from tools.evaluate import evaluate
from tools.results import EvalJob, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.gpu


def _eval(candidate: str, task: str = "task_softmax.py", **kw):
    return evaluate(EvalJob(TaskSpec(str(FIXTURES / task)), (FIXTURES / "candidates" / candidate).read_text(), **kw))


def test_hidden_side_stream_is_rejected_at_run_time():
    r = _eval("side_stream_hidden.py", profile=False)
    assert r.verdict == "rejected" and "stream" in r.reason, r.reason


def test_illegal_address_is_a_crash_and_the_next_candidate_is_unaffected():
    r = _eval("illegal_address.py", profile=False)
    assert r.verdict == "crash", r.reason
    assert _eval("honest.py", profile=False).verdict == "correct"


def test_gpu_timing_has_baselines_floor_and_speedups():
    r = _eval("honest.py")
    t = r.timing
    assert r.correct and not t.interpreted and not r.interpreted
    assert t.ms > 0 and t.eager_ms > 0 and t.floor_ms > 0 and t.speedup_vs_eager == pytest.approx(t.eager_ms / t.ms)
    assert r.compile.kernels[0].registers > 0


def test_host_time_before_a_launch_does_not_show_in_its_gpu_time():
    import time

    import torch

    from tools.profile import time_call
    x = torch.zeros(1024, device="cuda")

    def slow_host_call():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 3e-4:  # 0.3 ms of host work, then one small kernel
            pass
        x.add_(1.0)
    assert time_call(slow_host_call, torch.device("cuda")).median_ms < 0.1
