"""Resume after a kill: `kernelwright optimize` runs in a subprocess driven by the scripted LLM server, is
killed (SIGKILL, no chance to clean up) while a candidate is being evaluated, then resumed. Nothing is lost
(the evaluated candidates keep their results) and nothing is repeated (each candidate is evaluated once,
and the one left mid-evaluation is evaluated before anything new is proposed)."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from openai_server import ScriptedOpenAI, tool_calls

FIX = Path(__file__).parent / "fixtures"
TASK = str(FIX / "task_scale_shift.py")
GOOD = (FIX / "scale_shift_good.py").read_text()
BUDGET = 3


def _variant(request: dict, n: int):
    """Every conversation submits at once: the fixed kernel with another block size (unique source)."""
    block = 2 ** (4 + n % 6)
    return tool_calls(("submit_candidate", {"source": f"# variant {n}\n" + GOOD.replace("128", str(block)),
                                            "note": f"BLOCK={block}"}))


def _rows(db: Path) -> dict[int, tuple]:
    with sqlite3.connect(db) as c:
        return {r[0]: r[1:] for r in c.execute("SELECT id, status, evaluated_at, proposed_at FROM candidates")}


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_repeating_evaluations(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "agent.cli", "optimize", TASK, "--budget", str(BUDGET), "--batch-size", "1",
           "--plateau", "0", "--model", "scripted-model", "--out", str(out), "--no-knowledge"]
    with ScriptedOpenAI(responder=_variant) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": server.key}
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                 cwd=tmp_path, start_new_session=True)
        before = []
        try:
            for line in first.stdout:
                before.append(line)
                if line.startswith("evaluating #2"):  # #1 is stored, #2 is mid-evaluation
                    os.killpg(first.pid, signal.SIGKILL)
                    break
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL, "".join(before)

        rows = _rows(out / "run.sqlite")
        assert [(i, rows[i][0]) for i in sorted(rows)] == [(1, "evaluated"), (2, "proposed")]

        resumed = subprocess.run(cmd[:-3] + ["--resume", str(out), "--no-knowledge"], capture_output=True,
                                 text=True, env=env, cwd=tmp_path, timeout=300)
    after = resumed.stdout
    assert resumed.returncode == 0, after + resumed.stderr
    assert "resuming run" in after and "1 evaluated, 1 proposed but not evaluated" in after

    final = _rows(out / "run.sqlite")
    assert sorted(final) == list(range(1, BUDGET + 1))
    assert all(status == "evaluated" for status, _, _ in final.values())
    assert final[1] == rows[1]  # the result from before the kill is untouched
    assert final[2][1] < final[3][2]  # the leftover was evaluated before #3 was proposed
    progress = re.findall(r"^\[\d+/\d+\] #(\d+) ", "".join(before) + after, flags=re.M)
    assert sorted(map(int, progress)) == list(range(1, BUDGET + 1))  # each evaluated exactly once

    report = json.loads((out / "report.json").read_text())
    assert report["evaluated"] == BUDGET and report["counts"]["proposed"] == 0
    assert len(report["lineage"]["nodes"]) == BUDGET and report["best"] is not None
    by_operator = [n["operator"] for n in report["lineage"]["nodes"]]
    assert by_operator == ["template", "llm", "template"], by_operator  # templates lead each session's first round
    assert len(server.requests) == by_operator.count("llm")  # one scripted reply per LLM candidate
    assert (out / "best.py").read_text() in {n for n in _sources(out / "run.sqlite")}


def _sources(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        return [r[0] for r in c.execute("SELECT source FROM candidates WHERE verdict = 'correct'")]
