"""`kernelwright ci`: optimize the task files a change adds or modifies, and gate the change on the results.

    kernelwright ci --tasks tasks --base origin/main --budget 8 --junit junit.xml --summary summary.md
    kernelwright ci --tasks tasks --base origin/main --update-baseline    # accept the new times

Selection: task files (KernelBench format, directly in --tasks) that differ from the merge base of --base and
HEAD, committed or not, plus untracked ones, in path order. Each is optimized like `kernelwright batch` (same
seed, same budget: the same inputs select the same kernels, as far as timing noise allows; the knowledge store
is off unless --knowledge, since it changes between runs), its best kernel is verified once more with fresh
inputs and on --deep N input sets across the input space (`kernelwright eval --deep`), and its time is compared
with the committed baseline file (JSON, keyed by the task's path in the repo). With --shapes NAME=V1,V2,...
every candidate, and the re-verification, is verified at those shape sets of each task too.
Writes a JUnit XML report (--junit) and a Markdown summary (--summary, else $GITHUB_STEP_SUMMARY when set).

Exit codes (the first that applies):
  2  bad input: not a git repository, unknown --base, no --tasks folder, unreadable baseline, bad option
     (a --shapes value that is malformed or names no global of a selected task)
  3  verification gate: a selected task has no correct kernel, or its best kernel fails re-verification
  4  performance gate: a task's best kernel is slower than its baseline by more than --threshold (default 10%),
     compared only with a baseline from the same device; a run with --update-baseline accepts the new times
  1  the run itself failed (a task could not be run; see the log)
  130 interrupted
  0  every selected task passed (also when none was selected)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from agent.batch import EXIT_INTERRUPTED, Settings, add_run_options, check_specs, new_batch, run_batch, shape_sets_of
from agent.optimize import DEEP_CPU, DEEP_GPU, UsageError, deep_sets
from agent.report_html import TaskRow, kept_text
from tools.results import MAX_DEEP_SETS, TaskSpec
from tools.task import add_shapes_option

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_VERIFY, EXIT_REGRESSION = 0, 1, 2, 3, 4


def register(subparsers) -> argparse.ArgumentParser:
    parts = __doc__.split("\n\n")
    p = subparsers.add_parser("ci", help="optimize the task files changed since a git ref and gate on the results",
                              description=parts[2], epilog=parts[3], formatter_class=argparse.RawTextHelpFormatter)
    add_run_options(p, knowledge=False)
    add_shapes_option(p, "every selected task gets them")
    p.add_argument("--tasks", default="tasks", metavar="DIR", help="the folder of task files (default tasks)")
    p.add_argument("--base", metavar="REF", help="git ref to compare with (default origin/main, else main)")
    p.add_argument("--baseline", metavar="FILE", help="committed baseline times (default TASKS/baseline.json)")
    p.add_argument("--threshold", type=float, default=0.10, metavar="F",
                   help="allowed slowdown against the baseline, as a fraction (default 0.10)")
    p.add_argument("--update-baseline", action="store_true", help="write this run's times into the baseline file")
    p.add_argument("--deep", type=int, metavar="N", help=f"input sets across the input space each accepted kernel "
                   f"is re-verified on (default {DEEP_GPU} on a GPU, {DEEP_CPU} on a CPU; 0: none)")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report here")
    p.add_argument("--summary", metavar="FILE", help="write the Markdown summary here")
    p.add_argument("--out", metavar="DIR", help="output folder of the runs (default runs/ci-TIMESTAMP)")
    p.set_defaults(func=ci)
    return p


# --- selection ------------------------------------------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout


def repo_root(start: Path) -> Path:
    try:
        return Path(git(start, "rev-parse", "--show-toplevel").strip())
    except UsageError:
        raise UsageError(f"{start.resolve()} is not inside a git repository.") from None


def default_base(repo: Path) -> str:
    for ref in ("origin/main", "main"):
        if subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", ref + "^{commit}"],
                          capture_output=True).returncode == 0:
            return ref
    raise UsageError("Neither origin/main nor main exists; pass --base REF.")


def changed_tasks(repo: Path, tasks: Path, base: str) -> tuple[list[Path], list[str]]:
    """Task files in `tasks` added or modified since the merge base of `base` and HEAD (committed, staged,
    unstaged or untracked), sorted; and the changed .py files skipped because they are not task files."""
    from tools.task import TaskError, check_task_file
    try:
        merge_base = git(repo, "merge-base", base, "HEAD").strip()
    except UsageError:
        raise UsageError(f"The base ref {base!r} is not known to git here (fetch it, or pass --base).") from None
    rel = os.path.relpath(tasks.resolve(), repo)
    names = git(repo, "diff", "--name-only", "--diff-filter=AMR", "-z", merge_base, "--", rel).split("\0")
    names += git(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", rel).split("\0")
    picked, skipped = [], []
    for name in sorted(set(n for n in names if n)):
        path = repo / name
        if path.suffix != ".py" or path.parent.resolve() != tasks.resolve() or path.name.startswith("_"):
            continue
        try:
            check_task_file(path)
        except TaskError as e:
            skipped.append(f"{name}: {e}")
            continue
        picked.append(path)
    return picked, skipped


# --- baseline and gates ---------------------------------------------------------------------------------
def load_baseline(path: Path) -> dict:
    if not path.exists():
        return {"version": 1, "tasks": {}}
    try:
        data = json.loads(path.read_text())
        assert isinstance(data.get("tasks"), dict)
        return data
    except (ValueError, AssertionError, AttributeError):
        raise UsageError(f"The baseline file {path} is not a kernelwright baseline (JSON with a \"tasks\" "
                         f"object); fix it or rewrite it with --update-baseline.") from None


@dataclass
class Verdict:
    """One selected task after the run: its row, the re-verification, and what each gate says."""

    key: str  # the task file's path in the repository
    row: TaskRow
    verify_error: str = ""  # why the best kernel failed re-verification, if it did
    baseline_ms: float | None = None
    change: float | None = None  # best_ms / baseline_ms - 1
    note: str = ""
    gate: str = ""  # "", "verification", "performance", "run"

    @property
    def message(self) -> str:
        if self.gate == "verification":
            return self.verify_error or self.row.brief()
        if self.gate == "performance":
            return f"{self.change:+.1%} against the baseline {self.baseline_ms:.4g} ms"
        return "the task could not be run; see the log" if self.gate == "run" else ""


def reverify(rows: list[TaskRow], specs: dict[str, TaskSpec], out: Path, seed: int,
             cluster: str | None = None, deep: int = 0) -> dict[str, str]:
    """Runs every best kernel once more with fresh inputs (another seed, more trials, `deep` sets across the input
    space); task -> failure reason."""
    from tools.executor import open_executor
    from tools.results import EvalJob
    todo = [r for r in rows if r.verdict == "correct" and r.best_kernel]
    if not todo:
        return {}
    jobs = [EvalJob(task=specs[r.task], candidate=(out / r.best_kernel).read_text(), trials=6, seed=seed + 1,
                    profile=False, deep=deep) for r in todo]
    with open_executor(cluster) as executor:
        results = [f.result() for f in [executor.submit(j) for j in jobs]]
    return {r.task: f"the best kernel failed re-verification: {res.verdict}: {res.reason}"
            for r, res in zip(todo, results) if not res.correct}


def judge(verdicts: list[Verdict], baseline: dict, threshold: float, update: bool) -> None:
    for v in verdicts:
        r = v.row
        if r.status != "done":
            v.gate = "run"
            continue
        if r.verdict != "correct" or v.verify_error:
            v.gate = "verification"
            continue
        entry = baseline["tasks"].get(v.key)
        if entry is None:
            v.note = "no baseline yet"
        elif entry.get("device") != r.device:
            v.note = f"baseline measured on {entry.get('device')}: not compared"
        else:
            v.baseline_ms, v.change = entry["ms"], r.best_ms / entry["ms"] - 1.0
            if v.change > threshold and not update:
                v.gate = "performance"
            elif v.change > threshold:
                v.note = "slower than the baseline; baseline updated"


def update_baseline(path: Path, baseline: dict, verdicts: list[Verdict]) -> int:
    n = 0
    for v in verdicts:
        if v.row.verdict == "correct" and not v.verify_error and v.row.best_ms:
            baseline["tasks"][v.key] = {"ms": v.row.best_ms, "device": v.row.device, "interpreted": v.row.interpreted,
                                        "updated": time.strftime("%Y-%m-%d")}
            n += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "tasks": dict(sorted(baseline["tasks"].items()))}, indent=1) + "\n")
    return n


def exit_code(verdicts: list[Verdict]) -> int:
    gates = {v.gate for v in verdicts}
    for gate, code in (("verification", EXIT_VERIFY), ("performance", EXIT_REGRESSION), ("run", EXIT_FAILED)):
        if gate in gates:
            return code
    return EXIT_OK


# --- reports --------------------------------------------------------------------------------------------
def junit(verdicts: list[Verdict], base: str) -> str:
    suite = ET.Element("testsuite", name="kernelwright ci", tests=str(len(verdicts)),
                       failures=str(sum(v.gate in ("verification", "performance") for v in verdicts)),
                       errors=str(sum(v.gate == "run" for v in verdicts)),
                       time=f"{sum(v.row.seconds for v in verdicts):.1f}")
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="base", value=base)
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname="kernelwright.tasks", name=v.key, time=f"{v.row.seconds:.1f}")
        if v.gate:
            tag = "error" if v.gate == "run" else "failure"
            ET.SubElement(case, tag, type=v.gate, message=v.message).text = v.message
        ET.SubElement(case, "system-out").text = f"{v.row.brief()}; {v.note}".rstrip("; ")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown(verdicts: list[Verdict], base: str, code: int, skipped: list[str], updated: int | None) -> str:
    interp = any(v.row.interpreted for v in verdicts)
    unit = "ms (interpreter)" if interp else "ms"
    lines = ["## kernelwright ci", "",
             f"**{_outcome(code)}** · {len(verdicts)} task file(s) added or changed since `{base}`", ""]
    if interp:
        lines += ["_Times are Triton-interpreter times on a CPU, not GPU times; no speedups are shown. Interpreter "
                  "verdicts are not tamper-proof, and races and TF32 are not checked._", ""]
    if verdicts:
        lines += [f"| task | result | verified on | " + ("" if interp else "kept | ") + f"best {unit} | "
                  + ("" if interp else "x eager | x torch.compile | ") + f"baseline {unit} | change | evaluations |",
                  "|---|---|---|" + ("" if interp else "---|") + "---:|" + ("" if interp else "---:|---:|")
                  + "---:|---:|---:|"]
        for v in verdicts:
            r = v.row
            result = {"": "pass", "verification": "FAIL: verification", "performance": "FAIL: slower",
                      "run": "ERROR"}[v.gate]
            cells = [f"`{v.key}`", result, r.verified_on or "–"] + ([] if interp else [kept_text(r) or "–"]) + [
                _num(r.best_ms)]
            if not interp:
                cells += [_num(r.speedup_vs_eager, "x"), _num(r.speedup_vs_compile, "x")]
            cells += [_num(v.baseline_ms), f"{v.change:+.1%}" if v.change is not None else (v.note or "–"),
                      str(r.evaluations)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"- {v.key}: {v.message}" for v in verdicts if v.gate]
    lines += [f"- {v.key}: no faster kernel; keep PyTorch (the best correct kernel runs at "
              f"{v.row.speedup_vs_eager:.2f}x eager)" for v in verdicts if not v.gate and v.row.kept is False
              and v.row.speedup_vs_eager is not None]
    lines += [f"- skipped (not a task file) {s}" for s in skipped]
    if updated is not None:
        lines.append(f"- baseline updated for {updated} task(s)")
    return "\n".join(lines).rstrip() + "\n"


def _num(v: float | None, suffix: str = "") -> str:
    return "–" if v is None else f"{v:.4g}{suffix}"


def _outcome(code: int) -> str:
    return {EXIT_OK: "passed", EXIT_VERIFY: "failed: verification gate (exit 3)",
            EXIT_REGRESSION: "failed: performance gate (exit 4)", EXIT_FAILED: "failed: a task could not be run "
            "(exit 1)", EXIT_INTERRUPTED: "interrupted"}.get(code, f"exit {code}")


# --- the command ----------------------------------------------------------------------------------------
def ci(args: argparse.Namespace) -> int:
    tasks = Path(args.tasks)
    if not tasks.is_dir():
        raise UsageError(f"The tasks folder {tasks} does not exist.")
    if args.threshold < 0 or args.budget is not None and args.budget < 1:
        raise UsageError("--threshold must not be negative and --budget must be at least 1.")
    if args.deep is not None and not 0 <= args.deep <= MAX_DEEP_SETS:
        raise UsageError(f"--deep takes 0 to {MAX_DEEP_SETS} input sets.")
    shape_sets = shape_sets_of(args)
    repo = repo_root(tasks)
    base = args.base or default_base(repo)
    baseline_path = Path(args.baseline) if args.baseline else tasks / "baseline.json"
    baseline = load_baseline(baseline_path)
    picked, skipped = changed_tasks(repo, tasks, base)
    print(f"kernelwright ci: {len(picked)} task file(s) added or changed since {base}"
          + "".join(f"\n  {p.relative_to(repo)}" for p in picked), flush=True)
    specs = [TaskSpec(path=str(p.resolve()), name=p.stem, small=True if args.small else None, dtype=args.dtype,
                      shape_sets=list(shape_sets or [])) for p in picked]
    check_specs(specs)
    code, verdicts, updated = EXIT_OK, [], None
    if specs:
        out = Path(args.out) if args.out else Path("runs") / f"ci-{time.strftime('%Y%m%d-%H%M%S')}"
        settings = Settings(budget=args.budget, time_limit=args.time_limit, small=args.small, model=args.model,
                            policy=args.policy, seed=args.seed if args.seed is not None else 0,
                            knowledge=args.knowledge, workers=1, dtype=args.dtype, shape_sets=shape_sets,
                            deep=0)  # each task's final check runs its trials; reverify below, the deep sets
        batch = new_batch(f"ci: {base}", specs, out, settings)
        code = run_batch(batch, cluster=args.cluster)
        if code == EXIT_USAGE:
            return code
        rows = batch.rows()
        if code != EXIT_INTERRUPTED:
            failures = reverify(rows, {s.name: s for s in specs}, out, settings.seed, args.cluster,
                                deep=deep_sets(args.deep))
            verdicts = [Verdict(str(p.relative_to(repo)), r, failures.get(r.task, "")) for p, r in zip(picked, rows)]
            judge(verdicts, baseline, args.threshold, args.update_baseline)
            code = exit_code(verdicts)
            if args.update_baseline:
                updated = update_baseline(baseline_path, baseline, verdicts)
    elif args.update_baseline:
        updated = 0
    text = markdown(verdicts, base, code, skipped, updated)
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a" if not args.summary else "w") as f:
            f.write(text)
    if args.junit:
        Path(args.junit).write_text(junit(verdicts, base))
    for v in verdicts:
        if v.gate:
            print(f"kernelwright ci: {v.key}: {v.message}", file=sys.stderr)
    print(f"kernelwright ci: {_outcome(code)}")
    return code
