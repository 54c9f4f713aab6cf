"""benchmarks/neighbors_bench.py on a CPU: every fold move of cross-entropy's first candidates judged in the
interpreter (the unfolded one-block form once read the row's values for the target's: 1e3 off), a second call
judging nothing again, and bad input refused in one sentence."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "neighbors_bench.py"
FIXTURES = ROOT / "tests" / "agent" / "fixtures"


def bench():
    spec = importlib.util.spec_from_file_location("neighbors_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args, out: Path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_every_fold_move_of_cross_entropy_is_right_and_a_second_call_resumes(tmp_path):
    task = str(FIXTURES / "var_cross_entropy.py")
    done = _run(task, "--params", "fold", out=tmp_path)  # one worker: a second adds its start-up, not a case
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["verdict"] == "correct" and r["interpreted"] for r in rows)
    unfolded = {r["params"]["mode"] for r in rows if r["params"].get("fold") == 0}
    assert unfolded == {"one_pass", "looped"}
    table = (tmp_path / "neighbors.md").read_text()
    assert "| var_cross_entropy | 4 | 0 | " in table and "(interpreter)" in table
    again = _run(task, "--params", "fold", out=tmp_path)  # real, no GPU visible: the device decides the moves
    assert again.returncode == 0 and "0 moves to judge (4 judged before)" in again.stdout
    assert (tmp_path / "neighbors.md").read_text() == table
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 4


def test_bad_input_is_one_sentence_and_exit_2(tmp_path, capsys):
    """The real command once (its exit code and no traceback), the other bad inputs through main() here."""
    done = _run("no_such_task.py", out=tmp_path)
    said = done.stderr.strip()
    assert done.returncode == 2 and said.count("\n") == 0 and said.endswith("."), said
    assert "Traceback" not in done.stdout + done.stderr
    for args in (["--llm-ops", "flash"], []):
        assert bench().main([*args, "--out", str(tmp_path)]) == 2, args
        captured = capsys.readouterr()
        said = captured.err.strip()
        assert captured.out == "" and said.count("\n") == 0 and said.endswith("."), (args, said)
