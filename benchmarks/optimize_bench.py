"""`kernelwright optimize` with no LLM over the project's suite on a GPU, one worker process per GPU, and
one table: per task the eager, torch.compile and best-kernel times, the speed-of-light floor, best/floor,
the evaluations and seconds it took, and when it reached 95% of its final speedup; geometric means last.

    python benchmarks/optimize_bench.py --out OUT [--suite tasks/suite.toml] [--budget 40]
                                        [--time-limit 300] [--only 1-12] [--gpus 4]
    python benchmarks/optimize_bench.py --table OUT [OUT2 ...]     # the table of finished runs only

A task's speedup over eager counts as 1.0x when no kernel beat eager (eager is what a user would keep);
over torch.compile it is compile time over the better of the best kernel and eager."""
from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.task import load_suite  # noqa: E402

RIDGE_FLOP_PER_BYTE = 51e12 / 4.27e12  # fp32 without TF32 on the H200: below it a task is memory-bound


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder for the runs (one sub-folder per task)")
    p.add_argument("--suite", default="tasks/suite.toml")
    p.add_argument("--budget", type=int, default=40)
    p.add_argument("--time-limit", type=float, default=300.0)
    p.add_argument("--only", help="task numbers to run, e.g. 1-12 or 3,5,9 (1-based positions in the suite)")
    p.add_argument("--gpus", help="GPU indices to use, one worker process each, e.g. 1,2,3 (default: all)")
    p.add_argument("--no-knowledge", action="store_true", help="run optimize without the knowledge store")
    p.add_argument("--table", nargs="+", metavar="OUT", help="print the table of these finished folders")
    args = p.parse_args()
    if args.table:
        return print_table([Path(d) for d in args.table])
    if not args.out:
        p.error("--out is required unless --table is given")
    specs = load_suite(args.suite)
    chosen = [s for i, s in enumerate(specs, 1) if _wanted(i, args.only)]
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(_gpu_count()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    extra = " --no-knowledge" if args.no_knowledge else ""
    for i, g in enumerate(gpus):
        mine = chosen[i::len(gpus)]
        cmd = "; ".join(
            f"{sys.executable} -m agent.cli optimize {s.path} --budget {args.budget} --time-limit "
            f"{args.time_limit} --out {out / s.name}{extra} > {out / s.name}.log 2>&1" for s in mine)
        if cmd:
            procs.append(subprocess.Popen(["bash", "-c", cmd], env={**os.environ, "CUDA_VISIBLE_DEVICES": str(g)}))
    for proc in procs:
        proc.wait()
    return print_table([out])


def print_table(folders: list[Path]) -> int:
    rows = [r for folder in folders for d in sorted(folder.iterdir()) if d.is_dir() and (r := _row(d))]
    head = (f"{'task':<26}{'class':>7}{'eager':>9}{'compile':>9}{'best':>9}{'floor':>9}{'best/fl':>8}"
            f"{'vs eager':>9}{'vs comp':>9}{'evals':>6}{'sec':>6}{'ev95':>6}{'s95':>6}")
    print(head)
    for r in rows:
        print(f"{r['task']:<26}{r['class']:>7}{r['eager']:>9.4f}{_f(r['compile'])}{_f(r['best'])}{_f(r['floor'])}"
              f"{_f(r['best_floor'], 8, 2)}{r['vs_eager']:>8.2f}x{_f(r['vs_compile'], 8, 2)}x{r['evals']:>6}"
              f"{r['seconds']:>6.0f}{r['evals95']:>6}{r['seconds95']:>6.0f}")
    mem = [r["best_floor"] for r in rows if r["class"] == "memory" and r["best_floor"]]
    comp = [r["vs_compile"] for r in rows if r["vs_compile"]]
    print(f"\n{len(rows)} tasks; geomean speedup vs eager {_geo([r['vs_eager'] for r in rows]):.3f}x, "
          f"vs torch.compile {_geo(comp):.3f}x ({len(comp)} tasks with a compile time); "
          f"best/floor geomean on {len(mem)} memory-bound tasks {_geo(mem):.3f}; "
          f"worst evals to 95% {max((r['evals95'] for r in rows), default=0)}, "
          f"worst seconds to 95% {max((r['seconds95'] for r in rows), default=0):.0f}")
    return 0


def _row(folder: Path) -> dict | None:
    report, db = folder / "report.json", folder / "run.sqlite"
    if not report.exists() or not db.exists():
        return None
    rep = json.loads(report.read_text())
    evals = _evaluations(db)
    timed = [e for e in evals if e["timing"] and e["timing"].get("eager_ms")]
    if not timed:
        return {"task": folder.name, "class": "?", "eager": math.nan, "compile": None, "best": None,
                "floor": math.nan, "best_floor": None, "vs_eager": 1.0, "vs_compile": None,
                "evals": len(evals), "seconds": _span(evals), "evals95": 0, "seconds95": 0.0}
    t0 = timed[0]["timing"]
    if t0.get("interpreted"):
        raise SystemExit(f"{folder} holds interpreter timings from a CPU: this table is for GPU runs only.")
    eager, compile_ms, floor = t0["eager_ms"], t0["compile_ms"], t0["floor_ms"]
    correct = [e for e in evals if e["verdict"] == "correct"]
    best = min((e["timing"]["ms"] for e in correct), default=None)
    effective = min(best or math.inf, eager)
    final = eager / effective
    running, evals95, seconds95 = math.inf, 0, 0.0
    for i, e in enumerate(evals, 1):
        if e["verdict"] == "correct":
            running = min(running, e["timing"]["ms"])
        if eager / min(running, eager) >= 0.95 * final:
            evals95, seconds95 = i, e["at"] - evals[0]["proposed"]
            break
    intensity = t0["flops"] / t0["bytes"] if t0.get("bytes") else 0.0
    return {"task": folder.name, "class": "memory" if intensity < RIDGE_FLOP_PER_BYTE else "compute",
            "eager": eager, "compile": compile_ms, "best": best, "floor": floor,
            "best_floor": effective / floor if floor else None, "vs_eager": final,
            "vs_compile": compile_ms / effective if compile_ms else None, "evals": len(evals),
            "seconds": _span(evals), "evals95": evals95, "seconds95": seconds95, "stop": rep.get("stop_reason")}


def _evaluations(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    rows = con.execute("SELECT verdict, metrics, proposed_at, evaluated_at FROM candidates "
                       "WHERE status = 'evaluated' ORDER BY evaluated_at, id").fetchall()
    out = []
    for r in rows:
        metrics = json.loads(r["metrics"]) if r["metrics"] else {}
        out.append({"verdict": r["verdict"], "timing": metrics.get("timing"), "at": r["evaluated_at"],
                    "proposed": r["proposed_at"]})
    return out


def _span(evals: list[dict]) -> float:
    return evals[-1]["at"] - evals[0]["proposed"] if evals else 0.0


def _wanted(i: int, only: str | None) -> bool:
    if not only:
        return True
    for part in only.split(","):
        lo, _, hi = part.partition("-")
        if int(lo) <= i <= int(hi or lo):
            return True
    return False


def _gpu_count() -> int:
    import torch
    return max(torch.cuda.device_count(), 1)


def _geo(values: list[float]) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _f(v, width: int = 9, digits: int = 4) -> str:
    return f"{v:>{width}.{digits}f}" if v is not None else f"{'n/a':>{width}}"


if __name__ == "__main__":
    sys.exit(main())
