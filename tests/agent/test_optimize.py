"""`kernelwright optimize` with no LLM configured: the template and parameter operators only, on a tiny
elementwise task in the Triton interpreter. It must stay within its budget, say once that no LLM is used,
and leave a best.py that the evaluator accepts as correct."""
import json
from pathlib import Path

import pytest

from agent.cli import main
from tools.evaluate import evaluate
from tools.results import EvalJob, TaskSpec

TASK = str(Path(__file__).parent / "fixtures" / "task_scale_shift.py")


@pytest.mark.slow
def test_optimize_without_llm_finishes_within_budget_and_writes_a_correct_best(tmp_path, capsys, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELWRIGHT_KB_DIR", str(tmp_path / "kb"))
    out = tmp_path / "out"
    assert main(["optimize", TASK, "--budget", "3", "--out", str(out), "--policy", "tree"]) == 0
    printed = capsys.readouterr().out

    assert printed.count("No LLM configured") == 1
    assert "template and parameter operators only" in printed
    assert "[3/3]" in printed and "[4/" not in printed
    assert "stopped: evaluation budget of 3 spent" in printed

    report = json.loads((out / "report.json").read_text())
    assert report["evaluated"] == 3 and report["llm"] is None and report["policy"] == "tree"
    assert sum(report["counts"].values()) == 3 and report["counts"]["correct"] >= 1
    assert report["best"]["interpreted"] is True and report["best"]["speedup_vs_eager"] is None
    operators = {n["operator"] for n in report["lineage"]["nodes"]}
    assert operators <= {"template", "param"}
    assert (out / "lineage.dot").read_text().startswith("digraph")

    best = (out / "best.py").read_text()
    result = evaluate(EvalJob(TaskSpec(TASK, name="scale_shift"), best, timeout_s=120, trials=1, profile=False))
    assert result.correct, result.reason
