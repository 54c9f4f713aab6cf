"""Issue 18's benchmark: every task of KernelBench's level 1 and level 2 where the rewrite pass keeps a rewrite
(agent/templates/rewrite.py), searched by `kernelwright batch` with no LLM on the GPU here, in fp32. For each
task it prints the rules, the cost model's predicted gain, the measured time of the fastest correct candidate of
the original and of the rewritten program (the search offers both), the measured gain, and the best kernel
against eager PyTorch and torch.compile (timed in the same run) and against the original program's floor.

    python benchmarks/rewrite_bench.py --list [--kernelbench ../shared/kernelbench]    # where a rule fires (CPU)
    python benchmarks/rewrite_bench.py --out OUT [--budget 4] [--max-seconds 480]      # run and table (GPU)
    python benchmarks/rewrite_bench.py --out OUT --table                               # the table, no run

A call resumes OUT/rewrites where the last one stopped. The tasks are found at their full sizes by tracing
alone (meta tensors), so --list needs no GPU and no memory. OUT/rewrites.md gets the table."""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import torch  # noqa: E402

import kernelbench_bench as kb  # noqa: E402

LEVELS = ("level1", "level2")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="output folder: OUT/rewrites (the batch) and OUT/rewrites.md")
    p.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"),
                   help="KernelBench's folder of levels (default ../shared/kernelbench)")
    p.add_argument("--budget", type=int, default=4, help="evaluations per task (default 4: both programs' defaults "
                                                         "and a variant of each)")
    p.add_argument("--max-seconds", type=float, default=480.0, help="seconds of batch work in this call (default 480)")
    p.add_argument("--list", action="store_true", help="list the tasks where a rule fires and run nothing")
    p.add_argument("--table", action="store_true", help="print the table of OUT and run nothing")
    args = p.parse_args()
    if not args.list and not args.out:
        p.error("give --out OUT (or --list)")
    folders = [Path(args.kernelbench) / level for level in LEVELS]
    if not all(f.is_dir() for f in folders):
        print(f"kernelwright: no KernelBench levels under {args.kernelbench}; give --kernelbench.", file=sys.stderr)
        return 2
    if args.table:
        return show(Path(args.out) / "rewrites")
    found = rewritten_tasks(folders)
    if args.list:
        for path, rules, gain in found:
            print(f"{path.parent.name}/{path.name}: {', '.join(rules)} (predicted {gain:.3g}x)")
        return 0
    if not torch.cuda.is_available():
        print("kernelwright: the rewrite benchmark measures GPU times and this machine has no GPU; --list shows "
              "the tasks it would run.", file=sys.stderr)
        return 2
    out = Path(args.out)
    suite = kb.write_suite(out, "rewrites", [path for path, _, _ in found])
    kb.run_batch(suite, out / "rewrites", args.budget, args.max_seconds, no_knowledge=True)
    return show(out / "rewrites")


def rewritten_tasks(folders: list[Path]) -> list[tuple[Path, list[str], float]]:
    """(task file, rules, the cost model's predicted gain) of each task whose lowering keeps a rewrite."""
    from agent.analysis import analyze
    from agent.operators.template import lowered
    found = []
    for folder in folders:
        for path in kb.select(folder, None, None):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    program = lowered(analyze(str(path), small=False))
                except Exception:  # a task that does not trace or lower has no rewrite to measure
                    continue
            if program is not None and program.rewrites:
                before, after = program.rewrite_cost
                found.append((path, list(program.rewrites), before / after))
    return found


def show(folder: Path) -> int:
    text = table(folder)
    print(text)
    folder.parent.mkdir(parents=True, exist_ok=True)
    (folder.parent / "rewrites.md").write_text(text)
    return 0


def table(folder: Path) -> str:
    """One row per finished task: its report.json's "rewrite" beside the batch's eager, compile and best times."""
    results = folder / "results.json"
    if not results.is_file():
        return f"No finished task in {folder} yet.\n"
    data = json.loads(results.read_text())
    dirs = json.loads((folder / "batch.json").read_text())["tasks"] if (folder / "batch.json").is_file() else {}
    lines = [f"Rewrites on {data.get('device') or 'this machine'}, fp32: the fastest correct candidate of each "
             "program; best/floor against the original program's floor.", "",
             "| task | rules | predicted gain | original ms | rewritten ms | measured gain | best vs eager | "
             "best vs compile | best/floor |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for t in (t for t in data["tasks"] if t["status"] == "done"):
        report = folder / dirs.get(t["task"], {}).get("dir", t["task"]) / "report.json"
        rewrite = (json.loads(report.read_text()).get("rewrite") or {}) if report.is_file() else {}
        measured = rewrite.get("measured") or {}
        floor = t["best_ms"] / t["floor_ms"] if t.get("best_ms") and t.get("floor_ms") else None
        cells = [t["task"], ", ".join(rewrite.get("rules", [])) or "–",
                 kb.ratio_cell((rewrite.get("predicted") or {}).get("gain")),
                 kb.ms_cell((measured.get("original") or {}).get("ms")),
                 kb.ms_cell((measured.get("rewritten") or {}).get("ms")), kb.ratio_cell(measured.get("gain")),
                 *(kb.ratio_cell(v) for v in (t.get("speedup_vs_eager"), t.get("speedup_vs_compile"), floor))]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
