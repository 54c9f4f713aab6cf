"""Every single-parameter move of a task's template candidates, judged and timed by the evaluator. It answers two
questions the search's own runs cannot: does any point of the space the param search walks render a wrong kernel
(a template bug, and an evaluation the search wastes), and how far below the candidates the template proposes
first do their neighbours reach (on a GPU; on a CPU the times are interpreter times, labelled, never speedups).

For each task: the template operator's first PROPOSALS candidates, then each of them with one parameter changed
to each other value of its template's space, the moves `invalid` refuses left out. Moves go one at a time until
one brings its eager and torch.compile times, which then go with every other job (as agent/graph.py does).
Every result is appended to OUT/rows.jsonl as it comes, and a second call skips what is there. Prints, per task,
the moves tried, the wrong ones (each with its parameters and the evaluator's reason), the first candidate's
time and the fastest correct move's. Exit 1 when a move was judged wrong, 0 otherwise.

    python benchmarks/neighbors_bench.py TASK.py... [--dtype bfloat16] [--params fold,SPLIT] [--out OUT]
    python benchmarks/neighbors_bench.py --llm-ops softmax,cross_entropy [--dtype bfloat16]   # llm_ops_bench's
        # tasks at their first shape (--llm-shape 1: the second)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agent.interfaces import TaskContext  # noqa: E402
from agent.operators.template import TemplateOperator, analysis_of  # noqa: E402
from agent.optimize import task_context  # noqa: E402
from agent.templates import BY_NAME, base  # noqa: E402
from tools.executor import ExecutorConfig, LocalExecutor, sharing_baselines  # noqa: E402
from tools.results import EvalJob, TaskSpec  # noqa: E402

PROPOSALS = 4


def moves(ctx: TaskContext, a, keys: set[str] | None) -> list[dict]:
    """The template operator's first candidates and each of their single-parameter moves (`a`: the task's
    analysis), once each."""
    out, seen = [], set()
    for first in TemplateOperator().propose(ctx, [], PROPOSALS):
        t = first.params["template"]
        own = {k: v for k, v in first.params.items() if k != "template"}
        for k, v in [(None, None)] + [(k, v) for k, vs in BY_NAME[t].space(a).items() for v in vs
                                      if keys is None or k in keys]:
            p = own if k is None else {**own, k: v}
            key = json.dumps({"template": t, **p}, sort_keys=True)
            if key not in seen and not base.invalid(a, p):
                seen.add(key)
                out.append({"template": t, **p})
    return out


def sweep(task: Path, dtype: str | None, keys: set[str] | None, rows: Path, workers: int) -> list[dict]:
    """Every move of `task` judged (those in `rows` from an earlier call kept), each row appended to `rows`."""
    done = {}
    if rows.is_file():
        for line in rows.read_text().splitlines():
            r = json.loads(line)
            if r["task"] == task.stem:
                done[json.dumps(r["params"], sort_keys=True)] = r
    spec = TaskSpec(str(task), name=task.stem, dtype=dtype)
    ctx = task_context(spec, small=False)  # a CPU takes the task's small shapes
    a = analysis_of(ctx)
    todo = [p for p in moves(ctx, a, keys) if json.dumps(p, sort_keys=True) not in done]

    def job(p: dict, baselines=None) -> EvalJob:
        source = BY_NAME[p["template"]].render(a, {k: v for k, v in p.items() if k != "template"})
        return EvalJob(spec, source, timeout_s=600, baselines=baselines)  # the search's trials

    def keep(p: dict, r) -> dict:
        t = r.timing
        row = {"task": task.stem, "params": p, "verdict": r.verdict, "reason": r.reason.split("\n")[0],
               "ms": t.ms if t else None, "interpreted": r.interpreted}
        with rows.open("a") as f:
            f.write(json.dumps(row) + "\n")
        done[json.dumps(p, sort_keys=True)] = row
        return row

    print(f"{task.stem}: {len(todo)} moves to judge ({len(done)} judged before)", flush=True)
    with LocalExecutor(ExecutorConfig(workers_per_device=workers)) as ex:
        for n, (p, result) in enumerate(sharing_baselines(ex, todo, job), 1):  # as the search shares them
            row = keep(p, result)
            if n % 10 == 0 or row["verdict"] != "correct":
                print(f"  {n}/{len(todo)} {row['verdict']} {row['params']}", flush=True)
    return list(done.values())


def table(rows: list[dict]) -> list[str]:
    lines = ["| task | moves | wrong | first ms | fastest ms | first/fastest | fastest move |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        ok = [r for r in mine if r["verdict"] == "correct" and r["ms"]]
        wrong = [r for r in mine if r["verdict"] != "correct"]
        first, best = mine[0]["ms"], min(ok, key=lambda r: r["ms"]) if ok else None
        label = " (interpreter)" if best and best["interpreted"] else ""
        cells = [f"{first:.4f}{label}" if first else "-", f"{best['ms']:.4f}" if best else "-",
                 f"{first / best['ms']:.2f}" if first and best else "-", str(best["params"]) if best else "-"]
        lines.append(f"| {task} | {len(mine)} | {len(wrong)} | " + " | ".join(cells) + " |")
    for r in rows:
        if r["verdict"] != "correct":
            lines.append(f"- {r['task']} {r['verdict']}: {r['params']}: {r['reason']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tasks", nargs="*", help="task files (KernelBench format)")
    p.add_argument("--llm-ops", help="llm_ops_bench's ops by name, comma-separated, instead of (or beside) files")
    p.add_argument("--llm-shape", type=int, default=0, choices=(0, 1), help="which of an op's two shapes (default 0)")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), help="cast the tasks (as batch --dtype)")
    p.add_argument("--params", help="only moves of these parameters, comma-separated (default all)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "neighbors"), help="folder of rows.jsonl")
    p.add_argument("--workers", type=int, default=1, help="evaluation workers per device (default 1)")
    args = p.parse_args(argv)
    tasks = [Path(t) for t in args.tasks]
    missing = [str(t) for t in tasks if not t.is_file()]
    if missing:
        print(f"No such task file: {', '.join(missing)}.", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="neighbors_"))
    if args.llm_ops:
        from llm_ops_bench import TASKS, task_name, task_source
        for op in args.llm_ops.split(","):
            if op not in TASKS:
                print(f"Unknown op {op}; choose from {', '.join(TASKS)}.", file=sys.stderr)
                return 2
            shape = TASKS[op][1][args.llm_shape]
            tasks.append(scratch / f"{task_name(op, shape)}.py")
            tasks[-1].write_text(task_source(op, shape))
    if not tasks:
        print("Give task files or --llm-ops.", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = set(args.params.split(",")) if args.params else None
    rows = [r for t in tasks for r in sweep(t.resolve(), args.dtype, keys, out / "rows.jsonl", args.workers)]
    lines = table(rows)
    print("\n".join(lines))
    (out / "neighbors.md").write_text("\n".join(lines) + "\n")
    return 1 if any(r["verdict"] != "correct" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
