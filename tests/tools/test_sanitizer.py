"""compute-sanitizer under `eval --deep` (tools/sanitizer.py): its reports are read on sample text here; a CPU
says plainly that the sanitizer was skipped; a tool that hangs is killed at its timeout. On a GPU (marked `gpu`):
a kernel whose load has no mask passes the trials and memcheck finds it; the honest kernel is clean."""
import json
import os
import stat
import time
from pathlib import Path

import pytest
import torch

from tools import sanitizer
from tools.results import EvalJob, EvalResult, SanitizerCheck, TaskSpec
from tools.sanitizer import NO_GPU, judge, parse, run_tool, sanitize

FIXTURES = Path(__file__).parent / "fixtures"
TASK = str(FIXTURES / "task_softmax.py")

CLEAN = """\
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at unmasked_softmax_kernel+0x1f0 in /tmp/kw-eval-x/sanitizer/candidate.py:16
=========     by thread (63,0,0) in block (6,0,0)
=========     Address 0x7f3a1c0004ec is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a1c000000 of size 1260 bytes
=========
========= Invalid __global__ read of size 4 bytes
=========     at unmasked_softmax_kernel+0x1f0 in /tmp/kw-eval-x/sanitizer/candidate.py:16
=========     by thread (62,0,0) in block (6,0,0)
=========     Address 0x7f3a1c0004e8 is out of bounds
=========
========= ERROR SUMMARY: 19 errors
"""
RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at racy_kernel+0x90 in /tmp/race.py:9
=========     and Read access at racy_kernel+0xb0 in /tmp/race.py:11 [124 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_a_clean_report_has_no_errors_and_no_findings():
    assert parse(CLEAN) == (0, [])


def test_a_memcheck_report_gives_its_count_and_each_finding_with_its_place():
    errors, findings = parse(MEMCHECK)
    assert errors == 19 and len(findings) == 2
    assert findings[0] == ("Invalid __global__ read of size 4 bytes at unmasked_softmax_kernel+0x1f0 in "
                           "/tmp/kw-eval-x/sanitizer/candidate.py:16")


def test_a_racecheck_hazard_is_an_error_with_both_accesses():
    errors, findings = parse(RACECHECK)
    assert errors == 1 and findings == ["Error: Race reported between Write access at racy_kernel+0x90 in "
                                        "/tmp/race.py:9 and Read access at racy_kernel+0xb0 in /tmp/race.py:11 "
                                        "[124 hazards]"]


def test_a_report_without_a_summary_has_no_count():
    assert parse("========= COMPUTE-SANITIZER\nTraceback (most recent call last):\n")[0] is None


def test_an_error_makes_the_verdict_incorrect_naming_the_tool_and_the_first_finding():
    correct = EvalResult("correct", "Correct on every trial and on 1 --deep input sets.")
    errors, findings = parse(MEMCHECK)
    checks = [SanitizerCheck("memcheck", errors, findings), SanitizerCheck("racecheck", 0)]
    r = judge(correct, checks)
    assert r.verdict == "incorrect" and r.sanitizer == checks
    assert r.reason == ("Incorrect (compute-sanitizer memcheck): 19 errors in one forward of the kernel; the first: "
                        f"{findings[0]}.")
    clean = judge(correct, [SanitizerCheck("memcheck"), SanitizerCheck("racecheck")])
    assert clean.verdict == "correct" and clean.reason == correct.reason and len(clean.sanitizer) == 2
    skipped = judge(correct, [SanitizerCheck(t, skipped=NO_GPU) for t in sanitizer.TOOLS])
    assert skipped.verdict == "correct" and all(c.skipped for c in skipped.sanitizer)
    races = [SanitizerCheck("memcheck", 0), SanitizerCheck("racecheck", 2, ["a hazard"])]
    reported = judge(correct, races)  # racecheck's findings are reported, not yet judged (tools/sanitizer.py)
    assert reported.verdict == "correct" and reported.sanitizer == races


def test_the_checks_survive_the_json_round_trip():
    r = EvalResult("incorrect", "x", sanitizer=[SanitizerCheck("memcheck", 2, ["Invalid __global__ read"]),
                                                SanitizerCheck("racecheck", skipped="timed out after 5 s")])
    assert EvalResult.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert EvalResult.from_json({"verdict": "correct", "reason": "old result"}).sanitizer == []


def test_no_binary_is_a_skip_that_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sanitizer, "CUDA_BIN", str(tmp_path / "compute-sanitizer"))
    checks = sanitize("job.json", str(tmp_path / "s"), {}, 5.0, on_gpu=True)
    assert [c.tool for c in checks] == ["memcheck", "racecheck"]
    assert all(c.errors == 0 and "not on PATH" in c.skipped for c in checks)


def test_a_tool_that_hangs_is_killed_at_its_timeout_with_its_children(tmp_path):
    binary = tmp_path / "compute-sanitizer"  # stands for a sanitizer whose program never ends
    binary.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {tmp_path}/child.pid\nwait\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    check = run_tool(str(binary), "memcheck", "job.json", str(tmp_path), {"PATH": os.environ["PATH"]}, 1.0)
    assert check == SanitizerCheck("memcheck", skipped="timed out after 1 s and was killed")
    pid = int((tmp_path / "child.pid").read_text())

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 5  # a killed process may take a moment to be torn down on a loaded machine
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()  # the child's sleep 60 would still be there, asleep


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the sanitizer runs: the gpu tests below cover it")
def test_eval_deep_on_a_cpu_says_the_sanitizer_was_skipped(capsys):
    from tools.cli_eval import register
    import argparse
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["eval", TASK, str(FIXTURES / "candidates" / "honest.py"), "--deep", "1", "--trials", "1",
                              "--no-profile"])
    code = args.func(args)
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("CORRECT"), out
    for tool in ("memcheck", "racecheck"):
        assert f"--deep compute-sanitizer {tool}: skipped ({NO_GPU})" in out, out


@pytest.fixture(scope="module")
def gpu_results():
    from tools.evaluate import WarmWorker
    task = TaskSpec(TASK)
    jobs = {name: EvalJob(task, (FIXTURES / "candidates" / f"{name}.py").read_text(), trials=2, profile=False, deep=1)
            for name in ("unmasked_load", "honest")}
    with WarmWorker() as worker:
        return {name: worker.run(job) for name, job in jobs.items()}


@pytest.mark.gpu
def test_memcheck_finds_the_load_without_a_mask_that_the_trials_pass(gpu_results):
    r = gpu_results["unmasked_load"]
    assert r.verdict == "incorrect" and "Incorrect (compute-sanitizer memcheck)" in r.reason, r.reason
    memcheck = r.sanitizer[0]
    assert memcheck.tool == "memcheck" and memcheck.errors > 0 and not memcheck.skipped, r.sanitizer
    assert "Invalid __global__ read" in memcheck.findings[0] and "unmasked_softmax_kernel" in memcheck.findings[0]
    assert r.deep is not None and r.deep.failed == 0  # the trials and --deep passed it: only the sanitizer sees it


@pytest.mark.gpu
def test_the_honest_kernel_is_clean_under_both_tools(gpu_results):
    r = gpu_results["honest"]
    assert r.verdict == "correct", r.reason
    assert [(c.tool, c.errors, c.skipped) for c in r.sanitizer] == [("memcheck", 0, ""), ("racecheck", 0, "")]
    assert r.phase_seconds["sanitizer"] > 0
