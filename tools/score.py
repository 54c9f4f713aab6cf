"""Scoring a suite, in the KernelBench convention: speedups, geometric means, fast_p, correctness rate.

    outcomes = [Outcome(correct=True, ms=0.8, eager_ms=1.2, compile_ms=1.0), ...]
    speedup(outcomes[0], "eager")            # 1.5: the kernel's own
    kept_speedup(outcomes[0], "compile")     # 1.25: of the better of the kernel and eager PyTorch
    fast_p(outcomes, 1.0, baseline="compile") # share of ALL tasks that are correct and > 1.0x torch.compile
    summarize(outcomes).to_json()

Pure functions, no I/O. A speedup exists only for a correct kernel timed on a GPU against a baseline
measured in the same run; interpreter times (a CPU) never give one, so every figure built from speedups
is None when no task has one. A kernel slower than eager PyTorch is not kept: a user keeps running PyTorch,
so in geomeans each task counts as the better of its kernel and eager (over eager, max(1, eager/kernel)).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Literal

Baseline = Literal["eager", "compile"]
BASELINES: tuple[str, ...] = ("eager", "compile")
FAST_P: tuple[float, ...] = (1.0, 1.5, 2.0)


@dataclass
class Outcome:
    """What scoring needs of one task: was a correct kernel found, and its time beside the baselines."""

    correct: bool
    ms: float | None = None  # the best correct kernel's time
    eager_ms: float | None = None
    compile_ms: float | None = None
    interpreted: bool = False  # Triton interpreter on a CPU: times, never speedups


def speedup(o: Outcome, baseline: Baseline = "eager") -> float | None:
    """baseline time / kernel time for a correct, GPU-timed kernel; None otherwise. Below 1.0 the kernel is
    slower than the baseline."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, not {baseline!r}")
    base = o.eager_ms if baseline == "eager" else o.compile_ms
    if o.correct and not o.interpreted and o.ms and o.ms > 0 and base and base > 0:
        return base / o.ms
    return None


def kernel_kept(o: Outcome) -> bool | None:
    """Whether the task's kernel is kept: correct and faster than eager PyTorch on a GPU. None when there are
    no GPU times to tell (the interpreter on a CPU)."""
    if o.interpreted:
        return None
    s = speedup(o, "eager")
    return s is not None and s > 1.0


def kept_speedup(o: Outcome, baseline: Baseline = "eager") -> float | None:
    """The speedup of what a user keeps, the better of the kernel and eager PyTorch, over the baseline: over
    eager max(1, eager/kernel) (1.0 without a correct kernel), over torch.compile compile / min(kernel,
    eager). None on a CPU, and over torch.compile without both times."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, not {baseline!r}")
    if o.interpreted:
        return None
    if baseline == "eager":
        return max(speedup(o, "eager") or 1.0, 1.0)
    kept_ms = min(t for t in (o.ms if kernel_kept(o) else None, o.eager_ms) if t) if o.eager_ms else None
    return o.compile_ms / kept_ms if o.compile_ms and kept_ms else None


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values given (None entries skipped); None when there are none."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def shape_speedups(checks: list) -> dict:
    """An evaluation's speedups at each of its shape sets (tools/results.py ShapeCheck, `--shapes`) over each
    baseline, None where a set has no GPU times, and their geomeans over the sets that have them:
    {"sets": [{"shapes", "ms", "eager_ms", "compile_ms", "vs_eager", "vs_compile"}], "timed": N,
    "geomean": {"eager", "compile"}}."""
    sets = []
    for c in checks:
        o = Outcome(c.verdict == "correct" and not c.fallback, c.ms, c.eager_ms, c.compile_ms)
        sets.append({"shapes": dict(c.shapes), "ms": c.ms, "eager_ms": c.eager_ms, "compile_ms": c.compile_ms,
                     **{f"vs_{b}": speedup(o, b) for b in BASELINES}})
    return {"sets": sets, "timed": sum(s["vs_eager"] is not None for s in sets),
            "geomean": {b: geomean(s[f"vs_{b}"] for s in sets) for b in BASELINES}}


def measurable(outcomes: list[Outcome], baseline: Baseline) -> bool:
    """True when at least one task has a GPU time and the baseline: speedup figures mean something."""
    key = "eager_ms" if baseline == "eager" else "compile_ms"
    return any(not o.interpreted and getattr(o, key) for o in outcomes)


def correctness_rate(outcomes: list[Outcome]) -> float | None:
    return sum(o.correct for o in outcomes) / len(outcomes) if outcomes else None


def fast_p(outcomes: list[Outcome], p: float, baseline: Baseline = "eager") -> float | None:
    """The share of all tasks whose kernel is correct and more than p times faster than the baseline.

    fast_0 is the correctness rate. None when no task has a measurable speedup (a CPU run)."""
    if not outcomes or not measurable(outcomes, baseline):
        return None
    fast = [s for s in (speedup(o, baseline) for o in outcomes) if s is not None and s > p]
    return len(fast) / len(outcomes)


@dataclass
class Summary:
    tasks: int
    correct: int
    correctness_rate: float | None
    kept: int | None = None  # tasks whose kernel is kept (correct and faster than eager); None on a CPU
    fast_p: dict[str, float | None] = field(default_factory=dict)  # "eager@1.5" -> share of tasks
    geomean: dict[str, float | None] = field(default_factory=dict)  # over all tasks, each the better of kernel/eager
    interpreted: bool = False  # every timed task ran in the interpreter: no speedup figures

    def to_json(self) -> dict:
        return asdict(self)


def summarize(outcomes: list[Outcome], ps: tuple[float, ...] = FAST_P) -> Summary:
    s = Summary(tasks=len(outcomes), correct=sum(o.correct for o in outcomes),
                correctness_rate=correctness_rate(outcomes),
                interpreted=any(o.interpreted for o in outcomes) and not any(
                    not o.interpreted and o.ms for o in outcomes))
    if measurable(outcomes, "eager"):
        s.kept = sum(bool(kernel_kept(o)) for o in outcomes)
    for b in BASELINES:
        ok = measurable(outcomes, b)
        for p in ps:
            s.fast_p[f"{b}@{p:g}"] = fast_p(outcomes, p, b)
        s.geomean[b] = geomean(kept_speedup(o, b) for o in outcomes) if ok else None
    return s
