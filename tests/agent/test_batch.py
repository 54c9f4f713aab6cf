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
    """Two candidates a task (one round of two): the kill comes once scale_shift is done and gelu has one of its
    two evaluated, the other proposed or mid-evaluation; the resumed batch evaluates that one alone."""
    suite = tmp_path / "suite.toml"
    suite.write_text(f'[[task]]\npath = "{FIX / "task_scale_shift.py"}"\nname = "scale_shift"\n\n'
                     f'[[task]]\npath = "{ROOT / "tasks" / "01_gelu.py"}"\n')
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "agent.cli", "batch", str(suite), "--budget", "2", "--workers", "1", "--out", str(out),
           "--no-knowledge"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
                             start_new_session=True)
    before = []
    try:
        for line in first.stdout:
            before.append(line)
            if line.startswith("01_gelu | [1/2]"):  # scale_shift is finished, gelu is part-way
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
    assert len(shift_rows) == 2 and len(evaluated) == 1 and len(gelu_rows) == 2

    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    after = resumed.stdout
    assert resumed.returncode == 0, after + resumed.stderr
    assert "resuming" in after and "1 of 2 tasks finished, 1 to run" in after
    assert "scale_shift |" not in after  # the finished task is not run again
    assert rows(out / "scale_shift" / "run.sqlite") == shift_rows
    final = rows(out / "01_gelu" / "run.sqlite")
    assert sorted(final) == [1, 2] and all(r[0] == "evaluated" for r in final.values())
    assert all(final[i] == gelu_rows[i] for i in evaluated)  # results from before the kill untouched
    for task in ("scale_shift", "01_gelu"):  # every candidate evaluated exactly once over both sessions
        ids = re.findall(rf"^{task} \| \[\d/2\] #(\d+) ", "".join(before) + after, flags=re.M)
        assert sorted(map(int, ids)) == [1, 2], (task, ids)

    results = json.loads((out / "results.json").read_text())
    assert [(t["task"], t["status"], t["evaluations"]) for t in results["tasks"]] == [
        ("scale_shift", "done", 2), ("01_gelu", "done", 2)]
    assert results["interpreted"] and results["summary"]["correctness_rate"] == 1.0
    for t in results["tasks"]:
        assert t["verdict"] == "correct" and t["speedup_vs_eager"] is None and (out / t["best_kernel"]).is_file()
        assert t["progress"][-1][0] == 2 and t["seconds"] > 0
    assert (out / "results.csv").read_text().count("\n") == 3 and (out / "report.html").is_file()
    assert "correctness rate 100.0%" in after and "no speedups" in after


def test_bad_input_exits_2_with_one_sentence(tmp_path, capsys):
    assert run(["batch", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert run(["batch", str(FIX), "--out", str(tmp_path / "o"), "--resume"]) == 2
    assert run(["batch", str(FIX / "task_scale_shift.py"), "--budget", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("kernelwright: ") for line in err)
    assert "no batch to resume" in err[1]


def test_bad_shapes_exit_2_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "o"
    assert run(["batch", str(FIX / "task_scale_shift.py"), "--shapes", "rows=a", "--out", str(out)]) == 2
    assert run(["batch", str(FIX / "task_scale_shift.py"), "--shapes", "batch_size=1,7", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "kernelwright: --shapes takes NAME=V1,V2,... with integer values, each name once, not 'rows=a'."
    assert len(err) == 2 and "shape set names batch_size, not a global of the task file" in err[1]
    assert not out.exists()


def test_shapes_go_to_every_task_whose_task_list_gives_none(tmp_path):
    from agent.batch import plan_batch
    from agent.cli import build_parser
    suite, out = tmp_path / "suite.toml", tmp_path / "out"
    task = FIX / "task_scale_shift.py"
    suite.write_text(f'[[task]]\npath = "{task}"\nname = "own"\nshape_sets = [{{rows = 5}}]\n\n'
                     f'[[task]]\npath = "{task}"\nname = "given"\n')
    common = ["batch", str(suite), "--out", str(out)]
    batch = plan_batch(build_parser().parse_args(common + ["--shapes", "rows=2,9"]))
    assert [s.shape_sets for s in batch.specs] == [[{"rows": 5}], [{"rows": 2}, {"rows": 9}]]
    batch.state.save()
    resumed = plan_batch(build_parser().parse_args(common + ["--resume"]))  # the batch keeps its --shapes
    assert [s.shape_sets for s in resumed.specs] == [[{"rows": 5}], [{"rows": 2}, {"rows": 9}]]
    changed = plan_batch(build_parser().parse_args(common + ["--resume", "--shapes", "cols=3"]))
    assert [s.shape_sets for s in changed.specs] == [[{"rows": 5}], [{"cols": 3}]]


@pytest.mark.slow
def test_a_batch_with_shapes_verifies_each_task_at_them_and_checks_its_best(tmp_path, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "out"
    assert run(["batch", str(FIX / "shapes_bias_relu.py"), "--shapes", "batch_size=1,7", "--budget", "1",
                "--out", str(out), "--no-knowledge", "--deep", "1"]) == 0
    report = json.loads((out / "shapes_bias_relu" / "report.json").read_text())
    best = report["best"]
    assert best["verdict"] == "correct" and [s["shapes"] for s in best["shapes"]["sets"]] == [
        {"batch_size": 12}, {"batch_size": 1}, {"batch_size": 7}]
    final = report["final_check"]  # the best once more, with --deep's one set, before the batch reports it
    assert final["candidate"] == best["id"] and final["deep"]["sets"] == 1 and final["demoted"] == []


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
    p = progress.Progress(total=3, budget=4, stream=stream, live=True)
    p.started("gelu", 0)
    p.update("gelu", 2, "1.50x eager")
    p.detail("gelu | [2/4] #2 template: correct")  # summarized by the bars, not printed
    p.finished("gelu", TaskRow("gelu", "g.py", "done", "correct", evaluations=4, best_ms=1.0, eager_ms=1.5,
                               speedup_vs_eager=1.5, kept=True, seconds=3.0))
    p.started("matmul", 0)  # correct, but slower than eager: PyTorch is kept, and it is no best
    p.finished("matmul", TaskRow("matmul", "m.py", "done", "correct", evaluations=4, best_ms=2.0, eager_ms=1.0,
                                 speedup_vs_eager=0.5, kept=False, seconds=3.0))
    p.close()
    text = stream.getvalue()
    assert "[##########..........]   2/4 1.50x eager" in text  # the task's bar
    assert "\x1b[2F\x1b[J" in text  # the two drawn lines cleared before each redraw
    assert "done 1/3 gelu: correct, 1.50x eager" in text and "[2/4] #2" not in text
    assert "done 2/3 matmul: correct but slower than eager PyTorch (0.50x): no faster kernel; keep PyTorch" in text
    assert p.overall() == "2/3 tasks done, 2 with a correct kernel, best 1.50x eager (gelu)"
    slow_only = progress.Progress(total=1, budget=4, stream=io.StringIO(), live=False)
    slow_only.finished("matmul", TaskRow("matmul", "m.py", "done", "correct", speedup_vs_eager=0.5, kept=False))
    assert slow_only.overall() == "1/1 tasks done, 1 with a correct kernel"  # a loss is never the best


def gpu_report(ms: float | None, eager_ms: float = 1.0) -> dict:
    """report.json of a finished optimize run on a GPU whose best kernel took `ms` (None: no correct kernel)."""
    best = None if ms is None else {"id": 1, "operator": "template", "ms": ms, "eager_ms": eager_ms, "compile_ms": 0.8,
                                    "floor_ms": 0.1, "floor_fraction": 0.1 / ms, "speedup_vs_eager": eager_ms / ms,
                                    "speedup_vs_compile": 0.8 / ms, "interpreted": False, "device": "NVIDIA H200"}
    node = {"id": 1, "status": "evaluated", "verdict": "correct" if best else "incorrect", "ms": ms}
    return {"best": best, "counts": {"correct": 1} if best else {"incorrect": 1}, "lineage": {"nodes": [node]},
            "stop_reason": "evaluation budget of 1 spent", "device": "NVIDIA H200",
            "failure": None if best else "Incorrect: the output differs from the reference."}


def test_a_kernel_slower_than_eager_counts_as_no_improvement(tmp_path):
    from agent.report_html import row_from_report, summary_lines, write_results
    from tools.results import Baselines
    rows = [row_from_report(name, f"{name}.py", gpu_report(ms), tmp_path / name, tmp_path, 1.0,
                            Baselines(1.0, 0.8, "NVIDIA H200"))
            for name, ms in (("fast", 0.5), ("slow", 2.0), ("wrong", None))]
    assert [r.kept for r in rows] == [True, False, False] and rows[1].speedup_vs_eager == 0.5
    assert "keep PyTorch" in rows[1].brief() and "0.50x" in rows[1].brief()
    assert rows[2].reason == "Incorrect: the output differs from the reference."  # why, not where it stopped
    write_results(tmp_path, "suite", rows)
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    assert summary["kept"] == 1 and summary["correct"] == 2
    assert summary["geomean"]["eager"] == pytest.approx(2.0 ** (1 / 3))  # 2.0, 1.0 (PyTorch kept), 1.0
    assert summary["geomean"]["compile"] == pytest.approx((1.6 * 0.8 * 0.8) ** (1 / 3))  # compile / kept time
    table = (tmp_path / "results.csv").read_text().splitlines()
    assert table[0].split(",")[3] == "kept" and [line.split(",")[3] for line in table[1:]] == ["True", "False", "False"]
    text = "\n".join(summary_lines(rows, tmp_path))
    assert "1 of 2 correct kernels are faster than eager PyTorch and kept" in text and "1.26x over eager" in text
    assert "0.50x" not in text  # the loss is never presented as a result
    page = (tmp_path / "report.html").read_text()
    assert "<th scope=\"col\">kept</th>" in page and ">PyTorch<" in page and ">kernel<" in page


def test_max_seconds_stops_cleanly_and_resume_finishes(tmp_path, capsys, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    for name in ("a_sort.py", "b_sort.py"):
        (suite / name).write_text((FIX / "tpl_unsupported.py").read_text())
    common = ["batch", str(suite), "--budget", "1", "--workers", "1", "--out", str(out), "--no-knowledge"]
    assert run(common + ["--max-seconds", "0.001"]) == 130
    assert "stopped after --max-seconds 0.001; resume with --resume" in capsys.readouterr().err
    state = json.loads((out / "batch.json").read_text())["tasks"]
    assert any(t["status"] != "done" for t in state.values())  # the rest is left for the next call
    assert run(common + ["--resume"]) == 1  # finished: no task has a correct kernel
    assert [t["status"] for t in json.loads((out / "results.json").read_text())["tasks"]] == ["done", "done"]
    capsys.readouterr()
    assert run(common + ["--resume", "--max-seconds", "0"]) == 2
    assert "--max-seconds must be positive" in capsys.readouterr().err
