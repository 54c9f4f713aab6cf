"""`kernelwright optimize TASK`: search for a faster verified Triton kernel for one task.

    kernelwright optimize tasks/01_gelu.py --budget 12 --out runs/gelu
    kernelwright optimize tasks/01_gelu.py --model qwen2.5-coder --policy map-elites
    kernelwright optimize tasks/01_gelu.py --resume runs/gelu          # after an interrupt or a kill

Writes DIR/run.sqlite (every candidate, as it is evaluated), DIR/best.py (the fastest correct candidate,
a file `kernelwright eval` accepts), DIR/report.json, DIR/lineage.dot, and prints a short summary. When the
fastest correct candidate is slower than eager PyTorch on the GPU, it says so plainly ("no faster kernel;
keep PyTorch"): best.py opens with a comment line saying it is slower, and report.json has
"slower_than_eager": true. Where the rewrite pass changed the task's program (agent/templates/rewrite.py),
report.json's "rewrite" holds its rules and guards, the cost model's predicted gain and the fastest correct
candidate of the rewritten and of the original program; "rewrites" lists the rules the best kernel used.
With --shapes, the best's "shapes" holds its time and speedups at each shape set (on a GPU) and their geomeans.
Exit codes: 0 a correct candidate was found (faster or not), 1 none was, 2 bad input (one sentence on
stderr), 130 interrupted (everything evaluated is kept; resume with --resume DIR).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from agent.context import Run, RunConfig
from agent.interfaces import Individual, Operator, TaskContext
from agent.llm import ChatClient, LLMConfigError, LLMError, llm_config
from agent.policies import POLICIES, make_policy
from agent.runstore import RunStore
from tools.cli_eval import shape_timing_lines
from tools.executor import add_cluster_option
from tools.results import MAX_DEEP_SETS, VERDICTS, EvalJob, TaskSpec
from tools.score import shape_speedups
from tools.task import add_dtype_option, add_shapes_option

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
STORE_FILE = "run.sqlite"
# The final check of the best kernel before it is reported: trials from a fresh seed, and deep input sets
# across the input space (tools/deep.py), DEEP_GPU where this machine has a GPU, DEEP_CPU where not (the
# interpreter takes seconds a set).
FINAL_TRIALS, DEEP_GPU, DEEP_CPU = 6, 16, 2


class UsageError(Exception):
    """Bad input; the message is one sentence for a person."""


def register(subparsers) -> argparse.ArgumentParser:
    d = RunConfig()
    p = subparsers.add_parser("optimize", help="search for a faster verified Triton kernel for a task",
                              description="Search for a faster Triton kernel computing the same function as "
                                          "the task's Model, verifying and timing every candidate.")
    p.add_argument("task", help="task file: class Model, get_inputs(), get_init_inputs()")
    p.add_argument("--budget", type=int, help=f"candidates to evaluate in the whole run (default {d.budget})")
    p.add_argument("--time-limit", type=float, metavar="S",
                   help=f"wall-clock seconds for this session (default {d.time_limit_s:g})")
    p.add_argument("--out", metavar="DIR", help="output folder (default runs/TASK-TIMESTAMP)")
    p.add_argument("--model", help="model name at OPENAI_BASE_URL (with OPENAI_API_KEY); none: no LLM operator")
    p.add_argument("--policy", choices=POLICIES, help=f"parent selection (default {d.policy})")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder (an earlier --out)")
    p.add_argument("--small", action="store_true", default=None, help="evaluate on the task's SMALL_SHAPES")
    add_dtype_option(p)
    add_shapes_option(p)
    add_cluster_option(p)
    p.add_argument("--seed", type=int, help=f"seed of the search's random choices (default {d.seed})")
    p.add_argument("--trial-seed", type=int, metavar="N", help="trial seed of every evaluation, to replay a run's "
                                                               "verification (default: a fresh one each time)")
    p.add_argument("--batch-size", type=int, help=f"proposals per round (default {d.batch_size})")
    p.add_argument("--plateau", type=int, help=f"stop after N evaluations without progress; 0: never "
                                                f"(default {d.plateau})")
    add_deep_option(p)
    p.add_argument("--no-knowledge", action="store_true", help="no retrieval from or write-back to the "
                                                               "knowledge store")
    p.set_defaults(func=optimize)
    return p


def add_deep_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deep", type=int, metavar="N",
                   help=f"input sets across the input space the best kernel is verified on, with {FINAL_TRIALS} "
                        f"trials from a fresh seed, before it is reported (default {DEEP_GPU} on a GPU, "
                        f"{DEEP_CPU} on a CPU; 0: the trials only)")


def deep_sets(asked: int | None) -> int:
    """--deep's sets: as asked, else DEEP_GPU where this machine has a GPU, DEEP_CPU where not."""
    from tools.evaluate import visible_gpus
    return asked if asked is not None else DEEP_GPU if visible_gpus() else DEEP_CPU


def _say(line: str) -> None:
    print(line, flush=True)


def _overrides(args: argparse.Namespace) -> dict:
    given = {"budget": args.budget, "time_limit_s": args.time_limit, "model": args.model, "policy": args.policy,
             "small": args.small, "seed": args.seed, "batch_size": args.batch_size, "plateau": args.plateau,
             "dtype": args.dtype, "trial_seed": getattr(args, "trial_seed", None), "deep": getattr(args, "deep", None)}
    return {k: v for k, v in given.items() if v is not None}


@dataclass
class Plan:
    """A run about to start or resume, checked before anything is written."""

    task_path: str
    config: RunConfig
    out: Path
    store_path: Path
    resume_id: str | None  # the run to continue, or None for a new one


def plan_run(args: argparse.Namespace) -> Plan:
    from tools.task import TaskError, check_task_file
    try:
        check_task_file(args.task)
    except TaskError as e:
        raise UsageError(str(e)) from None
    task_path = str(Path(args.task).resolve())
    if args.resume:
        folder = Path(args.resume)
        if not (folder / STORE_FILE).is_file():
            raise UsageError(f"There is no run to resume in {folder} (no {STORE_FILE}).")
        store = RunStore(folder / STORE_FILE)
        try:
            records = store.runs()
        finally:
            store.close()
        if not records:
            raise UsageError(f"The run store in {folder} holds no run.")
        if records[-1].task_path != task_path:
            raise UsageError(f"The run in {folder} optimizes {records[-1].task_path}, not {task_path}.")
        config = replace(RunConfig.from_json(records[-1].config), **_overrides(args))
        out = Path(args.out) if args.out else folder
        plan = Plan(task_path, config, out, folder / STORE_FILE, records[-1].id)
    else:
        out = Path(args.out) if args.out else Path("runs") / f"{Path(args.task).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        if (out / STORE_FILE).exists():
            raise UsageError(f"{out} already holds a run; continue it with --resume {out} or choose another --out.")
        plan = Plan(task_path, replace(RunConfig(), **_overrides(args)), out, out / STORE_FILE, None)
    _check_config(plan.config)
    return plan


def start_run(plan: Plan) -> tuple[RunStore, str]:
    store = RunStore(plan.store_path)
    if plan.resume_id is None:
        return store, store.create_run(plan.task_path, plan.config.to_json())
    store.set_status(plan.resume_id, "running")
    return store, plan.resume_id


def _check_config(config: RunConfig) -> None:
    if config.budget < 1 or config.time_limit_s <= 0 or config.batch_size < 1 or config.plateau < 0:
        raise UsageError("--budget, --time-limit and --batch-size must be positive and --plateau not negative.")
    if config.deep is not None and not 0 <= config.deep <= MAX_DEEP_SETS:
        raise UsageError(f"--deep takes 0 to {MAX_DEEP_SETS} input sets.")
    if config.policy not in POLICIES:
        raise UsageError(f"Unknown policy {config.policy!r}; choose one of {', '.join(POLICIES)}.")


def task_context(spec: TaskSpec, small: bool) -> TaskContext:
    """The task as operators and prompts see it, analysed at the shapes and precision the evaluator will use
    (template candidates are generated for exact shapes). `analysis` is {} when the reference cannot be
    traced."""
    import torch

    from agent.analysis import TaskFault, analyze
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}"
        device = f"cuda:{torch.cuda.get_device_name()} ({arch})"
    else:
        arch = device = "cpu"
        small = True
    try:
        analyzed = analyze(spec.path, small=small, shapes=spec.shapes, arch=arch, tf32=spec.tf32, name=spec.name,
                           dtype=spec.dtype)
        analyzed.shape_sets = list(spec.shape_sets)
        analysis = analyzed.to_json()
    except TaskFault as e:  # no candidate, a template's or a model's, could be judged against it
        raise UsageError(str(e)) from None
    except Exception as e:  # tracing runs the task's own code: any error means "no analysis"
        _say(f"analysis: the reference could not be traced ({type(e).__name__}: {str(e)[:160]})")
        analysis = {}
    return TaskContext(name=spec.name, source=Path(spec.path).read_text(), analysis=analysis, device=device,
                       arch=arch)


def offline_operators(task: TaskContext, config: RunConfig, seeds: list[dict]) -> list[Operator]:
    from agent.operators.param import ParamOperator
    from agent.operators.template import TemplateOperator
    return [TemplateOperator(), ParamOperator(seeds=seeds, seed=config.seed)]


def param_seeds(knowledge, task: TaskContext, config: RunConfig) -> list[dict]:
    """Template parameters of verified kernels for similar tasks on this arch (written back by earlier
    runs), for the parameter operator to try first, each naming the task it was stored for (SEED_TASK)."""
    from agent.operators.param import SEED_TASK
    from knowledge.errors import KBError
    if knowledge is None:
        return []
    try:
        found = knowledge.context_for_task(task.source, task.arch, k_docs=0, k_kernels=config.k_kernels,
                                           budget_chars=config.prompt_chars)
    except KBError:
        return []
    seeds = []
    for r in found.kernels:
        try:
            params = json.loads(r.metadata.get("params") or "null")
        except ValueError:
            continue
        if isinstance(params, dict) and "template" in params:
            seeds.append({**params, SEED_TASK: r.metadata.get("task", "")})
    return seeds


def optimize(args: argparse.Namespace) -> int:
    plan = plan_run(args)
    config, out = plan.config, plan.out
    from tools.task import TaskError, check_spec, parse_shape_sets
    try:
        spec = TaskSpec(path=plan.task_path, name=Path(plan.task_path).stem, small=True if config.small else None,
                        dtype=config.dtype, shape_sets=parse_shape_sets(getattr(args, "shapes", None)))
        check_spec(spec)
    except TaskError as e:
        raise UsageError(str(e)) from None
    try:
        llm = llm_config(config.model, config.base_url)
        chat = ChatClient(llm) if llm else None
        if chat:
            chat.check()
    except LLMConfigError as e:
        raise UsageError(str(e)) from None
    except LLMError as e:
        raise UsageError(f"The LLM endpoint check failed: {e}.") from None

    from tools.executor import open_executor
    executor = open_executor(args.cluster)
    knowledge = None if args.no_knowledge else open_knowledge()
    try:
        run = build_run(plan, spec, executor=executor, knowledge=knowledge, chat=chat, say=_say)
    except UsageError:
        executor.close()
        raise
    store, run_id = run.store, run.run_id
    if chat:
        _say(f"LLM operator: {llm.model} at {llm.url}")
    else:
        _say("No LLM configured (no --model, OPENAI_BASE_URL or OPENAI_API_KEY): searching with the "
             "template and parameter operators only.")
    archive, pending = store.archive(run_id), store.pending(run_id)
    if args.resume:
        _say(f"resuming run {run_id}: {len(archive)} evaluated, {len(pending)} proposed but not evaluated")
    from agent.graph import TaskUnusable, run_search
    try:
        final = run_search(run, archive, pending)
        checked = final_check(run)
    except TaskUnusable as e:
        store.set_status(run_id, "finished", "the task cannot judge a candidate")
        raise UsageError(f"The task could not be used: {e}") from None
    except KeyboardInterrupt:
        store.set_status(run_id, "interrupted", "interrupted")
        write_outputs(run, out, "interrupted", chat, None)
        print(f"kernelwright: interrupted; resume with --resume {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        executor.close()
        if knowledge is not None:
            knowledge.close()
    best = write_outputs(run, out, final.stop, chat, checked)
    return EXIT_OK if best is not None else EXIT_FAILED


def build_run(plan: Plan, spec: TaskSpec, *, executor, knowledge, chat: ChatClient | None, say,
              lock: threading.Lock | None = None) -> Run:
    """The live run for a plan: the task as the operators see it, the template and parameter operators (and
    the LLM operator when a model is configured), the policy and the run store. With `lock`, tracing and the
    operators that trace run one thread at a time (batch runs tasks concurrently; make_fx is not re-entrant)."""
    config = plan.config
    with lock or contextlib.nullcontext():
        task = task_context(replace(spec, path=plan.task_path), config.small)
    if not task.analysis and not chat:
        raise UsageError("The task's reference could not be traced, so the template operators cannot cover it, "
                         "and no LLM is configured.")
    operators = offline_operators(task, config, param_seeds(knowledge, task, config)) if task.analysis else []
    if lock is not None:
        operators = [Serialized(op, lock) for op in operators]
    started = time.monotonic()
    if chat:  # second in line: the first round is the templates', so a run always evaluates one of them
        from agent.operators.llm import LLMOperator
        operators.insert(min(1, len(operators)), LLMOperator(chat, config, executor, spec, knowledge, say=say,
                                                             deadline=started + config.time_limit_s))
    store, run_id = start_run(plan)
    return Run(config=config, run_id=run_id, task=task, spec=spec, executor=executor,
               policy=make_policy(config.policy, config.seed), operators=operators, store=store,
               knowledge=knowledge, say=say, started=started)


class Serialized:
    """Another object's methods, called one thread at a time. Tracing a task (make_fx) keeps global state,
    so the operators that trace, and the knowledge store, are shared this way between concurrent tasks."""

    def __init__(self, inner, lock: threading.Lock):
        self._inner, self._lock = inner, lock

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)
        return call


def open_knowledge():
    """The knowledge store, or None (said once) when it cannot be opened: the search goes on without it."""
    from knowledge.errors import KBError
    from knowledge.store import KnowledgeStore
    store = KnowledgeStore()
    try:
        store.retrieve("triton kernel", kind="doc", k=1)
    except KBError as e:
        _say(f"knowledge store unavailable ({e}); searching without retrieval")
        return None
    return store


def best_of_store(store: RunStore, run_id: str) -> Individual | None:
    correct = [i for i in store.archive(run_id) if i.fitness > 0]
    return max(correct, key=lambda i: (i.fitness, -i.id)) if correct else None


def final_check(run: Run) -> dict | None:
    """The best correct candidate verified once more before it is reported: FINAL_TRIALS trials from a fresh
    seed (the run's --trial-seed where it has one) and --deep input sets. One that fails is demoted in the run
    store, with the check's verdict (a resumed run never reports it), and the next best is checked, until one
    passes or none is left. Returns report.json's "final_check": the candidate that passed (None: none did),
    its deep check, and each candidate demoted; None where the run has no correct candidate to check."""
    store, run_id, sets, demoted = run.store, run.run_id, deep_sets(run.config.deep), []
    while (best := best_of_store(store, run_id)) is not None:
        job = EvalJob(task=run.spec, candidate=best.source, trials=FINAL_TRIALS, seed=run.config.seed,
                      trial_seed=run.config.trial_seed, profile=False, deep=sets,
                      timeout_s=run.config.eval_timeout_s * 2)
        result = run.executor.submit(job).result()
        if result.correct:
            deep = dataclasses.asdict(result.deep) if result.deep else None
            return {"candidate": best.id, "trials": FINAL_TRIALS, "deep": deep, "seconds": round(result.seconds, 1),
                    "phases": result.phase_seconds, "demoted": demoted}
        if result.verdict not in ("incorrect", "rejected"):  # the check could not run: say so, demote nothing
            return {"candidate": None, "unchecked": best.id, "reason": result.reason, "demoted": demoted}
        run.say(f"final check: #{best.id} failed ({result.reason}); checking the next best")
        store.demote(run_id, best.id, result, f"the final check ({FINAL_TRIALS} trials from a fresh seed, {sets} "
                                              f"deep input sets) failed: {result.reason}")
        demoted.append({"id": best.id, "verdict": result.verdict, "reason": result.reason})
    return {"candidate": None, "demoted": demoted} if demoted else None


def write_outputs(run: Run, out: Path, stop: str, chat: ChatClient | None,
                  checked: dict | None) -> Individual | None:
    """best.py, report.json, lineage.dot and the printed summary. Returns the best candidate or None.
    `checked`: the final check (final_check), None where none ran."""
    out.mkdir(parents=True, exist_ok=True)
    store, run_id = run.store, run.run_id
    best = best_of_store(store, run_id)
    summary_of_best = best_summary(best)
    slower = slower_than_eager(summary_of_best)
    if best is not None:
        (out / "best.py").write_text((slower_mark(summary_of_best) if slower else "") + best.source)
    (out / "lineage.dot").write_text(store.lineage_dot(run_id))
    counts = store.counts(run_id)
    llm_op = next((op for op in run.operators if op.name == "llm"), None)
    report = {
        "task": run.spec.path, "run": run_id, "device": run.task.device, "policy": run.config.policy,
        "stop_reason": stop, "budget": run.config.budget, "evaluated": sum(counts[v] for v in VERDICTS),
        "counts": counts, "best": summary_of_best, "slower_than_eager": slower, "rewrites": best_rewrites(run, best),
        "rewrite": rewrite_summary(run, store.archive(run_id)),
        "failure": None if best is not None else common_failure(store.archive(run_id)), "final_check": checked,
        "config": run.config.to_json(),
        "llm": None if chat is None else {
            "model": chat.config.model, "url": chat.config.url, "retries": chat.retried,
            "conversations": getattr(llm_op, "conversations", None),
            "draft_evals": getattr(llm_op, "draft_evals", None)},
        "lineage": store.lineage(run_id),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    _say(summary(report, out))
    return best


def best_rewrites(run: Run, best: Individual | None) -> list[str]:
    """The rules (agent/templates/rewrite.py) that rewrote the program the best candidate was built from: a
    template candidate's own (its params' "rewrites"; a run from before they were recorded: the task's
    lowering); empty for the original program, any other candidate or none."""
    if best is None or "template" not in best.params:
        return []
    if "rewrites" in best.params:
        return list(best.params["rewrites"])
    from agent.operators.template import analysis_of, lowered
    program = lowered(analysis_of(run.task))
    return list(program.rewrites) if program else []


def rewrite_summary(run: Run, archive: list[Individual]) -> dict | None:
    """What the rewrite pass did to the task's program, or None where it kept no rewrite: the rules and guards,
    the cost model's times of the original and the rewritten program (before_s, after_s; the predicted gain is
    their ratio), the fastest correct candidate built from each program with its measured time (a gain only
    from GPU times), and floor_s, the original program's speed-of-light floor (agent/analysis.py): the floor
    stays the original's, as the measured floor_ms does, so a kernel under it was rewritten."""
    if not run.task.analysis:
        return None
    from agent.operators.template import analysis_of, lowered
    analysis = analysis_of(run.task)
    program = lowered(analysis)
    if program is None or not program.rewrites:
        return None
    before, after = program.rewrite_cost
    fastest = {}
    for label, rewritten in (("rewritten", True), ("original", False)):
        built = [i for i in archive if i.fitness > 0 and bool(i.params.get("rewrites")) == rewritten
                 and "rewrites" in i.params]
        if built:
            i = max(built, key=lambda i: (i.fitness, -i.id))
            fastest[label] = {"id": i.id, "ms": i.result.timing.ms, "interpreted": i.result.timing.interpreted}
    both = len(fastest) == 2 and not any(f["interpreted"] for f in fastest.values())
    return {"rules": list(program.rewrites), "guards": [dataclasses.asdict(g) for g in program.guards],
            "predicted": {"before_s": before, "after_s": after, "gain": before / after},
            "measured": {**fastest, "gain": fastest["original"]["ms"] / fastest["rewritten"]["ms"] if both else None},
            "floor_s": analysis.floor_s}


def best_summary(best: Individual | None) -> dict | None:
    if best is None:
        return None
    t, baselines = best.result.timing, best.result.baselines
    figures = {k: getattr(t, k) for k in ("ms", "eager_ms", "compile_ms", "floor_ms", "floor_fraction",
                                          "speedup_vs_eager", "speedup_vs_compile", "spread_pct",
                                          "interpreted")} if t else {}
    return {"id": best.id, "operator": best.operator, "parent_id": best.parent_id, "verdict": best.result.verdict,
            "device": best.result.device, "suspicious": best.result.suspicious,
            "verified_on": best.result.verified_on, **figures,
            **({"compile_error": baselines.compile_error} if baselines and baselines.compile_error else {}),
            "kernel_ms": best.result.kernel_ms,
            "shapes": shape_speedups(best.result.shapes) if best.result.shapes else None}


def common_failure(archive: list[Individual]) -> str | None:
    """Why no candidate was correct, in one sentence: the latest reason of the commonest failing verdict."""
    failed = [i.result for i in archive if i.result is not None and not i.result.correct]
    if not failed:
        return None
    verdicts = [r.verdict for r in failed]
    commonest = max(verdicts, key=verdicts.count)
    return next(r.reason for r in reversed(failed) if r.verdict == commonest)


def slower_than_eager(best: dict | None) -> bool | None:
    """Whether the best correct kernel is slower than eager PyTorch; None without GPU times to tell."""
    if best is None or best.get("speedup_vs_eager") is None:
        return None
    return best["speedup_vs_eager"] < 1.0


def slower_mark(best: dict) -> str:
    """The line best.py opens with when PyTorch should be kept instead (no word of it trips the static rules)."""
    return (f"# SLOWER THAN EAGER PYTORCH: {best['speedup_vs_eager']:.2f}x ({best['ms']:.4g} ms against "
            f"{best['eager_ms']:.4g} ms on {best['device']}); no faster kernel was found, keep PyTorch.\n")


def summary(report: dict, out: Path) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in report["counts"].items() if n)
    lines = [f"{Path(report['task']).stem}: {report['evaluated']} evaluated ({counts or 'none'}); "
             f"stopped: {report['stop_reason']}."]
    b = report["best"]
    if b is None:
        lines.append("No correct candidate was found.")
    elif b.get("interpreted"):
        lines.append(f"best: #{b['id']} ({b['operator']}), {b['ms']:.4g} ms in the Triton interpreter on a CPU "
                     f"(not a GPU time; no speedup is claimed; an interpreter verdict: not tamper-proof, races "
                     f"and TF32 not checked).")
    elif report.get("slower_than_eager"):
        lines.append(f"No faster kernel; keep PyTorch. The best correct kernel, #{b['id']} ({b['operator']}), takes "
                     f"{b['ms']:.4g} ms on {b['device']} against eager PyTorch's {b['eager_ms']:.4g} ms "
                     f"({b['speedup_vs_eager']:.2f}x); best.py keeps it, marked as slower.")
    elif b.get("ms") is not None:
        extra = [f"{b['speedup_vs_eager']:.2f}x eager" if b.get("speedup_vs_eager") else "",
                 f"{b['speedup_vs_compile']:.2f}x torch.compile" if b.get("speedup_vs_compile") else "",
                 f"{b['floor_fraction']:.0%} of the speed-of-light floor" if b.get("floor_fraction") else ""]
        lines.append(f"best: #{b['id']} ({b['operator']}), {b['ms']:.4g} ms on {b['device']}; "
                     + ", ".join(e for e in extra if e))
    if report.get("final_check"):
        lines.append(final_check_line(report["final_check"]))
    if b is not None and b.get("shapes"):
        lines += shape_timing_lines(b["shapes"])
    if report.get("rewrite"):
        lines.append(rewrite_line(report["rewrite"], report.get("rewrites") or []))
    wrote = ["best.py"] if b is not None else []
    lines.append(f"wrote {', '.join(wrote + ['report.json', 'lineage.dot', 'run.sqlite'])} in {out}")
    return "\n".join(lines)


def final_check_line(final: dict) -> str:
    """The summary's line on the final check: who passed it, on what, and who it demoted."""
    demoted = final["demoted"]
    ids = ", ".join(f"#{d['id']}" for d in demoted)
    gone = f"; it demoted {ids} ({demoted[0]['verdict']}: {demoted[0]['reason'][:160]})" if demoted else ""
    if final.get("unchecked") is not None:
        return f"final check: could not check #{final['unchecked']} ({final['reason'][:160]}){gone}"
    if final["candidate"] is None:
        return f"final check: no correct candidate passed it{gone}"
    deep = final["deep"]
    sets = f" and {deep['sets']} deep input sets (worst relative error {deep['worst_rel_err']:.1e})" if deep else ""
    phases = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in final.get("phases", {}).items()
                       if seconds >= 1)  # where the time went: the worker's phases of a second or more
    return (f"final check: #{final['candidate']} passed {final['trials']} more trials from a fresh seed{sets} in "
            f"{final['seconds']:.0f} s{f' ({phases})' if phases else ''}{gone}")


def rewrite_line(rw: dict, used: list[str]) -> str:
    """The summary's line on the rewrite pass: the rules, the predicted gain beside the measured times."""
    line = (f"rewrite: {', '.join(rw['rules'])}; the cost model predicts {rw['predicted']['gain']:.3g}x less time "
            f"than the original program")
    m = rw["measured"]
    built = [k for k in ("rewritten", "original") if k in m]
    if built:
        where = " in the Triton interpreter" if any(m[k]["interpreted"] for k in built) else ""
        line += (f"; measured{where}: " + ", ".join(f"#{m[k]['id']} {k} {m[k]['ms']:.4g} ms" for k in built)
                 + (f" ({m['gain']:.3g}x)" if m["gain"] else ""))
    best = "uses it" if used else "is built from the original program"
    return line + f"; the best kernel {best} (the floor stays the original program's)."
