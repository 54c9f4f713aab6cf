"""`kernelwright batch SUITE`: optimize every task of a suite, several at once, then score and report.

    kernelwright batch tasks/suite.toml --budget 8 --out runs/suite
    kernelwright batch ~/KernelBench/KernelBench/level1 --budget 4 --workers 2 --out runs/kb-level1
    kernelwright batch tasks/suite.toml --out runs/suite --resume       # after Ctrl-C or a kill

Each task is an `optimize` run in DIR/<task>/ (run.sqlite, best.py, report.json, lineage.dot); DIR/batch.json
holds the batch's state. Tasks run N at a time (--workers) over one evaluator whose worker slots they share.
A kill loses nothing: every candidate is in its task's run store before it is evaluated, and --resume skips
finished tasks and continues unfinished ones from their stores. Writes DIR/results.json, DIR/results.csv and
DIR/report.html after every finished task, then prints the suite's scores.
--shapes NAME=V1,V2,... verifies every task's candidates at those shape sets too (a task list's own shape_sets win
for its task). --max-seconds S stops a call cleanly after S seconds, as a first Ctrl-C does: evaluations in flight
finish, and --resume continues (for runs in slices of a fixed length).
Exit codes: 0 every task has a correct kernel; 1 some task has none; 2 bad input (one sentence on stderr);
130 interrupted or stopped by --max-seconds (the first Ctrl-C lets evaluations in flight finish, a second one
quits at once).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from agent.context import RunConfig
from agent.llm import ChatClient, LLMConfigError, LLMError, llm_config
from agent.optimize import (STORE_FILE, Serialized, UsageError, add_deep_option, best_of_store, build_run,
                            final_check, open_knowledge, plan_run, write_outputs)
from agent.policies import POLICIES
from agent.progress import Progress, StdoutLines
from agent.report_html import TaskRow, row_from_report, summary_lines, write_results
from agent.runstore import RunStore
from tools.executor import ExecutorConfig, add_cluster_option, open_executor, visible_gpus
from tools.results import TaskSpec
from tools.task import TaskError, add_dtype_option, add_shapes_option, check_spec, load_suite, parse_shape_sets

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
STATE_FILE = "batch.json"


class Stopped(Exception):
    """The batch was asked to stop (Ctrl-C); raised inside a task's search at its next progress line."""


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("batch", help="optimize every task of a suite and report the scores",
                              description="Run `optimize` on every task of a suite (a folder of KernelBench-"
                                          "format task files or a TOML task list), several tasks at once, and "
                                          "write results.json, results.csv and report.html.")
    add_run_options(p)
    add_shapes_option(p, "every task gets them, except that a task list's own shape_sets for a task win over "
                         "them for that task")
    add_deep_option(p)
    p.add_argument("suite", help="a folder of task files, a TOML task list, or one task file")
    p.add_argument("--out", metavar="DIR", help="output folder (default runs/batch-SUITE-TIMESTAMP)")
    p.add_argument("--workers", type=int, metavar="N", help="tasks optimized at once (default: one per GPU, "
                                                            "1 on a CPU)")
    p.add_argument("--resume", action="store_true", help="continue the batch in --out: finished tasks are "
                                                         "kept, unfinished ones resume where they stopped")
    p.add_argument("--max-seconds", type=float, metavar="S", help="stop this call cleanly after S seconds (evaluations "
                                                                  "in flight finish); continue with --resume")
    p.set_defaults(func=main)
    return p


def add_run_options(p: argparse.ArgumentParser, knowledge: bool = True) -> None:
    """The per-task search options batch and ci share (ci keeps the knowledge store off unless asked)."""
    p.add_argument("--budget", type=int, help="candidates to evaluate per task (default 24)")
    p.add_argument("--time-limit", type=float, metavar="S", help="wall-clock seconds per task (default 1800)")
    p.add_argument("--small", action="store_true", default=None, help="use the tasks' SMALL_SHAPES on a GPU too")
    add_dtype_option(p)
    add_cluster_option(p)
    p.add_argument("--model", help="model name at OPENAI_BASE_URL (with OPENAI_API_KEY); none: no LLM operator")
    p.add_argument("--policy", choices=POLICIES, help="parent selection (default greedy)")
    p.add_argument("--seed", type=int, help="seed of every search's random choices (default 0)")
    if knowledge:
        p.add_argument("--no-knowledge", action="store_true", help="no retrieval from or write-back to the "
                                                                   "knowledge store")
    else:
        p.add_argument("--knowledge", action="store_true", help="retrieve from and write back to the knowledge "
                                                                "store (off by default: it changes between runs)")


@dataclass
class Settings:
    """What every task of the batch is searched with; None leaves optimize's default."""

    budget: int | None = None
    time_limit: float | None = None
    small: bool | None = None
    model: str | None = None
    policy: str | None = None
    seed: int | None = None
    knowledge: bool = True
    workers: int = 1
    dtype: str | None = None  # --dtype: overrides the task list's
    shape_sets: list[dict[str, int]] | None = None  # --shapes: for every task whose task list gives none
    deep: int | None = None  # --deep: the final check's deep input sets (agent/optimize.py: final_check)

    @classmethod
    def from_args(cls, args: argparse.Namespace, workers: int) -> "Settings":
        return cls(budget=args.budget, time_limit=args.time_limit, small=args.small, model=args.model,
                   policy=args.policy, seed=args.seed, knowledge=not args.no_knowledge, workers=workers,
                   dtype=args.dtype, shape_sets=shape_sets_of(args), deep=args.deep)


def shape_sets_of(args: argparse.Namespace) -> list[dict[str, int]] | None:
    """--shapes as shape sets, None where it was not given (a resumed batch keeps its own); bad values are a
    UsageError."""
    try:
        return parse_shape_sets(args.shapes) or None
    except TaskError as e:
        raise UsageError(str(e)) from None


def main(args: argparse.Namespace) -> int:
    if args.max_seconds is not None and args.max_seconds <= 0:
        raise UsageError("--max-seconds must be positive.")
    return run_batch(plan_batch(args), args.max_seconds, args.cluster)


# --- state --------------------------------------------------------------------------------------------
def folder_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "task"


class BatchState:
    """DIR/batch.json: the suite, the settings, and per task its status and figures so far. Every change is
    written at once (to a temporary file, then renamed), so a kill leaves the last complete state."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data, self.lock = path, data, threading.RLock()

    @classmethod
    def load(cls, path: Path) -> "BatchState":
        return cls(path, json.loads(path.read_text()))

    def task(self, name: str) -> dict:
        return self.data["tasks"][name]

    def update(self, name: str, **fields) -> None:
        with self.lock:
            self.data["tasks"][name].update(fields)
            self.save()

    def save(self) -> None:
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=1))
            os.replace(tmp, self.path)


@dataclass
class Batch:
    suite: str
    specs: list[TaskSpec]
    out: Path
    settings: Settings
    state: BatchState

    def rows(self) -> list[TaskRow]:
        return [TaskRow.from_json(self.state.task(s.name)["row"]) if self.state.task(s.name).get("row")
                else TaskRow.unfinished(s.name, s.path, self.state.task(s.name)) for s in self.specs]


def load_specs(suite: str, small: bool | None = None, dtype: str | None = None,
               shape_sets: list[dict[str, int]] | None = None) -> list[TaskSpec]:
    """The suite's tasks with the batch's settings; `shape_sets` go to each task whose task list gives none."""
    try:
        specs = [replace(s, path=str(Path(s.path).resolve()), small=True if small else s.small,
                         dtype=dtype or s.dtype, shape_sets=s.shape_sets or list(shape_sets or []))
                 for s in load_suite(suite)]
    except TaskError as e:
        raise UsageError(str(e)) from None
    check_specs(specs)
    return specs


def check_specs(specs: list[TaskSpec]) -> None:
    """Each task with the run's options (a --shapes global it lacks): bad input, a UsageError, before anything
    runs."""
    try:
        for s in specs:
            check_spec(s)
    except TaskError as e:
        raise UsageError(str(e)) from None


def default_workers() -> int:
    return max(len(visible_gpus()), 1)


def new_batch(suite: str, specs: list[TaskSpec], out: Path, settings: Settings) -> Batch:
    """A batch about to start in `out` (which must not hold one)."""
    if (out / STATE_FILE).exists():
        raise UsageError(f"{out} already holds a batch; continue it with --resume or choose another --out.")
    state = BatchState(out / STATE_FILE, {"suite": suite, "created": time.time(), "tasks": {}})
    return _with_tasks(Batch(suite, specs, out, settings, state))


def _with_tasks(b: Batch) -> Batch:
    seen: dict[str, str] = {}
    for s in b.specs:
        if folder_name(s.name) in seen:
            raise UsageError(f"Two tasks of {b.suite} are both named {s.name!r} ({seen[folder_name(s.name)]} and "
                             f"{s.path}); give one a distinct name in a TOML list.")
        seen[folder_name(s.name)] = s.path
        b.state.data["tasks"].setdefault(s.name, {"path": s.path, "dir": folder_name(s.name), "status": "pending",
                                                  "evaluated": 0, "seconds": 0.0, "best": ""})
    b.state.data["settings"] = vars(b.settings)
    return b


def plan_batch(args: argparse.Namespace) -> Batch:
    if args.workers is not None and args.workers < 1 or args.budget is not None and args.budget < 1:
        raise UsageError("--workers and --budget must be at least 1.")
    suite = str(Path(args.suite).resolve())
    if not args.resume:
        out = Path(args.out) if args.out else Path("runs") / f"batch-{Path(suite).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        settings = Settings.from_args(args, args.workers or default_workers())
        return new_batch(suite, load_specs(suite, settings.small, settings.dtype, settings.shape_sets), out, settings)
    if not args.out:
        raise UsageError("--resume needs --out DIR, the folder of the batch to continue.")
    out = Path(args.out)
    if not (out / STATE_FILE).is_file():
        raise UsageError(f"There is no batch to resume in {out} (no {STATE_FILE}).")
    state = BatchState.load(out / STATE_FILE)
    if state.data["suite"] != suite:
        raise UsageError(f"The batch in {out} runs the suite {state.data['suite']}, not {suite}.")
    stored = Settings(**state.data["settings"])
    given = {k: v for k, v in vars(Settings.from_args(args, args.workers or stored.workers)).items()
             if v is not None and k != "knowledge"}
    settings = replace(stored, **given, knowledge=stored.knowledge and not args.no_knowledge)
    return _with_tasks(Batch(suite, load_specs(suite, settings.small, settings.dtype, settings.shape_sets), out,
                             settings, state))


# --- running ------------------------------------------------------------------------------------------
@dataclass
class Shared:
    """What the concurrent tasks of a batch share."""

    executor: object
    knowledge: object | None
    trace_lock: threading.Lock
    progress: Progress
    stop: threading.Event


def run_batch(batch: Batch, max_seconds: float | None = None, cluster: str | None = None) -> int:
    """Runs the batch's unfinished tasks (on the Dask `cluster`, if given); with `max_seconds`, stops cleanly
    once they have passed."""
    try:
        llm = llm_config(batch.settings.model)
        if llm:
            ChatClient(llm).check()
    except LLMError as e:
        what = "" if isinstance(e, LLMConfigError) else "The LLM endpoint check failed: "
        print(f"kernelwright: {what}{e}", file=sys.stderr)
        return EXIT_USAGE
    workers = batch.settings.workers
    executor = open_executor(cluster, ExecutorConfig() if visible_gpus() else ExecutorConfig(workers_per_device=workers))
    todo = [s for s in batch.specs if batch.state.task(s.name)["status"] != "done"]
    batch.state.save()
    progress = Progress(total=len(batch.specs), done=len(batch.specs) - len(todo),
                        budget=batch.settings.budget or RunConfig().budget)
    for s in batch.specs:
        if batch.state.task(s.name)["status"] == "done":
            progress.finished(s.name, TaskRow.from_json(batch.state.task(s.name)["row"]), quiet=True)
    if len(todo) < len(batch.specs):
        progress.log(f"resuming {batch.out}: {len(batch.specs) - len(todo)} of {len(batch.specs)} tasks finished, "
                     f"{len(todo)} to run")
    knowledge = open_knowledge() if batch.settings.knowledge and todo else None
    shared = Shared(executor, Serialized(knowledge, threading.Lock()) if knowledge else None, threading.Lock(),
                    progress, threading.Event())
    real_stdout, sys.stdout = sys.stdout, StdoutLines(progress.log)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kw-task")
    interrupted = timed_out = False
    deadline = time.monotonic() + max_seconds if max_seconds else None
    try:
        futures = {pool.submit(run_task, batch, s, shared): s for s in todo}
        pending = set(futures)
        while pending:
            if deadline and time.monotonic() > deadline and not shared.stop.is_set():
                interrupted = timed_out = True
                shared.stop.set()
                progress.log(f"stopping: --max-seconds {max_seconds:g} passed; letting evaluations in flight finish")
            step = 0.5 if deadline is None or shared.stop.is_set() else min(0.5, max(deadline - time.monotonic(), 0))
            try:
                done, pending = wait(pending, timeout=step, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                if interrupted:
                    sys.stdout = real_stdout
                    progress.close()
                    print("\nkernelwright: stopped at once; every evaluated candidate is kept. Resume with "
                          f"--resume --out {batch.out}", file=sys.stderr, flush=True)
                    os._exit(EXIT_INTERRUPTED)  # threads are mid-evaluation; the run stores are crash-safe
                interrupted = True
                shared.stop.set()
                progress.log("stopping: letting evaluations in flight finish (Ctrl-C again to quit at once)")
                continue
            for f in done:
                f.result()  # run_task reports a task's own failures; what escapes it is a bug to see at once
            if done:
                write_results(batch.out, batch.suite, batch.rows())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        sys.stdout = real_stdout
        progress.close()
        executor.close()
        if knowledge is not None:
            knowledge.close()
    rows = batch.rows()
    write_results(batch.out, batch.suite, rows)
    for line in summary_lines(rows, batch.out):
        print(line)
    if interrupted:
        what = f"stopped after --max-seconds {max_seconds:g}" if timed_out else "interrupted"
        print(f"kernelwright: {what}; resume with --resume --out {batch.out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    failed = [r.task for r in rows if r.status == "failed"]
    if failed:
        print(f"kernelwright: {len(failed)} task(s) failed to run ({', '.join(failed[:5])}); see the lines above. "
              f"--resume --out {batch.out} runs them again.", file=sys.stderr)
    return EXIT_OK if all(r.verdict == "correct" for r in rows) else EXIT_FAILED


def _optimize_args(spec: TaskSpec, folder: Path, s: Settings, resume: bool) -> argparse.Namespace:
    """The arguments `kernelwright optimize` would get for this task (what agent.optimize.plan_run reads)."""
    return argparse.Namespace(task=spec.path, out=str(folder), resume=str(folder) if resume else None,
                              budget=s.budget, time_limit=s.time_limit, model=s.model, policy=s.policy,
                              small=s.small, seed=s.seed, batch_size=None, plateau=None, dtype=spec.dtype,
                              no_knowledge=not s.knowledge, deep=s.deep)


def run_task(batch: Batch, spec: TaskSpec, shared: Shared) -> None:
    """One task's optimize run, new or resumed; its row goes into the batch state when it ends."""
    from agent.graph import TaskUnusable  # langgraph loads only when a batch runs, not for `--help`
    if shared.stop.is_set():
        return
    entry = batch.state.task(spec.name)
    folder = batch.out / entry["dir"]
    started, before = time.monotonic(), float(entry.get("seconds") or 0.0)
    shared.progress.started(spec.name, entry.get("evaluated", 0))
    batch.state.update(spec.name, status="running")
    try:
        plan = plan_run(_optimize_args(spec, folder, batch.settings, (folder / STORE_FILE).is_file()))
        report, baselines = _search(plan, spec, shared, lambda n, best: _event(
            batch, spec.name, shared, n, best, before + time.monotonic() - started))
        row = row_from_report(spec.name, spec.path, report, folder, batch.out, before + time.monotonic() - started,
                              baselines)
    except Stopped:
        batch.state.update(spec.name, status="interrupted", seconds=before + time.monotonic() - started)
        shared.progress.finished(spec.name, None)
        return
    except (UsageError, TaskUnusable) as e:
        why = str(e) if isinstance(e, UsageError) else f"the task could not be used: {e}"
        row = TaskRow.failed(spec.name, spec.path, "error", why, before + time.monotonic() - started)
    except Exception as e:  # a fault of ours or of a dependency: report it, keep the other tasks going
        shared.progress.log(f"{spec.name}: failed to run: {type(e).__name__}: {e}")
        batch.state.update(spec.name, status="failed", seconds=before + time.monotonic() - started)
        shared.progress.finished(spec.name, None)
        return
    batch.state.update(spec.name, status="done", row=row.to_json(), seconds=row.seconds, evaluated=row.evaluations)
    shared.progress.finished(spec.name, row)


def _event(batch: Batch, name: str, shared: Shared, evaluated: int, best: str, seconds: float) -> None:
    batch.state.update(name, evaluated=evaluated, best=best, seconds=seconds)
    shared.progress.update(name, evaluated, best)


def _search(plan, spec: TaskSpec, shared: Shared, on_eval) -> tuple[dict, object]:
    """Builds the run from optimize's parts (with the batch's shared executor, locks and progress), searches,
    writes the task's outputs and returns its report.json and the run's measured baselines."""
    from agent.graph import TaskUnusable, run_search
    config = plan.config
    finished = None
    if plan.resume_id is not None:
        probe = RunStore(plan.store_path)
        record = probe.run(plan.resume_id)
        probe.close()
        finished = record.stop_reason if record.status == "finished" else None
    spec = replace(spec, path=plan.task_path, small=True if config.small else spec.small)
    llm = llm_config(config.model, config.base_url)
    chat = ChatClient(llm) if llm else None

    def say(line: str) -> None:
        m = re.match(r"\[(\d+)/\d+\] ", line)
        if m:
            best = best_of_store(run.store, run.run_id)
            on_eval(int(m.group(1)), best_text(best.result.timing) if best else "")
            shared.progress.detail(f"{spec.name} | {line}")
        elif not line.startswith("evaluating "):
            shared.progress.log(f"{spec.name}: {line}")
        if shared.stop.is_set() and not line.startswith("stopped:"):
            raise Stopped()  # unwinds the search; what was evaluated is stored, the rest stays proposed

    run = build_run(plan, spec, executor=shared.executor, knowledge=shared.knowledge, chat=chat, say=say,
                    lock=shared.trace_lock)
    store, run_id = run.store, run.run_id
    try:
        if finished is None:
            try:
                finished = run_search(run, store.archive(run_id), store.pending(run_id)).stop
            except TaskUnusable:
                store.set_status(run_id, "finished", "the task cannot judge a candidate")
                raise
            except Stopped:
                store.set_status(run_id, "interrupted", "interrupted")
                raise
        write_outputs(run, plan.out, finished, chat, final_check(run))
        measured = [i.result.baselines for i in store.archive(run_id) if i.result and i.result.baselines]
        return json.loads((plan.out / "report.json").read_text()), (measured[0] if measured else None)
    finally:
        store.close()


def best_text(t) -> str:
    """A best candidate's figure for progress lines: a speedup on a GPU, an interpreter time on a CPU."""
    if t is None:
        return ""
    if t.speedup_vs_eager is not None:
        return f"{t.speedup_vs_eager:.2f}x eager" + (" (slower)" if t.speedup_vs_eager < 1.0 else "")
    return f"{t.ms:.3g} ms" + (" (interpreter)" if t.interpreted else "")
