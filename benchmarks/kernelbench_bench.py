"""`kernelwright batch` with no LLM over KernelBench's level1, level2 and level3 on the GPUs here, coverage first
(a small budget per task), one worker per GPU, one output folder per level, in calls of under ten minutes that
continue each other (`batch --max-seconds`, then `--resume`). After each call it prints, per level: the tasks
done, the share with a verified kernel, the geomean speedups over eager and over torch.compile (each task the
better of its kernel and eager PyTorch), and every task without a kernel with its reason; OUT/summary.md gets
the same tables.

    python benchmarks/kernelbench_bench.py --out OUT [--kernelbench ../shared/kernelbench] [--levels 1,2,3]
        [--budget 4] [--max-seconds 480] [--time-limit 300] [--tasks-per-level N] [--glob '*Conv*'] [--no-knowledge]
    python benchmarks/kernelbench_bench.py --out OUT --table      # the tables of what is done so far, no run

Call it again with the same arguments until every level is finished: each call resumes where the last one
stopped (the next unfinished level first) and loses nothing."""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
    p.add_argument("--table", action="store_true", help="print the tables of OUT and run nothing")
    args = p.parse_args()
    out = Path(args.out)
    levels = [f"level{n.strip()}" for n in args.levels.split(",")]
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown:
        p.error(f"unknown level(s) {', '.join(unknown)}; KernelBench has 1, 2 and 3")
    chosen = {level: select(Path(args.kernelbench) / level, args.tasks_per_level, args.glob) for level in levels}
    deadline = time.monotonic() + args.max_seconds
    for level, files in chosen.items():
        left = deadline - time.monotonic()
        if not args.table and not finished(out / level, files) and left >= MIN_SLICE_S:
            run_batch(write_suite(out, level, files), out / level, args.budget, left, args.no_knowledge,
                      args.time_limit)
    text = markdown([summarize_level(out / level, len(files)) for level, files in chosen.items()])
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    print(text)
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


def run_batch(suite: Path, folder: Path, budget: int, seconds: float, no_knowledge: bool,
              time_limit: float = 300.0) -> int:
    """One `kernelwright batch` call for a level, new or resumed, stopped cleanly after `seconds`; its output
    goes to OUT/LEVEL.log."""
    cmd = [sys.executable, "-m", "agent.cli", "batch", str(suite), "--out", str(folder), "--budget", str(budget),
           "--max-seconds", f"{seconds:.0f}", "--time-limit", f"{time_limit:.0f}"]
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
class LevelSummary:
    level: str
    total: int = 0
    done: int = 0
    verified: int = 0  # done tasks with a correct kernel
    kept: int | None = None  # of those, faster than eager (None: no GPU times)
    geomean_eager: float | None = None  # each task the better of its kernel and eager PyTorch
    geomean_compile: float | None = None
    interpreted: bool = False
    missing: list[tuple[str, str]] = field(default_factory=list)  # (task, why it has no kernel)


def summarize_level(folder: Path, total: int = 0) -> LevelSummary:
    """A level's figures from the results.json that `kernelwright batch` writes in its folder (`total`: the
    tasks selected, for a level not started yet)."""
    s = LevelSummary(folder.name, total)
    results = folder / "results.json"
    if not results.is_file():
        return s
    data = json.loads(results.read_text())
    summary = data["summary"]
    s.total, s.done, s.verified, s.kept = data["total"], data["finished"], summary["correct"], summary.get("kept")
    s.geomean_eager, s.geomean_compile = summary["geomean"]["eager"], summary["geomean"]["compile"]
    s.interpreted = data["interpreted"]
    for t in data["tasks"]:
        if t["status"] == "done" and t["verdict"] != "correct":
            s.missing.append((t["task"], _why(t)))
    return s


def _why(t: dict) -> str:
    reason = " ".join((t.get("reason") or "").split()) or "no reason was recorded"
    what = {"none": "no candidate was evaluated", "error": "the task could not be used"}.get(
        t["verdict"], f"no correct kernel (mostly {t['verdict']})")
    return f"{what}: {reason.rstrip('.')[:300]}."


def markdown(levels: list[LevelSummary]) -> str:
    """The per-level table, then each level's tasks without a kernel."""
    lines = ["| level | done | verified kernel | kept (faster than eager) | geomean vs eager | "
             "geomean vs torch.compile |", "|---|---:|---:|---:|---:|---:|"]
    for s in levels:
        share = f"{s.verified}/{s.done} ({s.verified / s.done:.0%})" if s.done else "–"
        kept = "–" if s.kept is None else str(s.kept)
        lines.append(f"| {s.level} | {s.done}/{s.total} | {share} | {kept} | {_x(s.geomean_eager, s)} | "
                     f"{_x(s.geomean_compile, s)} |")
    lines += ["", "Geomeans count each task as the better of its kernel and eager PyTorch (a slower kernel is not "
              "kept: 1.0x over eager)."]
    if any(s.interpreted for s in levels):
        lines.append("Times from the Triton interpreter on a CPU give no speedups.")
    for s in levels:
        if s.missing:
            lines += ["", f"{s.level}: {len(s.missing)} task(s) without a kernel", ""]
            lines += [f"- {task}: {why}" for task, why in s.missing]
    return "\n".join(lines) + "\n"


def _x(v: float | None, s: LevelSummary) -> str:
    if s.interpreted:
        return "n/a (interpreter)"
    return "–" if v is None else f"{v:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
