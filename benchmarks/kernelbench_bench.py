"""`kernelwright batch` with no LLM over KernelBench's level1, level2 and level3 on the GPUs here, coverage first
(a small budget per task), one worker per GPU, one output folder per level, in calls of under ten minutes that
continue each other (`batch --max-seconds`, then `--resume`). After each call it prints, per level: the tasks
done, the share with a verified kernel, the geomean speedups over eager and over torch.compile (each task the
better of its kernel and eager PyTorch), best/floor, and an audit of every task without a kernel: its best
candidate's verdict, that candidate's relative error against the golden run (fp32 for a bf16 or fp16 task) next to
PyTorch's own, and the reason; a candidate within the rule's bound in norm that was still refused is marked as
a possible false negative. OUT/summary.md gets the same tables, OUT/tasks.md one row per finished task,
OUT/compile_bound.md the level-1/2 tasks where torch.compile is above 1.15x the floor (issue 19's table), and
OUT/LEVEL/ceilings.json the machine's ceilings (copy bandwidth, matmul rates) its floors were taken at.

    python benchmarks/kernelbench_bench.py --out OUT [--kernelbench ../shared/kernelbench] [--levels 1,2,3]
        [--budget 4] [--max-seconds 480] [--time-limit 300] [--tasks-per-level N] [--glob '*Conv*'] [--no-knowledge]
        [--dtype bfloat16] [--deep N]
    python benchmarks/kernelbench_bench.py --out OUT --table      # the tables of what is done so far, no run
    python benchmarks/kernelbench_bench.py --out OUT --table --base benchmarks/results/FILE.md --newer OUT2
        # a committed compile-bound table with the rows of the runs OUT, then OUT2, in place of theirs; its
        # other rows floored again at the runs' ceilings (or --ceilings 4.25,126.8: TB/s, fp32 TFLOP/s)

--dtype bfloat16 (or float16) casts every task's inputs and parameters (`batch --dtype`): kernels are judged by
the low-precision rule against an fp32 run, and eager and torch.compile are timed in that dtype in the same run.

Call it again with the same arguments until every level is finished: each call resumes where the last one
stopped (the next unfinished level first) and loses nothing. A level is not started with under a minute of the
call left (it says so); --max-seconds under that is refused (exit code 2)."""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from agent.analysis import load_task  # noqa: E402
from tools.compare import LOW_FACTOR, LOW_FLOOR, UNIT_ROUNDOFF  # noqa: E402
from tools.evaluate import cache_dir  # noqa: E402
from tools.profile import MEMORY_SHARE, bytes_bound, count_work, device_ceilings, floor_ms  # noqa: E402
from tools.score import geomean  # noqa: E402

LEVELS = ("level1", "level2", "level3")
GRACE_S = 90.0  # evaluations in flight may finish after --max-seconds; past this the call is stopped at once
MIN_SLICE_S = 60.0  # a level is not started with less time than this left in the call


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder: OUT/level1, OUT/level2, ... and OUT/summary.md")
    p.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"),
                   help="KernelBench's folder of levels (default ../shared/kernelbench)")
    p.add_argument("--levels", default="1,2,3", help="levels to run, e.g. 1 or 1,3 (default 1,2,3)")
    p.add_argument("--budget", type=int, default=4, help="evaluations per task (default 4: coverage first)")
    p.add_argument("--time-limit", type=float, default=300.0, metavar="S",
                   help="wall-clock seconds per task, so one slow task cannot hold a call (default 300)")
    p.add_argument("--max-seconds", type=float, default=480.0,
                   help=f"seconds of batch work in this call (default 480; in-flight evaluations get {GRACE_S:g} more)")
    p.add_argument("--tasks-per-level", type=int, metavar="N", help="only the first N tasks of each level, by number")
    p.add_argument("--glob", help="only task files whose name matches, ignoring case, e.g. '*conv*'")
    p.add_argument("--no-knowledge", action="store_true", help="no retrieval from or write-back to the knowledge store")
    p.add_argument("--dtype", choices=("bfloat16", "float16"),
                   help="cast every task to this dtype (batch --dtype; default: the tasks' own, float32)")
    p.add_argument("--deep", type=int, metavar="N", help="deep input sets of each task's final check (batch's "
                                                         "default: 16 on a GPU; 0: its 6 trials only, without "
                                                         "compute-sanitizer's forward; the whole check took 107 s "
                                                         "on an 8 GiB task)")
    p.add_argument("--table", action="store_true", help="print the tables of OUT and run nothing")
    p.add_argument("--newer", metavar="DIR", action="append", default=[],
                   help="with --table: the output folder of a later run of some of the tasks, whose rows replace "
                        "OUT's in the compile-bound table (again for each later run, oldest first)")
    p.add_argument("--base", metavar="FILE.md",
                   help="with --table: a results file whose first compile-bound table is older than every run "
                        "given; the runs' rows replace its rows, and its other rows stay, each floor counted "
                        "again (on the meta device, from --kernelbench's task file) at the runs' ceilings")
    p.add_argument("--ceilings", metavar="TB/s,TFLOP/s",
                   help="with --base: the copy bandwidth and fp32 matmul rate to floor its rows at (default: those "
                        "the last run recorded in LEVEL/ceilings.json, else those its rows' floors imply)")
    args = p.parse_args()
    out = Path(args.out)
    levels = [f"level{n.strip()}" for n in args.levels.split(",")]
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        p.error(f"unknown level(s) {', '.join(unknown)}; KernelBench has 1, 2 and 3")
    if (args.newer or args.base) and not args.table:
        p.error("--newer and --base go with --table: they merge the tables of several runs and run nothing")
    if args.ceilings and not args.base:
        p.error("--ceilings goes with --base: it floors the base table's rows")
    if not args.table and args.max_seconds < MIN_SLICE_S:
        p.error(f"--max-seconds {args.max_seconds:g} is under the {MIN_SLICE_S:g} s a level needs to be started")
    base, work, ceilings = {}, {}, None
    if args.base:
        try:
            base = table_rows(Path(args.base).read_text())
        except OSError as e:
            p.error(f"cannot read --base {args.base}: {e.strerror}")
        if not base:
            p.error(f"--base {args.base} holds no compile-bound table (a row per task with its bound, memory or "
                    "compute)")
        try:
            work = {task: meta_work(task_file(Path(args.kernelbench), task)) for task in base}
        except (FileNotFoundError, RuntimeError) as e:
            p.error(str(e))
        if args.ceilings:
            try:
                copy, rate = (float(v) for v in args.ceilings.split(","))
            except ValueError:
                p.error(f"--ceilings {args.ceilings}: give two numbers, e.g. 4.25,126.8 (TB/s, TFLOP/s)")
            ceilings = {"copy_bytes_per_s": copy * 1e12, "matmul_fp32_flops": rate * 1e12}
    for level in levels:
        other = batch_dtype(out / level)
        if not args.table and other is not False and other != args.dtype:
            p.error(f"{out / level} holds a batch in {other or 'float32'}; give the same --dtype or another --out")
    chosen = {level: select(Path(args.kernelbench) / level, args.tasks_per_level, args.glob) for level in levels}
    deadline = time.monotonic() + args.max_seconds
    for level, files in chosen.items():
        left = deadline - time.monotonic()
        if args.table or finished(out / level, files):
            continue
        if left < MIN_SLICE_S:
            print(f"{level}: not started, {left:.0f} s left in this call (a level needs {MIN_SLICE_S:g}); call "
                  "again with the same arguments to go on", file=sys.stderr)
            continue
        run_batch(write_suite(out, level, files), out / level, args.budget, left, args.no_knowledge,
                  args.time_limit, args.dtype, args.deep)
        if torch.cuda.is_available():  # the ceilings its floors took (measured once per machine, cached)
            (out / level / "ceilings.json").write_text(json.dumps(device_ceilings(cache_dir()), indent=1))
    text = markdown([summarize_level(out / level, len(files), args.dtype) for level, files in chosen.items()])
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    (out / "tasks.md").write_text("".join(task_table(out / level) for level in chosen))
    newer = [Path(d) / level for d in args.newer for level in chosen if level != "level3"]
    try:
        beyond = compile_bound_table([out / level for level in chosen if level != "level3"] + newer, base, work,
                                     ceilings)
    except ValueError as e:
        p.error(str(e))
    (out / "compile_bound.md").write_text(beyond)
    print(text + f"\n{beyond}\nEvery finished task, one row each: {out / 'tasks.md'}")
    return 0


# --- running ----------------------------------------------------------------------------------------------
def select(folder: Path, first: int | None, glob: str | None) -> list[Path]:
    """The level's task files in KernelBench's numbering, filtered by name and cut to the first N."""
    files = [f for f in folder.glob("*.py")
             if not f.name.startswith("_") and (not glob or fnmatch.fnmatch(f.name.lower(), glob.lower()))]
    files.sort(key=lambda f: (int(m.group(1)) if (m := re.match(r"(\d+)_", f.name)) else 1 << 30, f.name))
    return files[:first] if first else files


def write_suite(out: Path, level: str, files: list[Path]) -> Path:
    """OUT/LEVEL.toml, the level's task list: the same path in every call, so that --resume accepts it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{level}.toml"
    path.write_text("".join(f"[[task]]\npath = {json.dumps(str(f.resolve()))}\n\n" for f in files))
    return path


def finished(folder: Path, files: list[Path]) -> bool:
    """Whether every selected task of the level is done in its batch (DIR/batch.json)."""
    state = folder / "batch.json"
    tasks = json.loads(state.read_text())["tasks"] if state.is_file() else {}
    return all(tasks.get(f.stem, {}).get("status") == "done" for f in files)


def batch_dtype(folder: Path) -> str | None | bool:
    """The --dtype the level's batch runs with (None: the tasks' own); False where no batch is there yet."""
    state = folder / "batch.json"
    return json.loads(state.read_text()).get("settings", {}).get("dtype") if state.is_file() else False


def run_batch(suite: Path, folder: Path, budget: int, seconds: float, no_knowledge: bool,
              time_limit: float = 300.0, dtype: str | None = None, deep: int | None = None) -> int:
    """One `kernelwright batch` call for a level, new or resumed, stopped cleanly after `seconds`; its output
    goes to OUT/LEVEL.log."""
    cmd = [sys.executable, "-m", "agent.cli", "batch", str(suite), "--out", str(folder), "--budget", str(budget),
           "--max-seconds", f"{seconds:.0f}", "--time-limit", f"{time_limit:.0f}",
           "--workers", str(max(torch.cuda.device_count(), 1))]  # one per GPU here, also when resuming elsewhere
    cmd += ["--dtype", dtype] if dtype else []
    cmd += ["--deep", str(deep)] if deep is not None else []
    cmd += ["--resume"] if (folder / "batch.json").is_file() else []
    cmd += ["--no-knowledge"] if no_knowledge else []
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}  # no LLM
    print(f"{folder.name}: {' '.join(cmd[2:])}", flush=True)
    with open(folder.parent / f"{folder.name}.log", "a") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=seconds + GRACE_S)
        except subprocess.TimeoutExpired:  # twice Ctrl-C: batch quits at once; its run stores are crash-safe
            for _ in range(2):
                os.killpg(proc.pid, signal.SIGINT)
                time.sleep(1.0)
            return proc.wait(timeout=60)


# --- the tables ---------------------------------------------------------------------------------------------
@dataclass
class Missing:
    """A task without a kernel, and the figures of its best candidate where the rule against a wider run judged
    it (None elsewhere)."""

    task: str
    why: str  # the task's verdict and reason, one sentence
    verdict: str  # the best candidate's verdict (the task's when no candidate has figures)
    reason: str  # the best candidate's reason
    rel_err: float | None = None  # its relative error against the golden run
    own_rel_err: float | None = None  # PyTorch's own in the task's dtype against the same run
    suspect: bool = False  # within the rule's bound in norm and still refused: a possible false negative


@dataclass
class LevelSummary:
    level: str
    total: int = 0
    done: int = 0
    verified: int = 0  # done tasks with a correct kernel
    kept: int | None = None  # of those, faster than eager (None: no GPU times)
    geomean_eager: float | None = None  # each task the better of its kernel and eager PyTorch
    geomean_compile: float | None = None
    best_floor: float | None = None  # geomean of best kernel ms / speed-of-light floor ms over verified kernels
    interpreted: bool = False
    dtype: str = "float32"  # what the tasks ran in: --dtype, else the tasks' own
    device: str = ""
    worst_passed: tuple[str, float] | None = None  # (task, its kernel's error / PyTorch's own): the largest ratio
    missing: list[Missing] = field(default_factory=list)
    no_compile: list[tuple[str, str]] = field(default_factory=list)  # (task, why torch.compile gave no time)


def summarize_level(folder: Path, total: int = 0, dtype: str | None = None) -> LevelSummary:
    """A level's figures from the results.json that `kernelwright batch` writes in its folder, with each task's
    candidates read from its run store (`total` and `dtype`: the tasks selected and --dtype, for a level not
    started yet)."""
    s = LevelSummary(folder.name, total, dtype=batch_dtype(folder) or dtype or "float32")
    results = folder / "results.json"
    if not results.is_file():
        return s
    data = json.loads(results.read_text())
    summary = data["summary"]
    s.total, s.done, s.verified, s.kept = data["total"], data["finished"], summary["correct"], summary.get("kept")
    s.geomean_eager, s.geomean_compile = summary["geomean"]["eager"], summary["geomean"]["compile"]
    s.interpreted, s.device = data["interpreted"], data.get("device", "")
    done = [t for t in data["tasks"] if t["status"] == "done"]
    s.best_floor = geomean(t["best_ms"] / t["floor_ms"] for t in done if t["verdict"] == "correct"
                           and t.get("floor_ms") and t.get("best_ms") and not t.get("interpreted"))
    dirs = json.loads((folder / "batch.json").read_text())["tasks"] if (folder / "batch.json").is_file() else {}
    u = UNIT_ROUNDOFF[getattr(torch, s.dtype)]
    for t in done:
        store = folder / dirs.get(t["task"], {}).get("dir", t["task"])
        if t.get("eager_ms") and t.get("compile_ms") is None and not t.get("interpreted"):
            s.no_compile.append((t["task"], _compile_error(candidates(store / "run.sqlite"))))
        if t["verdict"] == "correct":
            ratio = _passed_ratio(store)
            if ratio is not None and (s.worst_passed is None or ratio > s.worst_passed[1]):
                s.worst_passed = (t["task"], ratio)
        else:
            s.missing.append(_audit(t, candidates(store / "run.sqlite"), u))
    return s


def candidates(path: Path) -> list[dict]:
    """The evaluated candidates of a task's run store (agent/runstore.py): run, id, operator, params, verdict,
    reason and the EvalResult's JSON as `metrics`."""
    if not path.is_file():
        return []
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT run_id, id, operator, params, verdict, reason, metrics FROM candidates "
                          "WHERE status = 'evaluated' ORDER BY id").fetchall()
    finally:
        db.close()
    return [{"run": run, "id": i, "operator": op, "params": json.loads(pa or "{}"), "verdict": v, "reason": r or "",
             "metrics": json.loads(m) if m else {}} for run, i, op, pa, v, r, m in rows]


def _audit(t: dict, evaluated: list[dict], u: float) -> Missing:
    """The audit line of a task without a kernel: its candidate closest to the low-precision rule's bound in
    norm (LOW_FACTOR x PyTorch's own error + LOW_FLOOR units of roundoff), else the task's own verdict and
    reason."""
    judged = [c for c in evaluated if c["metrics"].get("own_rel_err") is not None
              and c["metrics"].get("rel_err") is not None]
    if not judged:
        return Missing(t["task"], _why(t), t["verdict"], " ".join((t.get("reason") or "").split()))
    bound = {c["id"]: LOW_FACTOR * c["metrics"]["own_rel_err"] + LOW_FLOOR * u for c in judged}
    best = min(judged, key=lambda c: c["metrics"]["rel_err"] / bound[c["id"]])
    rel, own = best["metrics"]["rel_err"], best["metrics"]["own_rel_err"]
    return Missing(t["task"], _why(t), best["verdict"], " ".join(best["reason"].split()), rel, own,
                   rel <= bound[best["id"]])


def _compile_error(evaluated: list[dict]) -> str:
    """Why torch.compile gave the task no time, as its baselines recorded it."""
    errors = [(c["metrics"].get("baselines") or {}).get("compile_error") for c in evaluated]
    return next((e for e in errors if e), "no reason was recorded (a run from before reasons were kept)")


def _passed_ratio(folder: Path) -> float | None:
    """The verified kernel's (report.json's best) relative error against the golden run over PyTorch's own."""
    report = folder / "report.json"
    best = (json.loads(report.read_text()).get("best") or {}) if report.is_file() else {}
    for c in candidates(folder / "run.sqlite"):
        m = c["metrics"]
        if c["id"] == best.get("id") and m.get("own_rel_err") and m.get("rel_err") is not None:
            return m["rel_err"] / m["own_rel_err"]
    return None


def _why(t: dict) -> str:
    reason = " ".join((t.get("reason") or "").split()) or "no reason was recorded"
    what = {"none": "no candidate was evaluated", "error": "the task could not be used"}.get(
        t["verdict"], f"no correct kernel (mostly {t['verdict']})")
    return f"{what}: {reason.rstrip('.')[:300]}."


def markdown(levels: list[LevelSummary]) -> str:
    """The per-level table, then each level's audit of the tasks without a kernel."""
    dtypes = sorted({s.dtype for s in levels if s.done}) or ["float32"]
    devices = sorted({s.device for s in levels if s.device})
    lines = [f"KernelBench in {', '.join(dtypes)}" + (f" on {', '.join(devices)}" if devices else "")
             + ": eager PyTorch and torch.compile timed in the same dtype, in the same run.", "",
             "| level | dtype | done | verified kernel | kept (faster than eager) | geomean vs eager | "
             "geomean vs torch.compile | best/floor |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in levels:
        share = f"{s.verified}/{s.done} ({s.verified / s.done:.0%})" if s.done else "–"
        kept = "–" if s.kept is None else str(s.kept)
        lines.append(f"| {s.level} | {s.dtype} | {s.done}/{s.total} | {share} | {kept} | {_x(s.geomean_eager, s)} | "
                     f"{_x(s.geomean_compile, s)} | {_x(s.best_floor, s)} |")
    lines += ["", "Geomeans count each task as the better of its kernel and eager PyTorch (a slower kernel is not "
              "kept: 1.0x over eager). best/floor: the geomean over verified kernels of their time over the "
              "speed-of-light floor (1.0x is the floor)."]
    if any(s.interpreted for s in levels):
        lines.append("Times from the Triton interpreter on a CPU give no speedups.")
    for s in levels:
        if s.worst_passed:
            lines += ["", f"{s.level}: the verified kernels' error against the golden run is at most "
                          f"{s.worst_passed[1]:.2f}x PyTorch's own ({s.worst_passed[0]})."]
    for s in levels:
        if s.no_compile:
            lines += ["", f"{s.level}: torch.compile gave no time for {len(s.no_compile)} task(s), left out of the "
                          f"geomean vs torch.compile: " + "; ".join(f"{t} ({_cell(why)})" for t, why in s.no_compile)]
    for s in levels:
        if s.missing:
            suspects = sum(m.suspect for m in s.missing)
            lines += ["", f"{s.level}: {len(s.missing)} task(s) without a kernel, {suspects} possible false "
                          f"negative(s); the best candidate's error against the golden run beside PyTorch's own "
                          f"in {s.dtype}", "",
                      "| task | best candidate | its error | PyTorch's own | reason |", "|---|---|---:|---:|---|"]
            lines += [f"| {m.task}{' **possible false negative**' if m.suspect else ''} | {m.verdict} | "
                      f"{_e(m.rel_err)} | {_e(m.own_rel_err)} | {_cell(m.reason or m.why)} |" for m in s.missing]
    return "\n".join(lines) + "\n"


def task_table(folder: Path) -> str:
    """A level's finished tasks, one row each, as its results.json has them (\"\" before the level starts)."""
    results = folder / "results.json"
    if not results.is_file():
        return ""
    done = [t for t in json.loads(results.read_text())["tasks"] if t["status"] == "done"]
    lines = [f"### {folder.name} ({len(done)} tasks)", "", "| task | verdict | eager ms | compile ms | kernel ms | "
             "kernel vs eager | kernel vs compile | best/floor | kept | s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for t in done:
        floor = t["best_ms"] / t["floor_ms"] if t.get("best_ms") and t.get("floor_ms") else None
        cells = [t["task"], t["verdict"], *(ms_cell(t.get(k)) for k in ("eager_ms", "compile_ms", "best_ms")),
                 *(ratio_cell(v) for v in (t.get("speedup_vs_eager"), t.get("speedup_vs_compile"), floor)),
                 "kernel" if t.get("kept") else "PyTorch", f"{t.get('seconds') or 0:.0f}"]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n\n"


COMPILE_SLACK = 1.15  # issue 19: the tasks where torch.compile is above 1.15x the speed-of-light floor


TABLE_HEAD = "| task | bound | eager ms | compile ms | best ms | floor ms | compile/floor | best/floor |"


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the first compile-bound table in a markdown text (compile_bound_table's, or a results file
    quoting it: the first table whose head starts as TABLE_HEAD), by task: each row's cells from task to the
    tenth (the winner)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(TABLE_HEAD)), len(lines))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 9:
            rows[cells[0]] = (cells + [""])[:10]
    return rows


def compile_bound_table(folders: list[Path], base: dict[str, list[str]] | None = None, work: dict | None = None,
                        ceilings: dict | None = None) -> str:
    """The verified tasks of levels 1 and 2 where torch.compile runs above COMPILE_SLACK x the floor: eager,
    compile and best kernel times, the floor, best/floor, the winning candidate's operator and parameters, and
    the geomeans (the shipped time is the better of kernel and eager, as in the level tables). A task is
    memory-bound when its bytes at the copy bandwidth (as its run recorded it, copy_ms; for a run from before
    that, the largest bytes/floor of the runs, wrong where no task of them is memory-bound) take at least
    MEMORY_SHARE of its floor (tools/profile.bytes_bound). A task in several folders takes its row from the
    last (a later run of it); `base` (table_rows of an older table) gives the rows of tasks no folder has, each
    floored again (refloor) from `work` (task: its FLOPs and bytes, meta_work's) at `ceilings` (as
    tools/profile.device_ceilings gives them; by default those the last run recorded, else those its rows
    imply: recorded_ceilings, run_ceilings). ValueError where there are none to take."""
    by_task, origin = {}, {}
    for folder in folders:
        results = folder / "results.json"
        if not results.is_file():
            continue
        dirs = json.loads((folder / "batch.json").read_text())["tasks"]
        for t in json.loads(results.read_text())["tasks"]:
            if t["status"] != "done" or t["verdict"] != "correct" or not t.get("floor_ms") or not t.get("compile_ms"):
                continue
            if t["compile_ms"] > COMPILE_SLACK * t["floor_ms"] and not t.get("interpreted"):
                by_task[t["task"]] = (t, _winner(folder / dirs.get(t["task"], {}).get("dir", t["task"])))
                origin[t["task"]] = folder
    rows = list(by_task.values())
    if not rows and not base:
        return "No verified level-1/2 task has torch.compile above 1.15x the floor.\n"
    bandwidth = max((w["bytes"] / t["floor_ms"] for t, w in rows), default=0.0)
    runs = []  # (run folder, bound, task, winner) for ceiling_lines and run_ceilings
    for t, w in rows:
        memory = bytes_bound(w["copy_ms"], t["floor_ms"]) if w["copy_ms"] else \
            w["bytes"] / t["floor_ms"] >= MEMORY_SHARE * bandwidth
        runs.append((origin[t["task"]], "–" if not w["bytes"] else "memory" if memory else "compute", t, w))
    # per task: its cells, its shipped time over compile's and its best/floor where memory-bound
    table, notes = {}, []
    if base:
        ceilings = ceilings or recorded_ceilings(folders) or run_ceilings(runs)
        if ceilings is None:
            raise ValueError("the base table's rows are floored again at the runs' ceilings, and no run here "
                             "recorded them or has a compute-bound row to give its matmul rate: give --ceilings "
                             "TB/s,TFLOP/s")
        table, moved = refloor(base, work or {}, ceilings)
        rate = floor_ms(1e12, 0.0, ceilings, "matmul_fp32_flops")  # ms for a TFLOP: fp32 products' rate
        notes = ["", f"The base table's rows floored again at copy {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s "
                     f"and fp32 matmul {1e3 / rate:.1f} TFLOP/s, their FLOPs and bytes counted on the meta device: "
                     f"{moved} floor(s) moved by more than 1%."]
    for folder, bound, t, w in runs:
        shipped = min(t["best_ms"], t["eager_ms"] or t["best_ms"])
        ratios = (t["compile_ms"] / t["floor_ms"], t["best_ms"] / t["floor_ms"], t["compile_ms"] / shipped)
        cells = [t["task"], bound, *(ms_cell(t.get(k)) for k in ("eager_ms", "compile_ms", "best_ms", "floor_ms")),
                 *(ratio_cell(v) for v in ratios), _cell(w["what"])[:120]]
        table[t["task"]] = (cells, ratios[2], ratios[1] if bound == "memory" else None)
    kept = len([k for k in table if k not in by_task])
    lines = [f"Levels 1-2, the {len(table)} verified tasks where torch.compile is above {COMPILE_SLACK}x the floor"
             + (f" ({kept} of them from the base table)" if base else ""),
             "", f"{TABLE_HEAD} shipped vs compile | winner |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {' | '.join(cells)} |" for cells, _, _ in table.values()]
    over_compile = [v for _, v, _ in table.values() if v is not None]
    memory = [v for _, _, v in table.values() if v is not None]
    on_memory = (f"best/floor on the {len(memory)} memory-bound ones: geomean {geomean(memory):.2f}x, worst "
                 f"{max(memory):.2f}x" if memory else "none of them is memory-bound")
    lines += ["", f"Geomean of the shipped time over torch.compile: {geomean(over_compile):.2f}x over {len(table)} "
              f"tasks; {on_memory}."]
    return "\n".join(lines + notes + ceiling_lines(runs)) + "\n"


def refloor(base: dict[str, list[str]], work: dict, ceilings: dict) -> tuple[dict, int]:
    """The base table's rows with their floors counted again: each task's FLOPs and bytes (`work`) at `ceilings`
    (tools/profile.device_ceilings's) by tools/profile.floor_ms, as fp32 tasks, its bound and ratios from that
    floor; a task whose torch.compile is no longer above COMPILE_SLACK x it is left out. Returns the rows (as
    compile_bound_table keeps them) and how many floors moved by more than 1%. A merged table had kept each
    row's floor from its own run: 85 of session 36's 149 rows dated from before fp32 products were floored at
    a third of the TF32 rate (session 33), 2.47x longer than the rest's, and seven of them were memory-bound."""
    rows, moved = {}, 0
    for task, cells in base.items():
        flops, nbytes = work[task]
        memory_ms, floor = nbytes / ceilings["copy_bytes_per_s"] * 1e3, floor_ms(flops, nbytes, ceilings,
                                                                                  "matmul_fp32_flops")
        compile_ms, best_ms = float(cells[3]), float(cells[4])
        moved += abs(floor / float(cells[5]) - 1) > 0.01
        if compile_ms <= COMPILE_SLACK * floor:
            continue
        bound = "memory" if bytes_bound(memory_ms, floor) else "compute"
        new = [task, bound, cells[2], cells[3], cells[4], ms_cell(floor), ratio_cell(compile_ms / floor),
               ratio_cell(best_ms / floor), *cells[8:]]
        rows[task] = (new, _ratio(cells[8]), best_ms / floor if bound == "memory" else None)
    return rows, moved


def recorded_ceilings(folders: list[Path]) -> dict | None:
    """The ceilings the last run that recorded its machine's (LEVEL/ceilings.json) floored its tasks at; None
    where no run recorded them."""
    recorded = [folder / "ceilings.json" for folder in folders if (folder / "ceilings.json").is_file()]
    return json.loads(recorded[-1].read_text()) if recorded else None


def run_ceilings(runs: list[tuple[Path, str, dict, dict]]) -> dict | None:
    """The copy bandwidth and fp32 matmul rate the runs' floors imply, the largest of each over every run
    (ceiling_lines gives them per run), or None where no row gives both."""
    implied = _implied(runs).values()
    copies, rates = [c for cs, _ in implied for c in cs], [r for _, rs in implied for r in rs]
    return {"copy_bytes_per_s": max(copies) * 1e12, "matmul_fp32_flops": max(rates) * 1e12} if copies and rates \
        else None


def task_file(kernelbench: Path, task: str) -> Path:
    """A level-1 or level-2 task's file under KernelBench's folder; FileNotFoundError saying so where neither has it."""
    for level in LEVELS[:2]:
        if (kernelbench / level / f"{task}.py").is_file():
            return kernelbench / level / f"{task}.py"
    raise FileNotFoundError(f"the base table's task {task} is in neither {kernelbench / 'level1'} nor "
                            f"{kernelbench / 'level2'}: give --kernelbench the folder its tasks came from")


def meta_work(path: Path) -> tuple[float, float]:
    """A task's FLOPs and minimum bytes, counted as the evaluator counts them (tools/profile.count_work) on the
    meta device: shapes, no memory and no values, milliseconds a task. RuntimeError where it cannot be."""
    try:
        module, _, _ = load_task(str(path), small=False)
        with torch.device("meta"):
            return count_work(module.Model(*module.get_init_inputs()), list(module.get_inputs()))
    except Exception as e:
        raise RuntimeError(f"cannot count the work of {path} on the meta device ({type(e).__name__}: {e})") from e


def ceiling_lines(runs: list[tuple[Path, str, dict, dict]]) -> list[str]:
    """Per run folder, the ceilings its floors imply: the copy bandwidth (bytes over copy_ms) and, over its
    compute-bound rows, the matmul rate (flops over the floor). Each machine measures its own
    (tools/profile.device_ceilings), so floors of runs on different machines compare only where these agree.
    `runs`: per task its run's folder, its bound as the table gives it, its results row and its winner."""
    out = [f"- {folder}: copy {max(c):.2f} TB/s" + (f", matmul {max(r):.1f} TFLOP/s" if r else "")
           for folder, (c, r) in _implied(runs).items() if c]
    return ["", "Ceilings behind the floors, per run (each machine measures its own):", *out] if out else []


def _implied(runs: list[tuple[Path, str, dict, dict]]) -> dict[Path, tuple[list, list]]:
    """Per run folder, the copy bandwidths (TB/s) and matmul rates (TFLOP/s) its rows' floors imply."""
    by_folder: dict[Path, tuple[list, list]] = {}
    for folder, bound, t, w in runs:
        copies, rates = by_folder.setdefault(folder, ([], []))
        if w["copy_ms"]:
            copies.append(w["bytes"] / w["copy_ms"] / 1e9)
            if bound == "compute" and w["flops"]:
                rates.append(w["flops"] / t["floor_ms"] / 1e9)
    return by_folder


def _winner(store: Path) -> dict:
    """The best candidate of a task's run (report.json): its operator and parameters in a few words, and the
    bytes its timing counted."""
    report = json.loads((store / "report.json").read_text()) if (store / "report.json").is_file() else {}
    best = report.get("best") or {}
    for c in candidates(store / "run.sqlite"):
        if c["run"] == report.get("run") and c["id"] == best.get("id"):
            what = c["operator"] + (": " + ", ".join(f"{k}={v}" for k, v in c["params"].items()) if c["params"] else "")
            timing = c["metrics"].get("timing") or {}
            return {"what": what, "bytes": timing.get("bytes") or 0.0, "copy_ms": timing.get("copy_ms"),
                    "flops": timing.get("flops") or 0.0}
    return {"what": best.get("operator", "?"), "bytes": 0.0, "copy_ms": None, "flops": 0.0}


def ms_cell(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def ratio_cell(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _ratio(cell: str) -> float | None:
    """A ratio_cell's value, or None for a dash."""
    return float(cell.rstrip("x")) if cell.endswith("x") else None


def _x(v: float | None, s: LevelSummary) -> str:
    if s.interpreted:
        return "n/a (interpreter)"
    return "–" if v is None else f"{v:.2f}x"


def _e(v: float | None) -> str:
    return "–" if v is None else f"{v:.2e}"


def _cell(text: str) -> str:
    """A reason in a table cell: one line, no pipes, at most 300 characters."""
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= 300 else text[:299] + "…"


if __name__ == "__main__":
    sys.exit(main())
