"""Each verdict says what it can vouch for: `verified_on` is "gpu" or "interpreter" ("" where no worker gave
one); on a CPU the verdict says that it is not tamper-proof and that races and TF32 are not checked, and
`kernelwright eval`, the optimize and batch reports and `ci` show the kind. The CPU's compile metadata is
compiled by the parent after the verdict, outside the candidate's time."""
from pathlib import Path

import pytest

from agent.report_html import TaskRow, row_from_report
from tools.cli_eval import summary
from tools.compile_info import PENDING
from tools.results import VERIFIED_ON, DeepCheck, EvalJob, EvalResult, TaskSpec

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def honest(warm_executor):
    return warm_executor.submit(EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")),
                                        (FIXTURES / "candidates" / "honest.py").read_text(), trials=2)).result()


def test_a_cpu_verdict_says_what_it_cannot_see(honest):
    assert honest.verdict == "correct" and honest.verified_on == "interpreter"
    assert "not tamper-proof" in honest.reason and "races and TF32 are not checked" in honest.reason, honest.reason
    assert f"verified on: interpreter ({VERIFIED_ON['interpreter']})" in summary(honest)


def test_compile_metadata_comes_after_the_verdict(honest):
    assert honest.compile is not None and honest.compile.source != PENDING
    assert "compile_info" in honest.phase_seconds and "verify" in honest.phase_seconds


def test_a_correctness_check_without_a_profile_compiles_nothing(warm_executor):
    job = EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")), (FIXTURES / "candidates" / "honest.py").read_text(),
                  trials=1, profile=False)
    r = warm_executor.submit(job).result()
    assert r.correct and r.compile is None and "compile_info" not in r.phase_seconds


def test_the_kind_survives_the_wire_and_reaches_the_reports(tmp_path):
    deep = DeepCheck(3, 1, 0.5, 2.0, "deep set 1 of 3: plain inputs x1000; trial seed 7", "incorrect", "Incorrect: x.")
    r = EvalResult("correct", "ok", verified_on="interpreter", deep=deep)
    back = EvalResult.from_json(r.to_json())
    assert back.verified_on == "interpreter" and back.deep == deep
    assert EvalResult("timeout", "killed").verified_on == ""
    report = {"best": {"id": 1, "ms": 3.0, "interpreted": True, "device": "cpu (Triton interpreter)",
                       "verified_on": "interpreter"}, "counts": {"correct": 1},
              "lineage": {"nodes": [{"id": 1, "status": "evaluated", "verdict": "correct", "ms": 3.0}]}}
    row = row_from_report("t", "t.py", report, tmp_path, tmp_path, 1.0)
    assert row.verified_on == "interpreter" and "interpreter verdict" in row.brief()
    assert TaskRow.from_json(row.to_json()).verified_on == "interpreter"
