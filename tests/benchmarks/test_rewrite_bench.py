"""benchmarks/rewrite_bench.py on a CPU: it finds the tasks where the rewrite pass keeps a rewrite, refuses a run
without a GPU in one sentence, and builds its table from a batch's results and each task's report.json."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from agent.report_html import TaskRow, write_results

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "agent" / "fixtures"


def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("rewrite_bench", ROOT / "benchmarks" / "rewrite_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernelbench(tmp_path) -> Path:
    """Levels 1 and 2 in KernelBench's naming: a GEMM's row sum (a rule fires) and a scale-shift (none does)."""
    for level in ("level1", "level2"):
        (tmp_path / level).mkdir()
    shutil.copy(FIX / "task_scale_shift.py", tmp_path / "level1" / "3_Scale_shift.py")
    shutil.copy(FIX / "rewrite_gemm_row_sum.py", tmp_path / "level2" / "14_Gemm_row_sum.py")
    return tmp_path


def test_the_tasks_where_a_rule_fires(tmp_path):
    found = bench().rewritten_tasks([kernelbench(tmp_path) / "level1", tmp_path / "level2"])
    assert [(p.name, rules) for p, rules, _ in found] == [("14_Gemm_row_sum.py", ["sum_of_gemm", "scalar_chain"])]
    assert found[0][2] > 1  # the cost model kept the rewrite because it predicts a gain


def test_a_run_without_a_gpu_is_one_sentence_and_exit_2(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rewrite_bench.py"), "--out", str(tmp_path / "o"),
                          "--kernelbench", str(kernelbench(tmp_path))], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "this machine has no GPU; --list shows the tasks it would run" in run.stderr


def test_table_from_a_batch_and_its_reports(tmp_path):
    folder = tmp_path / "out" / "rewrites"
    row = TaskRow("14_Gemm_row_sum", "14.py", status="done", verdict="correct", best_ms=0.05, eager_ms=2.0,
                  compile_ms=1.5, floor_ms=1.0, speedup_vs_eager=40.0, speedup_vs_compile=30.0, kept=True,
                  evaluations=4, correct=4, device="NVIDIA H200")
    write_results(folder, "rewrites.toml", [row])
    (folder / "batch.json").write_text(json.dumps({"tasks": {"14_Gemm_row_sum": {"dir": "14_Gemm_row_sum"}}}))
    (folder / "14_Gemm_row_sum").mkdir()
    (folder / "14_Gemm_row_sum" / "report.json").write_text(json.dumps({"rewrite": {
        "rules": ["sum_of_gemm", "scalar_chain"], "predicted": {"gain": 38.1},
        "measured": {"original": {"ms": 2.1}, "rewritten": {"ms": 0.05}, "gain": 42.0}}}))
    text = bench().table(folder)
    assert "Rewrites on NVIDIA H200, fp32" in text
    assert ("| 14_Gemm_row_sum | sum_of_gemm, scalar_chain | 38.10x | 2.100 | 0.050 | 42.00x | 40.00x | 30.00x | "
            "0.05x |") in text
