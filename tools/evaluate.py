"""The parent side of one evaluation: write the job, run the worker in the sandbox, read the result.
Whatever the candidate does (hang, segfault, illegal address, out of memory), the caller gets an EvalResult."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tools.results import EvalJob, EvalResult, job_to_json
from tools.sandbox import run_sandboxed, scrubbed_env


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_CACHE") or Path.home() / ".cache" / "kernelwright")


def evaluate(job: EvalJob, gpu: int | None = None) -> EvalResult:
    """Evaluates one candidate in a fresh worker process, on GPU `gpu` (None: what the worker sees)."""
    started = time.perf_counter()
    job = replace(job, task=replace(job.task, path=str(Path(job.task.path).resolve())))
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kw-eval-") as scratch:
        job_path, result_path = os.path.join(scratch, "job.json"), os.path.join(scratch, "result.json")
        Path(job_path).write_text(json.dumps(job_to_json(job)))
        env = scrubbed_env({
            "HOME": scratch, "PYTHONPATH": _import_path(), "PYTHONUNBUFFERED": "1",
            "KERNELWRIGHT_CACHE": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        })
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        run = run_sandboxed([sys.executable, "-m", "tools.worker", job_path, result_path], cwd=scratch,
                            timeout_s=job.timeout_s, env=env)
        result = _read_result(result_path, run, job.timeout_s)
    result.seconds = time.perf_counter() - started
    return result


def _read_result(path: str, run, timeout_s: float) -> EvalResult:
    if run.timed_out:
        return EvalResult("timeout", f"The evaluation did not finish within {timeout_s:g} s and was killed.")
    if os.path.exists(path):
        return EvalResult.from_json(json.loads(Path(path).read_text()))
    tail = [line for line in run.stderr.strip().splitlines() if line.strip()][-1:] or [""]
    if run.signal_name:
        return EvalResult("crash", f"The worker died with {run.signal_name} while running the candidate.")
    if "out of memory" in run.stderr.lower():
        return EvalResult("crash", f"The candidate ran out of memory: {tail[0][:300]}.")
    return EvalResult("crash", f"The worker exited with code {run.returncode} and no result: {tail[0][:300]}.")


def _import_path() -> str:
    """The worker imports `tools` from the same place this process does, plus any PYTHONPATH given."""
    here = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in [here, os.environ.get("PYTHONPATH", "")] if p)
