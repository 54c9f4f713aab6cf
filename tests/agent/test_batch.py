"""`kernelwright batch`: a run killed mid-way (SIGKILL) resumes with nothing lost or repeated; exit codes for
bad input and for a task without a correct kernel; the live progress view on a terminal."""
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agent import progress
from agent.cli import main as run
from agent.report_html import TaskRow

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[2]


def rows(db: Path) -> dict[int, tuple]:
    with sqlite3.connect(db) as c:
        return {r[0]: r[1:] for r in c.execute("SELECT id, status, verdict, evaluated_at FROM candidates")}


@pytest.mark.slow
def test_a_killed_batch_resumes_with_nothing_lost_or_repeated(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(f'[[task]]\npath = "{FIX / "task_scale_shift.py"}"\nname = "scale_shift"\n\n'
                     f'[[task]]\npath = "{ROOT / "tasks" / "01_gelu.py"}"\n')
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "agent.cli", "batch", str(suite), "--budget", "3", "--workers", "1", "--out", str(out),
           "--no-knowledge"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
                             start_new_session=True)
    before = []
    try:
        for line in first.stdout:
            before.append(line)
            if line.startswith("01_gelu | [1/3]"):  # scale_shift is finished, gelu is part-way
                os.killpg(first.pid, signal.SIGKILL)
                break
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL, "".join(before)

    state = json.loads((out / "batch.json").read_text())["tasks"]
    assert state["scale_shift"]["status"] == "done" and state["01_gelu"]["status"] == "running"
    shift_rows, gelu_rows = rows(out / "scale_shift" / "run.sqlite"), rows(out / "01_gelu" / "run.sqlite")
    evaluated = {i for i, r in gelu_rows.items() if r[0] == "evaluated"}
    assert len(shift_rows) == 3 and 1 <= len(evaluated) < 3

    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    after = resumed.stdout
    assert resumed.returncode == 0, after + resumed.stderr
    assert "resuming" in after and "1 of 2 tasks finished, 1 to run" in after
    assert "scale_shift |" not in after  # the finished task is not run again
    assert rows(out / "scale_shift" / "run.sqlite") == shift_rows
    final = rows(out / "01_gelu" / "run.sqlite")
    assert sorted(final) == [1, 2, 3] and all(r[0] == "evaluated" for r in final.values())
    assert all(final[i] == gelu_rows[i] for i in evaluated)  # results from before the kill untouched
    for task in ("scale_shift", "01_gelu"):  # every candidate evaluated exactly once over both sessions
        ids = re.findall(rf"^{task} \| \[\d/3\] #(\d+) ", "".join(before) + after, flags=re.M)
        assert sorted(map(int, ids)) == [1, 2, 3], (task, ids)

    results = json.loads((out / "results.json").read_text())
    assert [(t["task"], t["status"], t["evaluations"]) for t in results["tasks"]] == [
        ("scale_shift", "done", 3), ("01_gelu", "done", 3)]
    assert results["interpreted"] and results["summary"]["correctness_rate"] == 1.0
    for t in results["tasks"]:
        assert t["verdict"] == "correct" and t["speedup_vs_eager"] is None and (out / t["best_kernel"]).is_file()
        assert t["progress"][-1][0] == 3 and t["seconds"] > 0
    assert (out / "results.csv").read_text().count("\n") == 3 and (out / "report.html").is_file()
    assert "correctness rate 100.0%" in after and "no speedups" in after


def test_bad_input_exits_2_with_one_sentence(tmp_path, capsys):
    assert run(["batch", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert run(["batch", str(FIX), "--out", str(tmp_path / "o"), "--resume"]) == 2
    assert run(["batch", str(FIX / "task_scale_shift.py"), "--budget", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("kernelwright: ") for line in err)
    assert "no batch to resume" in err[1]


def test_a_task_without_a_correct_kernel_exits_1(tmp_path, capsys, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "out"
    assert run(["batch", str(FIX / "tpl_unsupported.py"), "--budget", "2", "--out", str(out), "--no-knowledge"]) == 1
    row = json.loads((out / "results.json").read_text())["tasks"][0]
    assert (row["task"], row["status"], row["verdict"], row["evaluations"]) == ("tpl_unsupported", "done", "none", 0)
    assert "0 with a correct kernel" in capsys.readouterr().out


def test_live_progress_redraws_bars_in_place():
    stream = io.StringIO()
    p = progress.Progress(total=2, budget=4, stream=stream, live=True)
    p.started("gelu", 0)
    p.update("gelu", 2, "1.50x eager")
    p.detail("gelu | [2/4] #2 template: correct")  # summarized by the bars, not printed
    p.finished("gelu", TaskRow("gelu", "g.py", "done", "correct", evaluations=4, best_ms=1.0, eager_ms=1.5,
                               speedup_vs_eager=1.5, seconds=3.0))
    p.close()
    text = stream.getvalue()
    assert "[##########..........]   2/4 1.50x eager" in text  # the task's bar
    assert "\x1b[2F\x1b[J" in text  # the two drawn lines cleared before each redraw
    assert "done 1/2 gelu: correct, 1.50x eager" in text and "[2/4] #2" not in text
    assert p.overall() == "1/2 tasks done, 1 with a correct kernel, best 1.50x eager (gelu)"
