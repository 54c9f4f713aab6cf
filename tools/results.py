"""Typed records that cross the evaluator's process boundary: a job going in, a result coming out.

Every field is fixed whatever path the evaluation took; `to_json` / `from_json` are the wire format
between the parent and the sandboxed worker, and the `--json` output of `kernelwright eval`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Verdict = Literal["correct", "incorrect", "rejected", "timeout", "crash", "error"]
VERDICTS: tuple[str, ...] = ("correct", "incorrect", "rejected", "timeout", "crash", "error")
# Where a verdict was reached, and so what it can vouch for ("": no worker verdict, e.g. a timeout).
VerifiedOn = Literal["gpu", "interpreter", ""]
VERIFIED_ON: dict[str, str] = {
    "gpu": "trials on the GPU, its activity trace checked, two runs on the same inputs compared",
    "interpreter": "Triton interpreter on a CPU: not tamper-proof; races and TF32 are not checked",
    "": "no verdict from a worker",
}


@dataclass
class TaskSpec:
    """A task file and the per-task overrides a suite may give it."""

    path: str
    name: str = ""
    dtype: str | None = None  # "float32", "bfloat16", "float16": casts inputs and parameters
    atol: float | None = None  # overrides the dtype's elementwise tolerances
    rtol: float | None = None
    shapes: dict[str, int] = field(default_factory=dict)  # module globals set before get_inputs()
    shape_sets: list[dict[str, int]] = field(default_factory=list)  # more sets of such globals (`--shapes`): a
    # candidate is verified at each of them too, after the task's own
    tf32: bool = False  # allow TF32 in the reference (and expect candidates to match TF32 accuracy)
    small: bool | None = None  # use the task's SMALL_SHAPES; None: only when running on a CPU
    scale_inputs: bool = True  # vary input magnitudes across trials; off where they overflow (cumprod)
    source: str | None = None  # the task file's text, for a job run where `path` does not exist (tools/cluster.py)


MAX_DEEP_SETS = 300


@dataclass
class EvalJob:
    """One candidate to evaluate against one task."""

    task: TaskSpec
    candidate: str  # the candidate's source code
    timeout_s: float = 300.0
    trials: int = 4
    seed: int = 0  # the seed the task's and the candidate's parameters are made under
    trial_seed: int | None = None  # the trials' inputs; None: drawn unpredictably (a failure names the one drawn)
    profile: bool = True
    deep: int = 0  # `eval --deep N`: re-verify a correct kernel on N more input sets (at most MAX_DEEP_SETS)
    baselines: "Baselines | None" = None  # eager/compile times already measured in this run, if any


@dataclass
class Baselines:
    eager_ms: float
    compile_ms: float | None
    device: str
    compile_error: str = ""  # why torch.compile gave no time on a GPU (its exception, one line), if it did not
    at_shapes: dict[str, list] = field(default_factory=dict)  # each more shape set (`--shapes`, described as
    # tools/worker.describe_shapes does) -> [eager_ms, compile_ms] there, measured once per run as the above


@dataclass
class KernelInfo:
    name: str
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None


@dataclass
class CompileInfo:
    kernels: list[KernelInfo]
    source: str  # where the figures come from, or why there are none


@dataclass
class Timing:
    ms: float
    eager_ms: float | None
    compile_ms: float | None
    floor_ms: float | None
    speedup_vs_eager: float | None  # None when interpreted: interpreter times are never speedups
    speedup_vs_compile: float | None
    floor_fraction: float | None  # floor_ms / ms: 1.0 is the speed of light
    spread_pct: float  # (p80 - p20) / median of the repetitions, in percent
    interpreted: bool
    flops: float = 0.0
    bytes: float = 0.0
    copy_ms: float | None = None  # the floor's memory part: its bytes at the device's copy bandwidth


@dataclass
class DeepCheck:
    """`eval --deep N`: a correct kernel re-verified on N fresh input sets (scales, shifts, masks, seeds)."""

    sets: int
    failed: int
    worst_rel_err: float  # the largest relative error over the sets (a failing set counts first)
    worst_abs_err: float
    worst_input: str  # the set that gave it: "deep set 3 of 8: shifted inputs x1000; trial seed 1234"
    worst_verdict: str = ""  # "incorrect" or "rejected" when that set failed; "" when every set passed
    worst_reason: str = ""  # why it failed there


@dataclass
class SanitizerCheck:
    """One compute-sanitizer tool over one forward of a kernel that passed `eval --deep` (tools/sanitizer.py)."""

    tool: str  # "memcheck" (out-of-bounds and misaligned accesses) or "racecheck" (shared-memory races)
    errors: int = 0  # its ERROR SUMMARY count
    findings: list[str] = field(default_factory=list)  # the first errors, one line each, as the sanitizer gave them
    skipped: str = ""  # why it did not run or could not vouch for the kernel ("no GPU: ..."); "" when it ran


@dataclass
class ShapeCheck:
    """A candidate verified at one shape set (TaskSpec.shape_sets, or the task's own shapes first): the task
    re-instantiated with those globals and the normal trials run there."""

    shapes: dict[str, int]  # the shape globals' values in this set
    verdict: str  # "correct", "incorrect", "rejected", "crash", "error"
    reason: str
    fallback: bool = False  # it ran no kernel there: a guarded candidate's fallback to the task's PyTorch code
    max_abs_err: float | None = None
    rel_err: float | None = None
    ms: float | None = None  # on a GPU, where the job profiles and the kernel is correct here: its time, and eager
    eager_ms: float | None = None  # PyTorch's and torch.compile's at this set; None on a CPU (interpreter times
    compile_ms: float | None = None  # are never speedups) and where it is not correct


@dataclass
class EvalResult:
    verdict: Verdict
    reason: str
    device: str = "unknown"
    interpreted: bool = False
    verified_on: VerifiedOn = ""  # what the verdict can vouch for: VERIFIED_ON
    timing: Timing | None = None
    compile: CompileInfo | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None  # against the reference, or against a wider run where judged by that rule
    own_rel_err: float | None = None  # PyTorch's own relative error against the wider run (None: no such run)
    torch_ops: list[str] = field(default_factory=list)  # ATen compute ops run outside Triton
    suspicious: bool = False  # faster than the speed-of-light floor: re-verified and flagged
    deep: DeepCheck | None = None  # the --deep re-verification, when asked for
    sanitizer: list[SanitizerCheck] = field(default_factory=list)  # --deep on a kernel that passed: each tool's run
    task_error: bool = False  # the task itself, not the candidate, cannot judge a result (tools/verify.py)
    baselines: Baselines | None = None
    seconds: float = 0.0  # the whole evaluation, as the caller saw it
    phase_seconds: dict[str, float] = field(default_factory=dict)  # setup, verify, profile, ... in the worker
    host: str = ""  # where a cluster ran it: "HOST" or "HOST GPU N" (tools/cluster.py); "" on this machine
    kernel_ms: dict[str, float] = field(default_factory=dict)  # a correct kernel on a GPU: each kernel's device
    # time in one profiled forward, the largest first (tools/gpu_checks.py: kernel_times); empty on a CPU
    shapes: list[ShapeCheck] = field(default_factory=list)  # with TaskSpec.shape_sets: the verdict at each shape
    # set, the task's own first (the result's verdict is correct only where every one is)

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"

    def to_json(self) -> dict:
        return {"correct": self.correct, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> "EvalResult":
        data = {k: v for k, v in data.items() if k != "correct"}
        if data.get("timing"):
            data["timing"] = Timing(**data["timing"])
        if data.get("compile"):
            c = data["compile"]
            data["compile"] = CompileInfo([KernelInfo(**k) for k in c["kernels"]], c["source"])
        if data.get("baselines"):
            data["baselines"] = Baselines(**data["baselines"])
        if data.get("deep"):
            data["deep"] = DeepCheck(**data["deep"])
        data["sanitizer"] = [SanitizerCheck(**c) for c in data.get("sanitizer", [])]
        data["shapes"] = [ShapeCheck(**c) for c in data.get("shapes", [])]
        return cls(**data)


def job_to_json(job: EvalJob) -> dict:
    return asdict(job)


def job_from_json(data: dict) -> EvalJob:
    data = dict(data)
    data["task"] = TaskSpec(**data["task"])
    if data.get("baselines"):
        data["baselines"] = Baselines(**data["baselines"])
    return EvalJob(**data)
