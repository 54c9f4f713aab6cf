"""tools/score.py: speedups, kept kernels, geomeans, fast_p and correctness rate on hand-worked suites."""
import math

import pytest

from tools.score import Outcome, correctness_rate, fast_p, geomean, kept_speedup, kernel_kept, speedup, summarize

# eager / compile / kernel ms; speedups vs eager: 2.0, 1.25, 0.5; vs compile: 1.0, 2.0, 0.25
FAST = Outcome(correct=True, ms=1.0, eager_ms=2.0, compile_ms=1.0)
MID = Outcome(correct=True, ms=0.8, eager_ms=1.0, compile_ms=1.6)
SLOW = Outcome(correct=True, ms=4.0, eager_ms=2.0, compile_ms=1.0)
WRONG = Outcome(correct=False, ms=0.1, eager_ms=2.0, compile_ms=2.0)  # fast but incorrect: never counts
NONE = Outcome(correct=False)
SUITE = [FAST, MID, SLOW, WRONG, NONE]


def test_speedup_is_baseline_over_kernel_for_correct_gpu_kernels_only():
    assert speedup(FAST) == 2.0 and speedup(FAST, "compile") == 1.0
    assert speedup(MID) == pytest.approx(1.25) and speedup(MID, "compile") == pytest.approx(2.0)
    assert speedup(WRONG) is None and speedup(NONE, "compile") is None
    assert speedup(Outcome(True, ms=1.0, eager_ms=2.0, compile_ms=None), "compile") is None
    with pytest.raises(ValueError):
        speedup(FAST, "inductor")


def test_interpreter_times_never_give_a_speedup():
    cpu = Outcome(correct=True, ms=1.2, eager_ms=0.01, interpreted=True)
    assert speedup(cpu) is None and kept_speedup(cpu) is None and kernel_kept(cpu) is None
    assert fast_p([cpu], 1.0) is None and fast_p([cpu], 0.0) is None
    s = summarize([cpu, NONE])
    assert s.interpreted and s.correctness_rate == 0.5 and s.kept is None
    assert all(v is None for v in list(s.fast_p.values()) + list(s.geomean.values()))


def test_a_kernel_slower_than_eager_is_not_kept_and_counts_as_no_improvement():
    assert [kernel_kept(o) for o in SUITE] == [True, True, False, False, False]
    assert kept_speedup(SLOW) == 1.0  # 0.5x: PyTorch is kept
    assert kept_speedup(SLOW, "compile") == pytest.approx(0.5)  # what is kept, eager, against torch.compile
    assert kept_speedup(WRONG) == 1.0 and kept_speedup(WRONG, "compile") == pytest.approx(1.0)
    assert kept_speedup(NONE) == 1.0 and kept_speedup(NONE, "compile") is None
    assert kept_speedup(FAST) == 2.0 and kept_speedup(MID, "compile") == pytest.approx(2.0)
    assert kept_speedup(Outcome(True, ms=1.0, eager_ms=1.0, compile_ms=2.0), "compile") == 2.0
    with pytest.raises(ValueError):
        kept_speedup(FAST, "inductor")


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, 3.0, None]) == pytest.approx(3.0)
    assert geomean([]) is None and geomean([None]) is None


def test_fast_p_counts_correct_and_strictly_faster_over_all_tasks():
    assert correctness_rate(SUITE) == pytest.approx(3 / 5)
    assert fast_p(SUITE, 0.0) == pytest.approx(3 / 5)  # fast_0 is the correctness rate
    assert fast_p(SUITE, 1.0) == pytest.approx(2 / 5)  # 2.0 and 1.25
    assert fast_p(SUITE, 1.25) == pytest.approx(1 / 5)  # strictly greater: 1.25 does not count
    assert fast_p(SUITE, 2.0) == 0.0
    assert fast_p(SUITE, 1.0, baseline="compile") == pytest.approx(1 / 5)  # only MID (2.0); FAST is 1.0
    assert fast_p([], 1.0) is None and correctness_rate([]) is None


def test_summary_in_kernelbench_convention():
    s = summarize(SUITE)
    assert (s.tasks, s.correct, s.interpreted) == (5, 3, False)
    assert s.fast_p == pytest.approx({"eager@1": 0.4, "eager@1.5": 0.2, "eager@2": 0.0,
                                      "compile@1": 0.2, "compile@1.5": 0.2, "compile@2": 0.0})
    assert s.kept == 2  # SLOW is correct but slower than eager
    assert s.geomean["eager"] == pytest.approx(math.exp(math.log(2.0 * 1.25) / 5))  # every task, none below 1.0x
    assert s.geomean["compile"] == pytest.approx((1.0 * 2.0 * 0.5 * 1.0) ** (1 / 4))  # NONE has no times
    assert s.to_json()["fast_p"]["eager@1"] == pytest.approx(0.4)
