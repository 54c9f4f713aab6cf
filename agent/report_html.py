"""A batch's results: one TaskRow per task, written as DIR/results.json, DIR/results.csv and DIR/report.html.

    row = row_from_report("gelu", "tasks/01_gelu.py", report_json, folder, batch_dir, seconds, baselines)
    write_results(batch_dir, "tasks/suite.toml", rows)
    print("\\n".join(summary_lines(rows, batch_dir)))

report.html is one self-contained page (inline CSS, JS and SVG; it loads nothing): the suite's scores, a
sortable table, and plots of speedup per task (over eager and over torch.compile), achieved time against
the speed-of-light floor, and each task's best so far against evaluations. Times from the Triton
interpreter on a CPU are labelled as such and never turned into speedups.
"""
from __future__ import annotations

import csv
import html
import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import jinja2

from tools.score import FAST_P, Outcome, kernel_kept, speedup, summarize

TEMPLATE = Path(__file__).parent / "prompts" / "report.html.j2"
CSV_COLUMNS = ("task", "status", "verdict", "kept", "eager_ms", "compile_ms", "best_ms", "floor_ms", "speedup_vs_eager",
               "speedup_vs_compile", "floor_fraction", "evaluations", "seconds", "best_kernel", "interpreted",
               "verified_on", "device", "stop_reason")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


@dataclass
class TaskRow:
    task: str
    path: str
    status: str  # done | pending | running | interrupted
    verdict: str = ""  # correct; else the commonest failing verdict, "error" (task unusable), "none"
    reason: str = ""
    evaluations: int = 0
    correct: int = 0
    best_ms: float | None = None  # interpreter time when `interpreted`
    eager_ms: float | None = None
    compile_ms: float | None = None
    floor_ms: float | None = None
    floor_fraction: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    kept: bool | None = None  # the kernel is kept: correct and faster than eager (None: no GPU times to tell)
    interpreted: bool = False
    verified_on: str = ""  # the best kernel's verdict kind: "gpu" or "interpreter" (tools/results.py VERIFIED_ON)
    device: str = ""
    suspicious: bool = False
    seconds: float = 0.0
    best_kernel: str | None = None  # relative to the batch folder
    stop_reason: str = ""
    progress: list[list[float]] = field(default_factory=list)  # [evaluations, best ms so far]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "TaskRow":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def unfinished(cls, task: str, path: str, entry: dict) -> "TaskRow":
        return cls(task, path, entry.get("status", "pending"), evaluations=entry.get("evaluated", 0),
                   seconds=entry.get("seconds", 0.0))

    @classmethod
    def failed(cls, task: str, path: str, verdict: str, reason: str, seconds: float) -> "TaskRow":
        return cls(task, path, "done", verdict, reason, seconds=seconds)

    def outcome(self) -> Outcome:
        return Outcome(self.verdict == "correct", self.best_ms, self.eager_ms, self.compile_ms, self.interpreted)

    def brief(self) -> str:
        why = f": {self.reason[:200]}" if self.reason else ""
        if self.verdict == "none":
            return f"no candidate was evaluated{why}"
        if self.verdict == "error":
            return f"error{why}"
        if self.verdict != "correct":
            return f"no correct kernel (mostly {self.verdict}){why}"
        if self.kept is False and self.speedup_vs_eager is not None:
            return (f"correct but slower than eager PyTorch ({self.speedup_vs_eager:.2f}x): no faster kernel; keep "
                    f"PyTorch ({self.evaluations} evaluated, {self.seconds:.0f} s)")
        if self.speedup_vs_eager is not None:
            figure = f"{self.speedup_vs_eager:.2f}x eager" + (
                f", {self.speedup_vs_compile:.2f}x torch.compile" if self.speedup_vs_compile else "")
        else:
            figure = f"{self.best_ms:.4g} ms" + (" in the Triton interpreter" if self.interpreted else "")
        kind = f", {self.verified_on} verdict" if self.verified_on else ""
        return f"correct, {figure} ({self.evaluations} evaluated, {self.seconds:.0f} s{kind})"


def row_from_report(task: str, path: str, report: dict, folder: Path, root: Path, seconds: float,
                    baselines=None) -> TaskRow:
    """The row of a finished optimize run, from its report.json (and the run's baselines when no kernel
    was correct, so the eager time is still shown)."""
    best, counts = report.get("best"), report.get("counts") or {}
    nodes = sorted((n for n in report["lineage"]["nodes"] if n["status"] == "evaluated"), key=lambda n: n["id"])
    curve, low = [], None
    for k, n in enumerate(nodes, 1):
        if n["verdict"] == "correct" and n.get("ms"):
            low = n["ms"] if low is None else min(low, n["ms"])
        if low is not None:
            curve.append([k, low])
    failing = Counter({v: c for v, c in counts.items() if v not in ("correct", "proposed") and c})
    row = TaskRow(task, path, "done", "correct" if best else (failing.most_common(1)[0][0] if failing else "none"),
                  reason="" if best else report.get("failure") or report.get("stop_reason", ""), evaluations=len(nodes),
                  correct=counts.get("correct", 0), seconds=seconds, stop_reason=report.get("stop_reason", ""),
                  device=report.get("device", ""), progress=curve)
    if baselines is not None:
        row.eager_ms, row.compile_ms = baselines.eager_ms, baselines.compile_ms
    if best:
        row.best_ms, row.floor_ms, row.floor_fraction = best.get("ms"), best.get("floor_ms"), best.get("floor_fraction")
        row.eager_ms = best.get("eager_ms") or row.eager_ms
        row.compile_ms = best.get("compile_ms") or row.compile_ms
        row.interpreted, row.device = bool(best.get("interpreted")), best.get("device") or row.device
        row.suspicious = bool(best.get("suspicious"))
        row.verified_on = best.get("verified_on") or ""
        row.speedup_vs_eager, row.speedup_vs_compile = speedup(row.outcome()), speedup(row.outcome(), "compile")
        kernel = folder / "best.py"
        row.best_kernel = str(kernel.relative_to(root)) if kernel.is_file() else None
    elif device_is_cpu(row.device):
        row.interpreted = True
    row.kept = kernel_kept(row.outcome())
    return row


def device_is_cpu(device: str) -> bool:
    return device.startswith("cpu")


# --- files ----------------------------------------------------------------------------------------------
def results_json(suite: str, rows: list[TaskRow]) -> dict:
    finished = [r for r in rows if r.status == "done"]
    return {"suite": suite, "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
            "device": next((r.device for r in finished if r.device), ""),
            "interpreted": any(r.interpreted for r in finished),
            "finished": len(finished), "total": len(rows),
            "summary": summarize([r.outcome() for r in finished]).to_json(),
            "tasks": [r.to_json() for r in rows]}


def write_results(out: Path, suite: str, rows: list[TaskRow]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = results_json(suite, rows)
    _replace(out / "results.json", json.dumps(data, indent=1))
    with open(out / "results.csv.tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow(["" if getattr(r, c) is None else getattr(r, c) for c in CSV_COLUMNS])
    (out / "results.csv.tmp").replace(out / "results.csv")
    _replace(out / "report.html", render_report(data))


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def summary_lines(rows: list[TaskRow], out: Path) -> list[str]:
    """The suite's scores in the KernelBench convention, for the terminal."""
    finished = [r for r in rows if r.status == "done"]
    s = summarize([r.outcome() for r in finished])
    lines = [f"{len(finished)}/{len(rows)} tasks finished; {s.correct} with a correct kernel "
             f"(correctness rate {_pct(s.correctness_rate)})."]
    if not finished:
        lines.append("No task finished, so no fast_p or geomeans are reported.")
    elif s.interpreted:
        lines.append("Times are Triton-interpreter times on a CPU: no speedups, fast_p or geomeans are reported.")
    else:
        lines.append("fast_p (correct and faster than p x baseline, share of all tasks):")
        lines.append("              " + "".join(f"p={p:<7g}" for p in FAST_P))
        for b, label in (("eager", "vs eager"), ("compile", "vs compile")):
            lines.append(f"  {label:<12}" + "".join(f"{_pct(s.fast_p[f'{b}@{p:g}']):<9}" for p in FAST_P))
        lines.append(f"{s.kept} of {s.correct} correct kernels are faster than eager PyTorch and kept; every other "
                     f"task keeps PyTorch.")
        lines.append(f"geomean speedup, each task the better of its kernel and eager PyTorch: {_x(s.geomean['eager'])} "
                     f"over eager, {_x(s.geomean['compile'])} over torch.compile.")
    lines.append(f"wrote results.json, results.csv and report.html in {out}")
    return lines


# --- the page -------------------------------------------------------------------------------------------
def render_report(data: dict) -> str:
    rows = [TaskRow.from_json(t) for t in data["tasks"]]
    done = [r for r in rows if r.status == "done"]
    interp = data["interpreted"]
    s = data["summary"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    plots = []
    if interp:
        plots.append(("Best kernel's time per task: Triton interpreter on a CPU (ms, not GPU times)",
                      bars([(r.task, [r.best_ms]) for r in done], ["interpreter ms"], log=False, unit=" ms",
                           ref=None)))
    else:
        plots.append(("Speedup of the best kernel per task (log scale; 1.0x is the baseline)",
                      bars([(r.task, [r.speedup_vs_eager, r.speedup_vs_compile]) for r in done],
                           ["over eager PyTorch", "over torch.compile"], log=True, unit="x", ref=1.0)))
        plots.append(("Achieved time against the speed-of-light floor (log-log; on the diagonal is the floor)",
                      roofline([(r.task, r.floor_ms, r.best_ms) for r in done])))
    curves = [(r.task, [(k, (r.eager_ms / ms) if not interp and r.eager_ms else ms) for k, ms in r.progress])
              for r in done if r.progress]
    plots.append(("Best so far against evaluations: " + ("interpreter ms, lower is better" if interp else
                                                           "speedup over eager, higher is better"),
                  lines_plot(curves, "evaluations", "ms (interpreter)" if interp else "speedup over eager",
                             log=True)))
    table = [{"cells": _cells(r, interp), "status": r.status, "verdict": r.verdict} for r in rows]
    fast = [{"label": label, "cells": [_pct(s["fast_p"].get(f"{b}@{p:g}")) for p in FAST_P]}
            for b, label in (("eager", "vs eager"), ("compile", "vs torch.compile"))]
    return env.get_template(TEMPLATE.name).render(
        data=data, summary=s, interpreted=interp, fast=fast, ps=[f"{p:g}" for p in FAST_P], plots=plots,
        headers=_headers(interp), table=table, correctness=_pct(s["correctness_rate"]),
        geomean={k: _x(v) for k, v in s["geomean"].items()})


def _headers(interp: bool) -> list[str]:
    if interp:
        return ["task", "status", "verdict", "best ms (interpreter)", "eager ms (CPU)", "evaluations", "seconds",
                "best kernel"]
    return ["task", "status", "verdict", "kept", "best ms", "eager ms", "compile ms", "floor ms", "x eager",
            "x compile", "of floor", "evaluations", "seconds", "best kernel"]


def _cell(value, text: str | None = None) -> dict:
    return {"v": "" if value is None else value, "text": "–" if value is None else (text or str(value)),
            "href": None}


def _cells(r: TaskRow, interp: bool) -> list[dict]:
    ms = lambda v: _cell(v, f"{v:.4g}" if v is not None else None)  # noqa: E731
    verdict = r.verdict + (" (suspicious)" if r.suspicious else "") + (
        " (interpreter verdict)" if r.verdict == "correct" and r.verified_on == "interpreter" else "")
    head = [_cell(r.task), _cell(r.status), _cell(r.verdict or None, verdict)]
    link = {**_cell(r.best_kernel, r.best_kernel), "href": r.best_kernel}
    tail = [_cell(r.evaluations), _cell(round(r.seconds, 1), f"{r.seconds:.0f}"), link]
    if interp:
        return head + [ms(r.best_ms), ms(r.eager_ms)] + tail
    x = lambda v: _cell(v, f"{v:.2f}x" if v is not None else None)  # noqa: E731
    frac = _cell(r.floor_fraction, f"{r.floor_fraction:.0%}" if r.floor_fraction is not None else None)
    return head + [_cell(kept_text(r)), ms(r.best_ms), ms(r.eager_ms), ms(r.compile_ms), ms(r.floor_ms),
                   x(r.speedup_vs_eager), x(r.speedup_vs_compile), frac] + tail


def kept_text(r: TaskRow) -> str | None:
    """What a user keeps for the task: its kernel, or PyTorch (no correct kernel, or none faster than eager)."""
    if r.status != "done" or r.kept is None and r.verdict == "correct":
        return None
    return "kernel" if r.kept else "PyTorch"


# --- SVG plots ------------------------------------------------------------------------------------------
def _scale(lo: float, hi: float, a: float, b: float, log: bool):
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = (hi - lo) or 1.0
    return lambda v: a + (b - a) * (((math.log10(v) if log else v) - lo) / span)


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if not log:
        step = 10 ** math.floor(math.log10((hi - lo) or 1.0))
        step *= 2 if (hi - lo) / step > 6 else 1
        return [lo + i * step for i in range(int((hi - lo) / step) + 1)]
    out = [m * 10 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
           for m in (1, 2, 5) if lo <= m * 10 ** e <= hi]
    if len(out) >= 3:
        return out
    return [float(f"{lo * (hi / lo) ** (i / 4):.2g}") for i in range(5)]  # a narrow range: five even steps


def _range(values: list[float], log: bool, extra: list[float] = ()) -> tuple[float, float]:
    vals = [v for v in list(values) + list(extra) if v is not None and (v > 0 or not log)]
    lo, hi = (min(vals), max(vals)) if vals else (1.0, 10.0)
    if log:
        return lo / 1.25, hi * 1.25
    return min(lo, 0.0), hi * 1.1 or 1.0


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _empty(message: str) -> str:
    return (f'<svg class="plot" viewBox="0 0 640 60" role="img"><text x="10" y="35" class="note">'
            f'{html.escape(message)}</text></svg>')


def bars(items: list[tuple[str, list[float | None]]], series: list[str], log: bool, unit: str,
         ref: float | None) -> str:
    """Horizontal grouped bars, one group per task, one bar per series."""
    values = [v for _, vs in items for v in vs if v is not None and v > 0]
    if not values:
        return _empty("no figures to plot yet")
    lo, hi = _range(values, log, [ref] if ref else [])
    left, width, row_h = 180, 640, 8 + 12 * len(series)
    height = 40 + row_h * len(items) + 24
    sx = _scale(lo, hi, left, width - 20, log)
    base = sx(ref) if ref else left
    out = [f'<svg class="plot bars" viewBox="0 0 {width} {height}" role="img">']
    for t in _ticks(lo, hi, log):
        out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="30" y2="{height - 24}" class="grid"/>'
                   f'<text x="{sx(t):.1f}" y="{height - 8}" class="tick" text-anchor="middle">{_fmt(t)}{unit}</text>')
    for i, (name, vs) in enumerate(items):
        y = 34 + i * row_h
        out.append(f'<text x="{left - 6}" y="{y + row_h / 2 + 3:.1f}" class="label" text-anchor="end">'
                   f'{html.escape(name[:26])}</text>')
        for j, v in enumerate(vs):
            if v is None or v <= 0:
                continue
            x0, x1 = sorted((base, sx(v)))
            out.append(f'<rect class="bar" x="{x0:.1f}" y="{y + 2 + 12 * j}" width="{max(x1 - x0, 1):.1f}" height="10" '
                       f'fill="{COLOURS[j]}"><title>{html.escape(name)}: {_fmt(v)}{unit} {html.escape(series[j])}'
                       f'</title></rect>')
    if ref:
        out.append(f'<line x1="{base:.1f}" x2="{base:.1f}" y1="30" y2="{height - 24}" class="ref"/>')
    out += [f'<rect x="{left + 150 * j}" y="8" width="10" height="10" fill="{COLOURS[j]}"/>'
            f'<text x="{left + 14 + 150 * j}" y="17" class="tick">{html.escape(s)}</text>' for j, s in enumerate(series)]
    return "\n".join(out + ["</svg>"])


def roofline(points: list[tuple[str, float | None, float | None]]) -> str:
    """Achieved time (y) against the floor (x), log-log, with lines at 100%, 50% and 10% of the floor."""
    pts = [(n, f, a) for n, f, a in points if f and a]
    if not pts:
        return _empty("no speed-of-light floor figures")
    lo, hi = _range([f for _, f, _ in pts] + [a for _, _, a in pts], True)
    w = h = 420
    sx, sy = _scale(lo, hi, 60, w - 20, True), _scale(lo, hi, h - 40, 20, True)
    out = [f'<svg class="plot roofline" viewBox="0 0 {w} {h}" role="img">']
    for t in _ticks(lo, hi, True):
        out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="20" y2="{h - 40}" class="grid"/>'
                   f'<text x="{sx(t):.1f}" y="{h - 24}" class="tick" text-anchor="middle">{_fmt(t)}</text>'
                   f'<line x1="60" x2="{w - 20}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
                   f'<text x="56" y="{sy(t) + 3:.1f}" class="tick" text-anchor="end">{_fmt(t)}</text>')
    for k, label in ((1, "floor"), (2, "50%"), (10, "10%")):
        out.append(f'<line x1="{sx(lo):.1f}" y1="{sy(lo * k):.1f}" x2="{sx(hi / k):.1f}" y2="{sy(hi):.1f}" '
                   f'class="ref"/><text x="{sx(hi / k) - 4:.1f}" y="{sy(hi) + 12:.1f}" class="tick" '
                   f'text-anchor="end">{label}</text>')
    for i, (name, f, a) in enumerate(pts):
        out.append(f'<circle class="point" cx="{sx(f):.1f}" cy="{sy(a):.1f}" r="5" fill="{COLOURS[i % 10]}">'
                   f'<title>{html.escape(name)}: {_fmt(a)} ms achieved, floor {_fmt(f)} ms ({f / a:.0%})</title>'
                   f'</circle>')
        if len(pts) <= 12:
            out.append(f'<text x="{sx(f) + 7:.1f}" y="{sy(a) + 3:.1f}" class="tick">{html.escape(name[:20])}</text>')
    out.append(f'<text x="{w / 2}" y="{h - 6}" class="axis" text-anchor="middle">floor (ms)</text>'
               f'<text x="14" y="{h / 2}" class="axis" transform="rotate(-90 14 {h / 2})" text-anchor="middle">'
               f'achieved (ms)</text>')
    return "\n".join(out + ["</svg>"])


def lines_plot(curves: list[tuple[str, list[tuple[float, float]]]], xlabel: str, ylabel: str, log: bool) -> str:
    """One polyline per task (a step each time its best improves), with a legend."""
    curves = [(n, pts) for n, pts in curves if pts]
    if not curves:
        return _empty("no correct kernel yet")
    xs = [x for _, pts in curves for x, _ in pts]
    lo, hi = _range([y for _, pts in curves for _, y in pts], log)
    w, h, legend = 640, 320, 150
    sx = _scale(0, max(xs), 60, w - legend - 10, False)
    sy = _scale(lo, hi, h - 40, 20, log)
    out = [f'<svg class="plot curves" viewBox="0 0 {w} {h}" role="img">']
    for t in _ticks(lo, hi, log):
        out.append(f'<line x1="60" x2="{w - legend - 10}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
                   f'<text x="56" y="{sy(t) + 3:.1f}" class="tick" text-anchor="end">{_fmt(t)}</text>')
    for t in _ticks(0, max(xs), False):
        out.append(f'<text x="{sx(t):.1f}" y="{h - 24}" class="tick" text-anchor="middle">{_fmt(t)}</text>')
    for i, (name, pts) in enumerate(curves):
        steps = [p for (x0, y0), (x1, _) in zip(pts, pts[1:]) for p in ((x0, y0), (x1, y0))] + [pts[-1]]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in steps)
        colour = COLOURS[i % 10]
        out.append(f'<polyline class="curve" points="{path}" fill="none" stroke="{colour}" stroke-width="2">'
                   f'<title>{html.escape(name)}</title></polyline>')
        if i < 18:
            out.append(f'<text x="{w - legend}" y="{24 + 14 * i}" class="tick" style="fill:{colour}">'
                       f'{html.escape(name[:22])}</text>')
    out.append(f'<text x="{(w - legend) / 2}" y="{h - 6}" class="axis" text-anchor="middle">{xlabel}</text>'
               f'<text x="14" y="{h / 2}" class="axis" transform="rotate(-90 14 {h / 2})" text-anchor="middle">'
               f'{html.escape(ylabel)}</text>')
    return "\n".join(out + ["</svg>"])
