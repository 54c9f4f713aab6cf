"""compute-sanitizer over a kernel that passed `eval --deep N`, on a GPU: one forward of the candidate on the task's
inputs, at the task's SMALL_SHAPES where it defines them (the sanitizer slows kernels 10-100x), in a fresh process
under `--tool memcheck` (out-of-bounds and misaligned accesses) and then `--tool racecheck` (shared-memory races).

    checks = sanitize(job_path, folder, env, timeout_s, on_gpu)   # one SanitizerCheck per tool in TOOLS
    result = judge(result, checks)                                 # `incorrect` where memcheck found an error

The parent (tools/evaluate.py) starts the process; the candidate's code runs only there, as
`python -m tools.sanitizer JOB.json`, with the worker's scrubbed environment, in its own process group, killed
with it at the timeout. PyTorch's caching allocator is off there, so an access past a tensor's end is past its
allocation. The sanitizer writes its report to a file of its own (--log-file): nothing the candidate prints can
read as a finding or as a clean summary. Where no tool can vouch for the kernel (no GPU, no binary, a timeout, a
forward that failed under the sanitizer), the check says so in `skipped`; it never passes for a check that ran."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tools.results import EvalResult, SanitizerCheck
from tools.sandbox import kill_group

TOOLS = ("memcheck", "racecheck")
DECIDING = ("memcheck",)  # the tools whose errors make the verdict (judge)
CUDA_BIN = "/usr/local/cuda/bin/compute-sanitizer"
NO_GPU = "no GPU: the kernel ran in the Triton interpreter on the CPU, which compute-sanitizer cannot check"
MAX_FINDINGS = 3
PREFIX = "========="  # every line the sanitizer writes starts with it; a finding's details are indented below it
SUMMARY = re.compile(r"(?:ERROR SUMMARY: (\d+) errors?|RACECHECK SUMMARY: .*\((\d+) errors?)")
NOT_FINDINGS = ("SUMMARY", "Warning", "Saved host backtrace")  # a finding is any other line with details under it
OWN_FAILURES = ("Internal Sanitizer Error", "Device not supported")  # the sanitizer's failures, not the kernel's


def find_binary() -> str | None:
    """compute-sanitizer on PATH, else in CUDA's default folder; None where neither has it."""
    return shutil.which("compute-sanitizer") or (CUDA_BIN if os.access(CUDA_BIN, os.X_OK) else None)


def sanitize(job_path: str, folder: str, env: dict[str, str], timeout_s: float, on_gpu: bool) -> list[SanitizerCheck]:
    """Each tool in TOOLS over one forward of the job's candidate, each run killed after `timeout_s`, in `folder`
    (made here: the child's working directory and HOME, and the tools' logs); `env` is the worker's scrubbed
    environment."""
    binary = find_binary()
    if not on_gpu or binary is None:
        why = NO_GPU if not on_gpu else f"compute-sanitizer is not on PATH nor at {CUDA_BIN}"
        return [SanitizerCheck(tool, skipped=why) for tool in TOOLS]
    os.makedirs(folder, exist_ok=True)
    env = dict(env, HOME=folder, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    return [run_tool(binary, tool, job_path, folder, env, timeout_s) for tool in TOOLS]


def run_tool(binary: str, tool: str, job_path: str, folder: str, env: dict[str, str],
             timeout_s: float) -> SanitizerCheck:
    log, out = os.path.join(folder, f"{tool}.log"), os.path.join(folder, f"{tool}.out")
    command = [binary, "--tool", tool, "--log-file", log, "--print-limit", "20", "--show-backtrace", "device",
               "--report-api-errors", "no", "--target-processes", "application-only",
               sys.executable, "-m", "tools.sanitizer", job_path]
    with open(out, "w") as output:
        child = subprocess.Popen(command, env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=output,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(child.pid)
            child.wait()
            return SanitizerCheck(tool, skipped=f"timed out after {timeout_s:g} s and was killed")
    report = _read(log)
    errors, findings = parse(report)
    own = next((line for line in report.splitlines() if any(s in line for s in OWN_FAILURES)), None)
    if own:
        return SanitizerCheck(tool, skipped=f"compute-sanitizer failed: {own.strip('= ')[:300]}")
    if errors is None:
        return SanitizerCheck(tool, skipped=f"compute-sanitizer wrote no summary (exit {code}): "
                                            f"{_last_line(report or _read(out))}")
    if errors == 0 and code != 0:
        return SanitizerCheck(tool, skipped=f"the forward failed under the sanitizer (exit {code}): "
                                            f"{_last_line(_read(out))}")
    return SanitizerCheck(tool, errors, findings)


def parse(text: str) -> tuple[int | None, list[str]]:
    """A sanitizer report: (its error count, None where it has no summary line; its first findings, each the
    finding's line and its first detail, such as the kernel and the source line). memcheck and racecheck both
    print a finding as a line with indented details under it; banners and summaries have none."""
    counts = [int(a or b) for a, b in SUMMARY.findall(text)]
    lines = [line[len(PREFIX):].rstrip() for line in text.splitlines() if line.startswith(PREFIX)] + [""]
    findings = []
    for line, detail in zip(lines, lines[1:]):
        if line.strip() and not line.startswith("  ") and detail.startswith("  ") and not any(
                s in part for s in NOT_FINDINGS for part in (line, detail)):
            findings.append(f"{line.strip()} {detail.strip()}")
    return (max(counts) if counts else None), findings[:MAX_FINDINGS]


def judge(result: EvalResult, checks: list[SanitizerCheck]) -> EvalResult:
    """The result with the checks recorded; `incorrect`, naming the tool and its first finding, where a tool in
    DECIDING found an error (an out-of-bounds access is a wrong kernel, whatever its outputs). racecheck's
    findings are reported only: it has not yet been run on the GPU over Triton's Hopper kernels, whose
    asynchronous copies synchronize through barriers it may not follow, and an honest kernel must not fail on a
    tool's misreading."""
    failed = next((c for c in checks if c.errors and c.tool in DECIDING), None)
    if failed is None:
        return replace(result, sanitizer=checks)
    first = f"; the first: {failed.findings[0].rstrip('.')}" if failed.findings else ""
    reason = (f"Incorrect (compute-sanitizer {failed.tool}): {failed.errors} error{'s' * (failed.errors != 1)} in "
              f"one forward of the kernel{first}.")
    return replace(result, verdict="incorrect", reason=reason, sanitizer=checks)


def describe(check: SanitizerCheck) -> str:
    """One line for a person: `memcheck: 0 errors`, `racecheck: skipped (no GPU: ...)`."""
    if check.skipped:
        return f"{check.tool}: skipped ({check.skipped})"
    first = f"; first: {check.findings[0]}" if check.findings else ""
    return f"{check.tool}: {check.errors} error{'s' * (check.errors != 1)}{first}"


def forward_once(job_path: str) -> None:
    """The child, under the sanitizer: the candidate's forward, once, on the task's inputs at its SMALL_SHAPES
    (the task's shape overrides apply too), then a device synchronization."""
    import torch

    from tools.results import job_from_json
    from tools.task import import_file, load_task_module

    job = job_from_json(json.loads(Path(job_path).read_text()))
    task = load_task_module(job.task, small=True)
    Path("candidate.py").write_text(job.candidate)
    dtype = getattr(torch, job.task.dtype) if job.task.dtype else None
    torch.manual_seed(job.seed)
    with torch.device("cuda"):
        init = task.get_init_inputs()
        candidate = import_file("candidate.py", "kw_candidate").ModelNew(*init).to("cuda")
        inputs = [x.to("cuda") if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    if dtype:
        candidate = candidate.to(dtype)
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        candidate(*inputs)
    torch.cuda.synchronize()


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


if __name__ == "__main__":
    forward_once(sys.argv[1])
