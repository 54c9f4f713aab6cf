"""`kernelwright eval --deep N`: a kernel wrong only in a rare input region (a softmax stabilized by the row's
first element: exp overflows once a row spreads past 88, which the trials never reach) passes the trials and
fails --deep, which names the worst input set and the trial seed that replays it; an honest kernel passes."""
from pathlib import Path

import pytest

from tools.deep import DEEP_SCALES, deep_draw
from tools.inputs import PATTERNS
from tools.results import EvalJob, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 20240611


@pytest.fixture(scope="module")
def results(warm_executor):
    task = TaskSpec(str(FIXTURES / "task_softmax.py"))
    rare, honest = ((FIXTURES / "candidates" / name).read_text() for name in ("softmax_first_element.py", "honest.py"))
    jobs = {"rare --deep": EvalJob(task, rare, trials=4, trial_seed=SEED, profile=False, deep=4),
            "honest --deep": EvalJob(task, honest, trials=3, profile=False, deep=4)}
    return dict(zip(jobs, warm_executor.map(list(jobs.values()))))


def test_deep_finds_what_the_trials_pass_and_names_the_worst_input_and_seed(results):
    r = results["rare --deep"]  # --deep runs only once all four trials have passed
    assert r.verdict == "incorrect" and "under --deep" in r.reason and f"trial seed {SEED}" in r.reason, r.reason
    d = r.deep
    assert d.sets == 4 and d.failed >= 1 and d.worst_verdict == "incorrect" and "NaN or Inf" in d.worst_reason
    assert "x1000" in d.worst_input and f"trial seed {SEED}" in d.worst_input, d.worst_input


def test_a_correct_kernel_passes_deep_with_its_worst_error(results):
    r = results["honest --deep"]
    assert r.verdict == "correct" and "4 --deep input sets" in r.reason, r.reason
    d = r.deep
    assert (d.sets, d.failed, d.worst_verdict) == (4, 0, "") and 0 <= d.worst_rel_err < 2e-5
    assert d.worst_input.startswith("deep set ") and "trial seed" in d.worst_input


def test_deep_sets_cover_the_input_space_and_replay_from_the_seed():
    draws = [deep_draw(SEED, i, True, "") for i in range(len(DEEP_SCALES) * len(PATTERNS))]
    assert {(d.scale, d.pattern) for d in draws} == {(s, p) for s in DEEP_SCALES for p in PATTERNS}
    assert draws == [deep_draw(SEED, i, True, "") for i in range(len(draws))]
    assert len({d.seed for d in draws}) == len(draws)
    assert {deep_draw(SEED, i, False, "").scale for i in range(8)} == {1.0}  # cumprod-like tasks: seeds only
