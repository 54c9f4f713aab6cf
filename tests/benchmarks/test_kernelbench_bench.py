"""benchmarks/kernelbench_bench.py on a CPU: the task selection, its per-level table built from the
results.json of a real `kernelwright batch` run (Triton interpreter) over a tiny KernelBench-like level, and,
on fabricated outputs of a bf16 batch on a GPU, --dtype, best/floor and the audit of tasks without a kernel."""
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from agent.cli import main as run
from agent.interfaces import Proposal
from agent.report_html import TaskRow, write_results
from agent.runstore import RunStore
from tools.results import Baselines, EvalResult, Timing

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
    assert [m.task for m in s.missing] == ["10_Sort_rows"] and s.dtype == "float32"
    assert s.missing[0].why.startswith("no candidate was evaluated: the operators proposed nothing new")
    assert (s.missing[0].verdict, s.missing[0].rel_err, s.missing[0].suspect) == ("none", None, False)
    text = b.markdown([s, b.summarize_level(out / "level2", total=7)])
    assert "| level1 | float32 | 2/2 | 1/2 (50%) | – | n/a (interpreter) | n/a (interpreter) | n/a (interpreter) |" \
        in text
    assert "| level2 | float32 | 0/7 | – | – | – | – | – |" in text
    assert "level1: 1 task(s) without a kernel, 0 possible false negative(s)" in text
    assert "| 10_Sort_rows | none | – | – | the operators proposed nothing new" in text
    rows = b.task_table(out / "level1").splitlines()
    assert rows[0] == "### level1 (2 tasks)" and len(rows) == 7  # title, blank, header, rule, two tasks, blank
    assert any(r.startswith("| 10_Sort_rows | none | – |") and r.endswith("| PyTorch | 0 |") for r in rows)
    assert b.task_table(out / "level2") == ""


# --- bf16: --dtype, best/floor and the audit, on fabricated run outputs ------------------------------------
def _store(folder: Path, results: list[EvalResult], params: dict | None = None) -> str:
    """A task's run.sqlite (the real run store) holding `results` as its evaluated candidates, ids from 1, made
    by the template operator with `params`. Returns the run's id."""
    store = RunStore(folder / "run.sqlite")
    run_id = store.create_run("task.py", {})
    for r in results:
        store.record_result(run_id, store.add_proposed(run_id, Proposal("src", "template", params or {}), None).id, r)
    store.close()
    return run_id


@pytest.fixture
def bf16_level(tmp_path):
    """OUT/level1 as a bf16 `batch` on an H200 leaves it: a verified matmul; a cumsum whose closest candidate was
    within the rule's bound in norm (refused element-wise); a fused GEMM clearly less accurate than PyTorch; an
    attention task with no candidate."""
    folder = tmp_path / "out" / "level1"
    gpu = dict(status="done", device="NVIDIA H200")
    rows = [TaskRow("1_Matmul", "1_Matmul.py", verdict="correct", best_ms=1.0, eager_ms=2.0, compile_ms=1.5,
                    floor_ms=0.5, floor_fraction=0.5, speedup_vs_eager=2.0, speedup_vs_compile=1.5, kept=True,
                    evaluations=1, correct=1, **gpu),
            TaskRow("2_Cumsum", "2_Cumsum.py", verdict="incorrect", reason="Incorrect: the output is less accurate.",
                    eager_ms=1.0, compile_ms=1.0, evaluations=3, **gpu),
            TaskRow("3_Gemm_Gelu_Softmax", "3.py", verdict="incorrect", reason="Incorrect: less accurate.",
                    eager_ms=1.0, compile_ms=1.0, evaluations=1, **gpu),
            TaskRow("4_Attention", "4.py", verdict="none", reason="the operators proposed nothing new", **gpu)]
    write_results(folder, "level1.toml", rows)
    tasks = {r.task: {"path": r.path, "dir": r.task, "status": "done"} for r in rows}
    (folder / "batch.json").write_text(json.dumps({"suite": "level1.toml", "settings": {"dtype": "bfloat16"},
                                                   "tasks": tasks}))
    for r in rows:
        (folder / r.task).mkdir()
    _store(folder / "1_Matmul", [EvalResult("correct", "Correct on every trial.", rel_err=4e-3, own_rel_err=2e-3)])
    (folder / "1_Matmul" / "report.json").write_text(json.dumps({"best": {"id": 1}}))
    _store(folder / "2_Cumsum", [
        EvalResult("incorrect", "Incorrect: far off.", rel_err=1.73, own_rel_err=1e-2),
        EvalResult("incorrect", "Incorrect: 12 of 4096 elements beyond 3x PyTorch's error + 2u.", rel_err=2e-2,
                   own_rel_err=1e-2),
        EvalResult("rejected", "Rejected (torch-compute): it ran aten::cumsum.")])
    _store(folder / "3_Gemm_Gelu_Softmax", [EvalResult("incorrect", "Incorrect: | far.", rel_err=0.5,
                                                       own_rel_err=1e-2)])
    return folder


def test_audit_of_tasks_without_a_kernel(bf16_level):
    b = bench()
    s = b.summarize_level(bf16_level)
    assert (s.dtype, s.device, s.done, s.verified, s.interpreted) == ("bfloat16", "NVIDIA H200", 4, 1, False)
    assert s.best_floor == pytest.approx(2.0) and s.worst_passed == ("1_Matmul", pytest.approx(2.0))
    audit = {m.task: m for m in s.missing}
    assert list(audit) == ["2_Cumsum", "3_Gemm_Gelu_Softmax", "4_Attention"]
    cumsum = audit["2_Cumsum"]
    assert (cumsum.verdict, cumsum.rel_err, cumsum.own_rel_err, cumsum.suspect) == ("incorrect", 2e-2, 1e-2, True)
    assert cumsum.reason.startswith("Incorrect: 12 of 4096 elements")
    assert not audit["3_Gemm_Gelu_Softmax"].suspect and audit["3_Gemm_Gelu_Softmax"].rel_err == 0.5
    none = audit["4_Attention"]
    assert (none.verdict, none.rel_err, none.own_rel_err, none.suspect) == ("none", None, None, False)

    text = b.markdown([s, b.summarize_level(bf16_level.parent / "level2", 100, "bfloat16")])
    assert "KernelBench in bfloat16 on NVIDIA H200" in text
    assert "| level1 | bfloat16 | 4/4 | 1/4 (25%) | 1 | 1.19x | 1.14x | 2.00x |" in text
    assert "| level2 | bfloat16 | 0/100 | – | – | – | – | – |" in text
    assert "level1: 3 task(s) without a kernel, 1 possible false negative(s)" in text
    assert ("| 2_Cumsum **possible false negative** | incorrect | 2.00e-02 | 1.00e-02 | Incorrect: 12 of 4096 "
            "elements beyond 3x PyTorch's error + 2u. |") in text
    assert "| 3_Gemm_Gelu_Softmax | incorrect | 5.00e-01 | 1.00e-02 | Incorrect: / far. |" in text
    assert "| 4_Attention | none | – | – | the operators proposed nothing new |" in text
    assert "at most 2.00x PyTorch's own (1_Matmul)" in text


def test_table_only_names_the_dtype_in_summary_md(bf16_level, tmp_path, monkeypatch):
    b = bench()
    out = bf16_level.parent
    monkeypatch.setattr(sys, "argv", ["kernelbench_bench.py", "--out", str(out), "--kernelbench",
                                      str(tmp_path / "none"), "--levels", "1", "--table"])
    assert b.main() == 0
    assert "| level1 | bfloat16 |" in (out / "summary.md").read_text()


def test_dtype_reaches_batch_and_a_mismatch_is_refused(bf16_level, tmp_path, monkeypatch):
    b = bench()
    calls = []

    class Proc:
        def __init__(self, cmd, **kwargs):
            calls.append(cmd)
            self.pid = 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(b.subprocess, "Popen", Proc)
    fresh = tmp_path / "fresh" / "level2"
    fresh.mkdir(parents=True)
    b.run_batch(tmp_path / "level2.toml", fresh, 4, 60.0, True, 50.0, "bfloat16")
    b.run_batch(tmp_path / "level1.toml", bf16_level, 4, 60.0, True, 50.0, "bfloat16")
    assert calls[0][calls[0].index("--dtype") + 1] == "bfloat16" and "--resume" not in calls[0]
    assert "--dtype" in calls[1] and "--resume" in calls[1]
    b.run_batch(tmp_path / "level2.toml", fresh, 4, 60.0, True)
    assert "--dtype" not in calls[2]

    monkeypatch.setattr(sys, "argv", ["kernelbench_bench.py", "--out", str(bf16_level.parent), "--kernelbench",
                                      str(tmp_path / "none"), "--levels", "1", "--dtype", "float16"])
    with pytest.raises(SystemExit) as e:
        b.main()
    assert e.value.code == 2 and not calls[3:]


def test_a_call_too_short_to_start_a_level_is_refused_and_a_level_left_unstarted_is_named(
        bf16_level, tmp_path, monkeypatch, capsys):
    b = bench()
    monkeypatch.setattr(b, "run_batch", lambda *a, **k: pytest.fail("no batch runs here"))
    monkeypatch.setattr(sys, "argv", ["kernelbench_bench.py", "--out", str(tmp_path / "out"), "--kernelbench",
                                      str(tmp_path / "none"), "--levels", "1", "--max-seconds", "40"])
    with pytest.raises(SystemExit) as e:
        b.main()
    assert e.value.code == 2 and "--max-seconds 40 is under the 60 s" in capsys.readouterr().err
    monkeypatch.setattr(b, "MIN_SLICE_S", 3600.0)  # every level then starts with too little time left
    monkeypatch.setattr(b, "finished", lambda folder, files: False)
    monkeypatch.setattr(sys, "argv", ["kernelbench_bench.py", "--out", str(bf16_level.parent), "--kernelbench",
                                      str(tmp_path / "none"), "--levels", "1", "--dtype", "bfloat16",
                                      "--max-seconds", "3600"])
    b.main()
    assert "level1: not started, " in capsys.readouterr().err


def test_a_task_without_a_compile_time_is_named_with_the_reason(tmp_path):
    """torch.compile failing on a reference leaves the task out of the geomean over it, and the table says why."""
    folder = tmp_path / "out" / "level3"
    row = TaskRow("12_VGG19", "12_VGG19.py", verdict="correct", best_ms=1.0, eager_ms=1.1, compile_ms=None,
                  floor_ms=0.5, floor_fraction=0.5, speedup_vs_eager=1.1, kept=True, evaluations=1, correct=1,
                  status="done", device="NVIDIA H200")
    write_results(folder, "level3.toml", [row])
    (folder / "12_VGG19").mkdir()
    _store(folder / "12_VGG19", [EvalResult("correct", "Correct on every trial.", baselines=Baselines(
        1.1, None, "NVIDIA H200", "BackendCompilerFailed: backend='inductor' raised: out of resource"))])
    b = bench()
    s = b.summarize_level(folder)
    assert s.no_compile == [("12_VGG19", "BackendCompilerFailed: backend='inductor' raised: out of resource")]
    assert ("level3: torch.compile gave no time for 1 task(s), left out of the geomean vs torch.compile: 12_VGG19 "
            "(BackendCompilerFailed: backend='inductor' raised: out of resource)") in b.markdown([s])


GPU_ROW = dict(status="done", device="NVIDIA H200", verdict="correct", kept=True, evaluations=1, correct=1)


def _compile_bound_folder(folder: Path, rows: list, runs: list, copies: list | None = None,
                          flops: list | None = None) -> None:
    """A level folder of a finished batch: its results and, per task, the winner's parameters, timed bytes and
    (`copies`) those bytes' time at the copy bandwidth, which runs before it did not record, and its flops."""
    write_results(folder, "level2.toml", rows)
    (folder / "batch.json").write_text(json.dumps({"tasks": {r.task: {"dir": r.task, "status": "done"}
                                                             for r in rows}}))
    for r, (nbytes, params), copy_ms, work in zip(rows, runs, copies or [None] * len(rows), flops or [0.0] * len(rows)):
        (folder / r.task).mkdir()
        timing = Timing(r.best_ms, r.eager_ms, r.compile_ms, r.floor_ms, None, None, None, 1.0, False, bytes=nbytes,
                        copy_ms=copy_ms, flops=work)
        run_id = _store(folder / r.task, [EvalResult("correct", "Correct.", timing=timing)], params)
        (folder / r.task / "report.json").write_text(json.dumps({"run": run_id, "best": {"id": 1}}))


def test_the_tasks_where_compile_is_above_the_floor(tmp_path):
    """Issue 19's first table: the verified tasks whose torch.compile time is above 1.15x the floor, each with
    its winner and whether it is memory-bound (its floor is its bytes at the largest bytes/floor seen)."""
    folder = tmp_path / "out" / "level2"
    gpu = GPU_ROW
    rows = [TaskRow("1_Softmax", "1.py", best_ms=1.1, eager_ms=2.0, compile_ms=1.6, floor_ms=1.0, **gpu),
            TaskRow("2_Gemm_Gelu", "2.py", best_ms=3.0, eager_ms=2.5, compile_ms=2.5, floor_ms=2.0, **gpu),
            TaskRow("3_Relu", "3.py", best_ms=1.0, eager_ms=1.1, compile_ms=1.1, floor_ms=1.0, **gpu)]
    _compile_bound_folder(folder, rows, [(4e9, {"block": 1024}), (1e9, {"variant": "torch"}), (4e9, {})])
    text = bench().compile_bound_table([folder])
    assert "the 2 verified tasks where torch.compile is above 1.15x the floor" in text and "3_Relu" not in text
    assert ("| 1_Softmax | memory | 2.000 | 1.600 | 1.100 | 1.000 | 1.60x | 1.10x | 1.45x | template: block=1024 |"
            in text)
    assert ("| 2_Gemm_Gelu | compute | 2.500 | 2.500 | 3.000 | 2.000 | 1.25x | 1.50x | 1.00x | template: "
            "variant=torch |") in text
    assert "1.21x over 2 tasks; best/floor on the 1 memory-bound ones: geomean 1.10x, worst 1.10x" in text


def test_a_later_run_of_a_task_replaces_its_row(tmp_path):
    older, newer = tmp_path / "a" / "level2", tmp_path / "b" / "level2"
    _compile_bound_folder(older, [TaskRow("1_Softmax", "1.py", best_ms=1.1, eager_ms=2.0, compile_ms=1.6, floor_ms=1.0,
                                          **GPU_ROW),
                                  TaskRow("2_Conv", "2.py", best_ms=3.0, eager_ms=2.5, compile_ms=2.5, floor_ms=2.0,
                                          **GPU_ROW)], [(4e9, {}), (1e9, {"impl": "torch"})])
    _compile_bound_folder(newer, [TaskRow("2_Conv", "2.py", best_ms=2.0, eager_ms=2.5, compile_ms=2.5, floor_ms=2.0,
                                          **GPU_ROW)], [(1e9, {"impl": "triton"})])
    text = bench().compile_bound_table([older, newer])
    assert "the 2 verified tasks" in text and text.count("2_Conv") == 1
    assert ("| 2_Conv | compute | 2.500 | 2.500 | 2.000 | 2.000 | 1.25x | 1.00x | 1.25x | template: impl=triton |"
            in text)


def test_two_machines_bandwidths_a_little_apart_both_count_as_memory_bound(tmp_path):
    """Two H200s measure copy bandwidth a little apart (here 4.1 and 4.2 GB per ms): a task at its own run's
    bandwidth is memory-bound in the merged table; one whose bytes take 90% of its floor is not."""
    older, newer = tmp_path / "a" / "level2", tmp_path / "b" / "level2"
    _compile_bound_folder(older, [TaskRow("1_Softmax", "1.py", best_ms=1.1, eager_ms=2.0, compile_ms=1.6, floor_ms=1.0,
                                          **GPU_ROW),
                                  TaskRow("3_Conv", "3.py", best_ms=1.1, eager_ms=2.0, compile_ms=1.6, floor_ms=1.0,
                                          **GPU_ROW)], [(4.1e9, {}), (3.78e9, {})])
    _compile_bound_folder(newer, [TaskRow("2_Relu", "2.py", best_ms=1.1, eager_ms=2.0, compile_ms=1.6, floor_ms=1.0,
                                          **GPU_ROW)], [(4.2e9, {})])
    text = bench().compile_bound_table([older, newer])
    assert "| 1_Softmax | memory |" in text and "| 2_Relu | memory |" in text and "| 3_Conv | compute |" in text
    assert "best/floor on the 2 memory-bound ones" in text


def test_a_run_of_compute_bound_tasks_alone_has_no_memory_bound_row(tmp_path):
    """With their copy times recorded, a run whose tasks are all compute-bound calls none of them memory-bound
    (inferred from the largest bytes/floor of the run, the one with the most bytes was: level 2's 87 in
    session 24's run of three Mish tasks)."""
    folder = tmp_path / "out" / "level2"
    rows = [TaskRow("16_Conv_Mish", "16.py", best_ms=4.6, eager_ms=18.6, compile_ms=16.2, floor_ms=3.0, **GPU_ROW),
            TaskRow("87_Conv_Mish", "87.py", best_ms=3.2, eager_ms=7.2, compile_ms=5.7, floor_ms=1.5, **GPU_ROW)]
    runs = [(1.0e9, {}), (2.4e9, {})]
    _compile_bound_folder(folder, rows, runs, copies=[0.24, 0.56])
    text = bench().compile_bound_table([folder])
    assert "| 16_Conv_Mish | compute |" in text and "| 87_Conv_Mish | compute |" in text
    assert "over 2 tasks; none of them is memory-bound." in text and "nan" not in text
    legacy = tmp_path / "legacy" / "level2"
    _compile_bound_folder(legacy, rows, runs)
    assert "| 87_Conv_Mish | memory |" in bench().compile_bound_table([legacy])


def test_the_table_names_the_ceilings_behind_each_runs_floors(tmp_path):
    """Each machine measures its own ceilings: under the table, per run, the copy bandwidth its rows' copy times
    imply and the matmul rate its compute-bound rows' floors imply, so that two runs whose floors do not compare
    show it (session 38: level 1's 50, 54.0 GFLOP, had a floor of 1.053 ms on earlier machines, 51 TFLOP/s, and
    0.426 on another, 127)."""
    older, newer = tmp_path / "a" / "level1", tmp_path / "b" / "level1"
    conv = dict(eager_ms=2.7, compile_ms=2.9, **GPU_ROW)
    _compile_bound_folder(older, [TaskRow("50_Conv", "50.py", best_ms=1.98, floor_ms=1.053, **conv),
                                  TaskRow("1_Softmax", "1.py", best_ms=1.1, eager_ms=2.0, compile_ms=1.6, floor_ms=1.0,
                                          **GPU_ROW)],
                          [(1.2e9, {}), (4.2e9, {})], copies=[0.29, 1.0], flops=[54.0e9, 0.0])
    _compile_bound_folder(newer, [TaskRow("54_Conv", "54.py", best_ms=2.05, floor_ms=0.312, **conv)],
                          [(0.5e9, {})], copies=[0.12], flops=[39.6e9])
    text = bench().compile_bound_table([older, newer])
    assert "Ceilings behind the floors, per run (each machine measures its own):" in text
    assert f"- {older}: copy 4.20 TB/s, matmul 51.3 TFLOP/s" in text
    assert f"- {newer}: copy 4.17 TB/s, matmul 126.9 TFLOP/s" in text


def test_the_table_merges_several_later_runs_oldest_first(tmp_path, monkeypatch):
    """--newer again for each later run: a task's row comes from the last run of it (2_Conv from the latest,
    4_Pool from the one before)."""
    runs = [tmp_path / name for name in ("base", "later", "latest")]
    for run, best in zip(runs, (3.0, 2.0, 1.5)):
        rows = [TaskRow("2_Conv", "2.py", best_ms=best, eager_ms=2.5, compile_ms=2.5, floor_ms=1.0, **GPU_ROW)]
        if run.name == "later":
            rows.append(TaskRow("4_Pool", "4.py", best_ms=1.2, eager_ms=2.5, compile_ms=2.5, floor_ms=1.0, **GPU_ROW))
        _compile_bound_folder(run / "level2", rows, [(1e9, {"run": run.name})] * len(rows))
    b = bench()
    monkeypatch.setattr(sys, "argv", ["kernelbench_bench.py", "--out", str(runs[0]), "--levels", "2", "--table",
                                      "--kernelbench", str(tmp_path / "kb"), "--newer", str(runs[1]), "--newer",
                                      str(runs[2])])
    assert b.main() == 0
    table = (runs[0] / "compile_bound.md").read_text()
    assert table.count("2_Conv") == 1 and "| 1.500 |" in table and "template: run=latest" in table
    assert "| 4_Pool |" in table and "template: run=later" in table


BASE_TABLE = """# an older session's results

| task | bound | compile ms | best ms, before | best ms, now |
|---|---|---:|---:|---:|
| 5_Pool | memory | 1.000 | 2.000 | 1.000 |

| task | bound | eager ms | compile ms | best ms | floor ms | compile/floor | best/floor | shipped vs compile | winner |
|---|---|---:|---:|---:|---:|---:|---:|---:|---|
| 2_Conv | compute | 2.500 | 2.500 | 3.000 | 1.000 | 2.50x | 3.00x | 1.00x | template: run=old |
| 7_Norm | memory | 2.000 | 1.600 | 1.600 | 1.000 | 1.60x | 1.60x | 1.00x | template: norm |
| 4_Mv | compute | 3.000 | 3.000 | 1.500 | 1.250 | 2.40x | 1.20x | 2.00x | template: mv |
| 8_Scale | memory | 1.100 | 1.100 | 1.000 | 0.500 | 2.20x | 2.00x | 1.10x | template: scale |

Some prose after the table, and another table that is not read:

| task | bound | eager ms | compile ms | best ms | floor ms | compile/floor | best/floor | shipped vs compile | winner |
| 9_Other | memory | 1.000 | 1.000 | 1.000 | 1.000 | 1.00x | 1.00x | 1.00x | x |
"""


TASK = """import torch

class Model(torch.nn.Module):
    def forward(self, *xs):
        return {expr}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return []
"""


def _base_tasks(folder: Path) -> None:
    """The base table's tasks, on the meta device a billion bytes each (copy 1 ms at 1 TB/s): three that read
    and write 125M fp32 values, and a matrix-vector product of 0.5 GFLOP (0.5 ms at 1 TFLOP/s)."""
    folder.mkdir(parents=True)
    scale = TASK.format(expr="xs[0] * 2", inputs="torch.rand(1000, 1000, 125)")
    for name in ("2_Conv", "7_Norm", "8_Scale"):
        (folder / f"{name}.py").write_text(scale)
    (folder / "4_Mv.py").write_text(TASK.format(expr="xs[0] @ xs[1]",
                                                inputs="torch.rand(10000, 24991), torch.rand(24991, 1)"))


def test_a_committed_table_is_the_base_the_runs_rows_replace(tmp_path, monkeypatch):
    """--base: the first compile-bound table of a results file stands for the oldest run; a run's row replaces
    its task's, the other rows stay, each floored again from its task's work at the ceilings given (a floor
    from an older rule, 4_Mv's, is now memory-bound; 8_Scale's compile is no longer above 1.15x its floor),
    and the geomeans count both."""
    run = tmp_path / "run"
    _compile_bound_folder(run / "level2", [TaskRow("2_Conv", "2.py", best_ms=1.25, eager_ms=2.5, compile_ms=2.5,
                                                   floor_ms=1.0, **GPU_ROW)], [(1e9, {"run": "new"})])
    _base_tasks(tmp_path / "kb" / "level2")
    base = tmp_path / "results.md"
    base.write_text(BASE_TABLE)
    b = bench()
    argv = ["kernelbench_bench.py", "--out", str(run), "--levels", "2", "--table", "--kernelbench",
            str(tmp_path / "kb"), "--base", str(base)]
    monkeypatch.setattr(sys, "argv", argv + ["--ceilings", "1,1"])
    assert b.main() == 0
    table = (run / "compile_bound.md").read_text()
    assert "the 3 verified tasks where torch.compile is above 1.15x the floor (2 of them from the base table)" in table
    assert "template: run=new" in table and "run=old" not in table and "9_Other" not in table
    assert "5_Pool" not in table and "8_Scale" not in table  # a table of another head is not the base
    assert "| 7_Norm | memory | 2.000 | 1.600 | 1.600 | 1.000 | 1.60x | 1.60x | 1.00x | template: norm |" in table
    assert "| 4_Mv | memory | 3.000 | 3.000 | 1.500 | 1.000 | 3.00x | 1.50x | 2.00x | template: mv |" in table
    # the run's one row is at its own bandwidth, so memory-bound: (2.0 x 1.0 x 2.0)^(1/3) over compile,
    # (1.25 x 1.6 x 1.5)^(1/3)
    assert "1.59x over 3 tasks; best/floor on the 3 memory-bound ones: geomean 1.44x, worst 1.60x" in table
    assert ("The base table's rows floored again at copy 1.00 TB/s and fp32 matmul 1.0 TFLOP/s, their FLOPs and "
            "bytes counted on the meta device: 2 floor(s) moved by more than 1%.") in table
    for bad in (["--ceilings", "fast"], []):  # the run has no compute-bound row to give a matmul rate
        monkeypatch.setattr(sys, "argv", argv + bad)
        with pytest.raises(SystemExit) as stop:
            b.main()
        assert stop.value.code == 2
    # a run that recorded its machine's ceilings: fp32 products at a third of TF32's 3 TFLOP/s, as floor_ms takes
    (run / "level2" / "ceilings.json").write_text(json.dumps({"copy_bytes_per_s": 1e12, "matmul_fp32_flops": 0.5e12,
                                                              "matmul_tf32_flops": 3e12}))
    assert b.main() == 0 and (run / "compile_bound.md").read_text() == table
    (tmp_path / "kb" / "level2" / "4_Mv.py").unlink()
    monkeypatch.setattr(sys, "argv", argv + ["--ceilings", "1,1"])
    with pytest.raises(SystemExit) as stop:
        b.main()
    assert stop.value.code == 2
    base.write_text("# no table here\n")
    with pytest.raises(SystemExit) as stop:
        b.main()
    assert stop.value.code == 2  # argparse's usage error, after one sentence naming the file
