"""benchmarks/kernelbench_bench.py on a CPU: the task selection, and its per-level table built from the
results.json of a real `kernelwright batch` run (Triton interpreter) over a tiny KernelBench-like level."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from agent.cli import main as run

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "agent" / "fixtures"


def bench():
    spec = importlib.util.spec_from_file_location("kernelbench_bench", ROOT / "benchmarks" / "kernelbench_bench.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def level(tmp_path):
    """A level folder in KernelBench's naming: a task the templates lower, one they cannot, one not picked."""
    folder = tmp_path / "kernelbench" / "level1"
    folder.mkdir(parents=True)
    shutil.copy(FIX / "task_scale_shift.py", folder / "2_Scale_shift.py")
    shutil.copy(FIX / "tpl_unsupported.py", folder / "10_Sort_rows.py")
    shutil.copy(FIX / "tpl_unsupported.py", folder / "11_Sort_again.py")
    return folder


def test_selection_follows_kernelbench_numbers(level):
    b = bench()
    assert [f.name for f in b.select(level, None, None)] == ["2_Scale_shift.py", "10_Sort_rows.py", "11_Sort_again.py"]
    assert [f.name for f in b.select(level, 2, None)] == ["2_Scale_shift.py", "10_Sort_rows.py"]
    assert [f.name for f in b.select(level, None, "*SORT*")] == ["10_Sort_rows.py", "11_Sort_again.py"]


@pytest.mark.slow
def test_table_from_a_real_batch(level, tmp_path, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    b = bench()
    out = tmp_path / "out"
    files = b.select(level, 2, None)
    suite = b.write_suite(out, "level1", files)
    assert not b.finished(out / "level1", files)
    assert run(["batch", str(suite), "--out", str(out / "level1"), "--budget", "1", "--no-knowledge"]) == 1
    assert b.finished(out / "level1", files) and not b.finished(out / "level1", b.select(level, None, None))

    s = b.summarize_level(out / "level1")
    assert (s.level, s.total, s.done, s.verified, s.interpreted) == ("level1", 2, 2, 1, True)
    assert [task for task, _ in s.missing] == ["10_Sort_rows"]
    assert s.missing[0][1].startswith("no candidate was evaluated: the operators proposed nothing new")
    text = b.markdown([s, b.summarize_level(out / "level2", total=7)])
    assert "| level1 | 2/2 | 1/2 (50%) | – | n/a (interpreter) | n/a (interpreter) |" in text
    assert "| level2 | 0/7 | – | – | – | – |" in text
    assert "level1: 1 task(s) without a kernel" in text and "- 10_Sort_rows: no candidate was evaluated" in text
