"""`kernelwright ci` on a temporary git repository: which task files it selects, and each gate's exit code
(4 slower than the committed baseline, 0 after --update-baseline, 3 no correct kernel, 2 bad input), with the
JUnit XML and Markdown summary it writes."""
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agent import ci
from agent.cli import main as run

FIX = Path(__file__).parent / "fixtures"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """main: tasks/a_existing.py; branch feature adds tasks/b_new.py and a .py file that is not a task."""
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    r = tmp_path / "repo"
    (r / "tasks").mkdir(parents=True)
    shutil.copy(FIX / "task_scale_shift.py", r / "tasks" / "a_existing.py")
    (r / "README.md").write_text("tasks\n")
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "ci@example.invalid")
    git(r, "config", "user.name", "ci test")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "one task")
    git(r, "checkout", "-q", "-b", "feature")
    shutil.copy(FIX / "task_scale_shift.py", r / "tasks" / "b_new.py")
    (r / "tasks" / "not_a_task.py").write_text("X = 1\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "a new task")
    return r


def test_selection_is_the_changed_task_files_in_path_order(repo):
    tasks = repo / "tasks"
    picked, skipped = ci.changed_tasks(repo, tasks, "main")
    assert picked == [tasks / "b_new.py"] and len(skipped) == 1 and skipped[0].startswith("tasks/not_a_task.py")
    (tasks / "a_existing.py").write_text((tasks / "a_existing.py").read_text() + "\n# tuned\n")  # modified, unstaged
    shutil.copy(FIX / "task_scale_shift.py", tasks / "0_untracked.py")
    (repo / "other.py").write_text("")  # outside the tasks folder
    picked, _ = ci.changed_tasks(repo, tasks, "main")
    assert [p.name for p in picked] == ["0_untracked.py", "a_existing.py", "b_new.py"]
    assert ci.changed_tasks(repo, tasks, "main")[0] == picked  # same inputs, same selection
    with pytest.raises(ci.UsageError, match="not known to git"):
        ci.changed_tasks(repo, tasks, "no-such-branch")


def test_bad_input_exits_2(repo, tmp_path, capsys):
    assert run(["ci", "--tasks", str(repo / "tasks"), "--base", "no-such-branch"]) == 2
    assert run(["ci", "--tasks", str(repo / "missing")]) == 2
    outside = tmp_path / "plain" / "tasks"
    outside.mkdir(parents=True)
    assert run(["ci", "--tasks", str(outside), "--base", "main"]) == 2
    (repo / "tasks" / "baseline.json").write_text("[1, 2]")
    assert run(["ci", "--tasks", str(repo / "tasks"), "--base", "main"]) == 2
    err = capsys.readouterr().err
    assert "not known to git" in err and "does not exist" in err and "not inside a git repository" in err
    assert "is not a kernelwright baseline" in err


def test_bad_shapes_exit_2_before_anything_runs(repo, tmp_path, capsys):
    common = ["ci", "--tasks", str(repo / "tasks"), "--base", "main", "--out", str(tmp_path / "o")]
    assert run(common + ["--shapes", "rows=1,2", "--shapes", "cols=1,2,3"]) == 2
    assert run(common + ["--shapes", "batch_size=1,7"]) == 2  # b_new.py, the selected task, has no such global
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "kernelwright: --shapes: every name needs as many values as the others, or one value."
    assert len(err) == 2 and "b_new.py: shape set names batch_size, not a global of the task file" in err[1]
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_shapes_verify_each_selected_task_at_them(repo, tmp_path):
    out = tmp_path / "o"
    assert run(["ci", "--tasks", str(repo / "tasks"), "--base", "main", "--budget", "1", "--deep", "0",
                "--shapes", "rows=5,9", "--out", str(out)]) == 0
    best = json.loads((out / "b_new" / "report.json").read_text())["best"]
    own, *others = best["shapes"]["sets"]  # the task's own first: its SMALL_SHAPES on a CPU
    assert best["verdict"] == "correct" and [s["shapes"] for s in others] == [{"rows": 5}, {"rows": 9}], own


def test_nothing_changed_passes(repo, tmp_path, capsys):
    summary = tmp_path / "s.md"
    assert run(["ci", "--tasks", str(repo / "tasks"), "--base", "HEAD", "--summary", str(summary)]) == 0
    assert "0 task file(s) added or changed since `HEAD`" in summary.read_text()


@pytest.mark.slow
def test_gates_exit_codes_and_reports(repo, tmp_path, capsys):
    tasks, baseline = repo / "tasks", repo / "tasks" / "baseline.json"
    baseline.write_text(json.dumps({"version": 1, "tasks": {"tasks/b_new.py": {
        "ms": 1e-6, "device": "cpu (Triton interpreter)", "interpreted": True}}}))
    common = ["ci", "--tasks", str(tasks), "--base", "main", "--budget", "1", "--baseline", str(baseline)]

    # performance gate: far slower than the committed baseline
    junit, summary = tmp_path / "j1.xml", tmp_path / "s1.md"
    assert run(common + ["--out", str(tmp_path / "o1"), "--junit", str(junit), "--summary", str(summary)]) == 4
    cases = ET.parse(junit).getroot().findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["tasks/b_new.py"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("type") == "performance" and "against the baseline" in failure.get("message")
    md = summary.read_text()
    assert "failed: performance gate (exit 4)" in md and "`tasks/b_new.py`" in md and "FAIL: slower" in md
    assert "interpreter" in md and "x eager" not in md  # CPU times are labelled, never speedups
    assert "tasks/not_a_task.py" in md  # skipped, and said so

    # --update-baseline accepts the new time and rewrites the file
    assert run(common + ["--out", str(tmp_path / "o2"), "--update-baseline"]) == 0
    entry = json.loads(baseline.read_text())["tasks"]["tasks/b_new.py"]
    assert entry["ms"] > 1e-3 and entry["interpreted"] is True and entry["device"] == "cpu (Triton interpreter)"

    # verification gate: an added task that no operator can lower has no correct kernel
    shutil.copy(FIX / "tpl_unsupported.py", tasks / "c_fft.py")
    junit = tmp_path / "j3.xml"
    assert run(["ci", "--tasks", str(tasks), "--base", "HEAD", "--budget", "1", "--baseline", str(baseline),
                "--out", str(tmp_path / "o3"), "--junit", str(junit)]) == 3
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case.get("name") == "tasks/c_fft.py" and case.find("failure").get("type") == "verification"
    assert "kernelwright ci: failed: verification gate (exit 3)" in capsys.readouterr().out


def test_summary_says_when_pytorch_is_kept():
    from agent.report_html import TaskRow
    slow = TaskRow("b_new", "tasks/b_new.py", "done", "correct", best_ms=2.0, eager_ms=1.0, compile_ms=0.8,
                   speedup_vs_eager=0.5, speedup_vs_compile=0.4, kept=False, device="NVIDIA H200", verified_on="gpu")
    fast = TaskRow("c_new", "tasks/c_new.py", "done", "correct", best_ms=0.5, eager_ms=1.0, compile_ms=0.8,
                   speedup_vs_eager=2.0, speedup_vs_compile=1.6, kept=True, device="NVIDIA H200", verified_on="gpu")
    md = ci.markdown([ci.Verdict("tasks/b_new.py", slow), ci.Verdict("tasks/c_new.py", fast)], "main", 0, [], None)
    assert "| task | result | verified on | kept | best ms |" in md
    assert "| `tasks/b_new.py` | pass | gpu | PyTorch | 2 |" in md
    assert "| `tasks/c_new.py` | pass | gpu | kernel | 0.5 |" in md
    assert "- tasks/b_new.py: no faster kernel; keep PyTorch (the best correct kernel runs at 0.50x eager)" in md
    assert "c_new.py: no faster" not in md
