"""Every cheat and honest kernel of the evaluator tests, evaluated two ways, beside the verdicts the tests expect.

The cases are tests/tools/fixtures/cases.toml. Each is evaluated against its task through `kernelwright eval
--json` (a fresh process per case) and through one persistent worker taking every case in turn, as a batch
does; a table puts both verdicts beside the expected one. Then the warm time of a small task: the honest
softmax evaluated five times in one warm persistent worker, without and with a profile.

    python benchmarks/cheats_bench.py [--only SUBSTR] [--skip-cli] [--jobs N] [--json OUT.json]

Exit 0 only when every verdict is the expected one and its reason holds the expected fragments. On a CPU
(the Triton interpreter) a case's `cpu` verdict applies where cases.toml gives one. A case the candidate
language refuses (`refused_by`) is expected `rejected` by that rule before any of it runs."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.evaluate import visible_gpus  # noqa: E402
from tools.executor import ExecutorConfig, LocalExecutor  # noqa: E402
from tools.results import EvalJob, EvalResult, TaskSpec  # noqa: E402

FIXTURES = ROOT / "tests" / "tools" / "fixtures"
TRIALS, TIMEOUT_S = 3, 180.0  # as the evaluator tests run them, where a case gives none
WARM_RUNS = 5


def load_cases(only: str | None) -> list[dict]:
    """The cases of cases.toml whose name (candidate, task and dtype) contains `only`."""
    cases = []
    for c in tomllib.loads((FIXTURES / "cases.toml").read_text())["case"]:
        c["name"] = " ".join([c["candidate"], c["task"], c.get("dtype", "")]).strip()
        if only is None or only in c["name"]:
            cases.append(c)
    return cases


def expected(case: dict, gpu: bool) -> tuple[str, list[str]]:
    """The evaluator's verdict for a case on this device, and fragments its reason must contain."""
    c = case | ({} if gpu else case.get("cpu", {}))
    if "refused_by" in c:
        return "rejected", [f"Rejected ({c['refused_by']})"]
    return c["verdict"], c["reason"]


def job(case: dict) -> EvalJob:
    return EvalJob(TaskSpec(str(FIXTURES / case["task"]), dtype=case.get("dtype")),
                   (FIXTURES / "candidates" / case["candidate"]).read_text(),
                   timeout_s=case.get("timeout_s", TIMEOUT_S), trials=case.get("trials", TRIALS),
                   trial_seed=case.get("trial_seed"), deep=case.get("deep", 0))


def via_cli(case: dict) -> tuple[EvalResult, float]:
    """`kernelwright eval --json` in a fresh process, with the case's job settings: its result and wall seconds."""
    j = job(case)
    candidate = FIXTURES / "candidates" / case["candidate"]
    command = [sys.executable, "-m", "agent.cli", "eval", j.task.path, str(candidate), "--json",
               "--timeout", str(j.timeout_s), "--trials", str(j.trials), "--deep", str(j.deep)]
    command += ["--dtype", j.task.dtype] if j.task.dtype else []
    command += ["--trial-seed", str(j.trial_seed)] if j.trial_seed is not None else []
    started = time.perf_counter()
    try:
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=j.timeout_s + 300)
    except subprocess.TimeoutExpired:
        run = None
    seconds = time.perf_counter() - started
    if run is None:
        return EvalResult("timeout", f"eval did not return within {j.timeout_s + 300:g} s."), seconds
    try:
        return EvalResult.from_json(json.loads(run.stdout)), seconds
    except ValueError:
        return EvalResult("error", f"eval exited {run.returncode} with no JSON: {run.stderr.strip()[-300:]}"), seconds


def problem(way: str, r: EvalResult | None, verdict: str, fragments: list[str]) -> str | None:
    """What is wrong with a result, in words; None when it is the expected one (or the way did not run)."""
    if r is None:
        return None
    if r.verdict != verdict:
        return f"{way} gave {r.verdict}, expected {verdict}: {r.reason}"
    missing = [f for f in fragments if f not in r.reason]
    return f"{way}: the reason lacks {missing}: {r.reason}" if missing else None


def warm_times(profile: bool) -> list[EvalResult]:
    """The honest softmax evaluated WARM_RUNS times by one persistent worker. The first run pays the worker's
    start (and, with a profile, the eager and torch.compile baselines, which the later runs reuse, as a search
    does)."""
    base = EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")), (FIXTURES / "candidates" / "honest.py").read_text(),
                   trials=TRIALS, profile=profile)
    results = []
    with LocalExecutor(ExecutorConfig(gpus=visible_gpus()[:1], isolation="persistent")) as ex:
        for _ in range(WARM_RUNS):
            results.append(ex.submit(replace(base, baselines=results[0].baselines if results else None)).result())
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="SUBSTR", help="only the cases whose candidate, task or dtype contains it")
    parser.add_argument("--skip-cli", action="store_true", help="skip the `kernelwright eval` way")
    parser.add_argument("--json", metavar="OUT", help="write every result here")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="`kernelwright eval` processes at once (verdicts only: their seconds then overlap)")
    args = parser.parse_args()
    gpu = bool(visible_gpus())
    cases = load_cases(args.only)
    print(f"{len(cases)} cases on {'a GPU' if gpu else 'a CPU (Triton interpreter)'}", flush=True)

    worker = []
    with LocalExecutor(ExecutorConfig(gpus=visible_gpus()[:1], isolation="persistent")) as ex:
        for case in cases:
            worker.append(ex.submit(job(case)).result())
            print(f"worker  {case['name']}: {worker[-1].verdict} ({worker[-1].seconds:.1f} s)", flush=True)
    cli = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for case, (r, seconds) in zip(cases, pool.map(via_cli, cases if not args.skip_cli else [])):
            cli.append((r, seconds))
            print(f"eval    {case['name']}: {r.verdict} ({seconds:.1f} s)", flush=True)

    rows, problems = [], []
    for i, case in enumerate(cases):
        verdict, fragments = expected(case, gpu)
        by_cli, cli_s = cli[i] if cli else (None, None)
        found = [p for p in (problem("eval", by_cli, verdict, fragments),
                             problem("worker", worker[i], verdict, fragments)) if p]
        problems += [f"{case['name']}: {p}" for p in found]
        rows.append({"case": case["name"], "candidate": case["candidate"], "task": case["task"],
                     "dtype": case.get("dtype"), "expected": verdict, "fragments": fragments, "ok": not found,
                     "eval": by_cli.to_json() if by_cli else None, "eval_wall_s": cli_s,
                     "worker": worker[i].to_json()})

    print("\n| case | task | expected | via eval | via worker | seconds (eval / worker) | |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        task = row["task"] + (f" ({row['dtype']})" if row["dtype"] else "")
        by_cli = row["eval"]["verdict"] if row["eval"] else "skipped"
        cli_s = f"{row['eval_wall_s']:.1f}" if row["eval"] else "-"
        print(f"| {row['candidate']} | {task} | {row['expected']} | {by_cli} | {row['worker']['verdict']} | "
              f"{cli_s} / {row['worker']['seconds']:.1f} | {'OK' if row['ok'] else 'MISMATCH'} |")
    cheats = [r for r in rows if r["expected"] != "correct"]
    honest = [r for r in rows if r["expected"] == "correct"]
    rejected = sum(all(r[w]["verdict"] != "correct" for w in ("eval", "worker") if r[w]) for r in cheats)
    accepted = sum(all(r[w]["verdict"] == "correct" for w in ("eval", "worker") if r[w]) for r in honest)
    print(f"\n{rejected} cheats rejected of {len(cheats)}, {accepted} honest accepted of {len(honest)}; "
          f"mismatches: {len(problems) or 'none'}")
    for p in problems:
        print(f"  MISMATCH {p}")

    print(f"\nwarm time, honest.py on task_softmax.py, one persistent worker, {WARM_RUNS} runs (the first excluded "
          f"from the median; with a profile, later runs reuse its baselines):")
    warm = {}
    for name, profile in (("no profile", False), ("profile", True)):
        runs = warm_times(profile)
        median = statistics.median(r.seconds for r in runs[1:])
        warm[name] = {"seconds": [r.seconds for r in runs], "median_warm_s": median,
                      "results": [r.to_json() for r in runs]}
        phases = " ".join(f"{k} {v:.2f}" for k, v in runs[-1].phase_seconds.items())
        print(f"  {name:<11}" + " ".join(f"{r.seconds:.2f}" for r in runs) + f" s; median of the warm runs "
              f"{median:.2f} s (last run's phases: {phases})")
        for i, r in enumerate(runs):
            if not r.correct:
                problems.append(f"warm run {i + 1} ({name}) gave {r.verdict}: {r.reason}")
                print(f"  MISMATCH {problems[-1]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": gpu, "cases": rows, "warm": warm, "problems": problems},
                                              indent=1))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
