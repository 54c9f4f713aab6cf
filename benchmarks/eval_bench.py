"""The evaluator on a GPU: every task with a hand-written candidate in tasks/candidates/ is evaluated twice
(the same kernel timed twice, by one warm worker slot, as a search runs them), and a
table shows eager, torch.compile, floor and candidate times, the spread between the two timings, and the
evaluator's seconds per candidate, with where the second evaluation's seconds went. "GiB" is the least
the task must move: inputs and parameters read once, outputs written once.

    python benchmarks/eval_bench.py [--tasks tasks/suite.toml] [--candidates tasks/candidates]
                                    [--isolation persistent|fork] [--json OUT.json]
    python benchmarks/eval_bench.py --tasks benchmarks/large_inputs.toml     # the same with 4 GiB inputs

The first evaluation of a task measures the eager and torch.compile baselines; the second reuses them, as a
search does, so its seconds are the evaluator's overhead per candidate once caches are warm."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.executor import ExecutorConfig, LocalExecutor  # noqa: E402
from tools.results import EvalJob  # noqa: E402
from tools.task import load_suite  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="tasks/suite.toml")
    parser.add_argument("--candidates", default="tasks/candidates", help="folder of candidates named as the tasks")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--isolation", choices=["persistent", "fork"], default="persistent",
                        help="a fresh process per candidate (fork) or one warm process per GPU (persistent)")
    args = parser.parse_args()
    specs = {Path(s.path).name: s for s in load_suite(args.tasks)}
    rows, raw = [], []
    executor = LocalExecutor(ExecutorConfig(isolation=args.isolation))
    print(f"isolation: {args.isolation}", flush=True)
    for cand in sorted(Path(args.candidates).glob("*.py")):
        spec = specs.get(cand.name)
        if spec is None:
            continue
        first = executor.submit(EvalJob(spec, cand.read_text(), timeout_s=600)).result()
        second = executor.submit(EvalJob(spec, cand.read_text(), timeout_s=600, baselines=first.baselines)).result()
        raw.append({"task": cand.stem, "first": first.to_json(), "second": second.to_json()})
        print(f"{cand.stem}: {first.verdict} / {second.verdict} ({first.reason})", flush=True)
        if first.correct and second.correct:
            rows.append((cand.stem, first, second))
    executor.close()
    print()
    print(f"{'task':<22}{'GiB':>6}{'eager ms':>10}{'compile':>10}{'floor':>10}{'cand 1':>10}{'cand 2':>10}"
          f"{'twice %':>9}{'in-run %':>9}{'vs eager':>9}{'vs comp':>9}{'floor/c':>8}{'eval1 s':>8}{'eval2 s':>8}"
          "  eval2 phases (s)")
    for name, a, b in rows:
        t, u = a.timing, b.timing
        twice = 100 * abs(t.ms - u.ms) / ((t.ms + u.ms) / 2)
        print(f"{name:<22}{t.bytes / 2**30:>6.1f}{t.eager_ms:>10.4f}{_f(t.compile_ms):>10}{_f(t.floor_ms):>10}"
              f"{t.ms:>10.4f}{u.ms:>10.4f}{twice:>9.2f}{t.spread_pct:>9.2f}{_x(t.speedup_vs_eager):>9}"
              f"{_x(t.speedup_vs_compile):>9}"
              f"{(t.floor_fraction or 0):>8.2f}{a.seconds:>8.1f}{b.seconds:>8.1f}  "
              + " ".join(f"{k} {v:.2f}" for k, v in b.phase_seconds.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0 if len(rows) == len(raw) else 1


def _f(v):
    return f"{v:.4f}" if v is not None else "n/a"


def _x(v):
    return f"{v:.2f}x" if v is not None else "n/a"


if __name__ == "__main__":
    sys.exit(main())
