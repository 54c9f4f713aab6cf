"""A template's candidates side by side: for each task file, the variants the template offers (by index) and
parameter sets over them, rendered and run beside eager PyTorch (and torch.compile with --compile) in one
process, each with its error against a float64 run of the task's Model. On a GPU it prints their times; on a
CPU, with the Triton interpreter (TRITON_INTERPRET=1), the errors alone: interpreter times are no GPU figures,
and with TRITON_INTERPRET=1 set it times nothing on a GPU either.

    python benchmarks/variants_bench.py TASK.py [TASK.py ...] --template gemm [--variants 0,1,2]
        [--set wide=BLOCK_M:128,BLOCK_N:64] [--set narrow@1=num_stages:3] [--compile] [--reps 2] [--small]
        [--kernels]

--variants picks the template's variants by index (default 0,1,2; one past the last is left out); each --set
NAME[@I]=KEY:VALUE,... is variant I (default 0) with those parameters replaced (a number, or a word; KEY
kernels.J.KEY for the program's kernel J, e.g. kernels.1.SPLIT:8). --small
runs the task at its SMALL_SHAPES; --kernels splits each row's GPU time over its kernels (torch.profiler,
their mean ms a call, the three longest). A render the template refuses shows its reason in the table, a candidate
that fails shows its error's first line, and one that fell back to the task's PyTorch code (its shape guard)
is marked so: its time is PyTorch's. Each round (--reps) times every row once more, in the same order.
Exit codes: 0; 2 for bad arguments (a missing task file, an unknown template, one that does not match a task,
a malformed --set).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from agent.analysis import analyze, load_task  # noqa: E402
from agent.templates import BY_NAME  # noqa: E402
from llm_ops_bench import rel_err  # noqa: E402
from tools.gpu_checks import activity, kernel_times  # noqa: E402
from tools.profile import time_call  # noqa: E402
from tools.task import import_file  # noqa: E402

FALLBACK = "kernelwright candidate: the Triton kernels need"  # the warning of a candidate's shape guard


@dataclass
class Row:
    task: str
    label: str
    params: dict = field(default_factory=dict)
    times: list = field(default_factory=list)  # ms, one a round (GPU only)
    kernels: list = field(default_factory=list)  # (kernel name, mean ms a call), longest first (--kernels)
    error: float | None = None  # relative to the float64 run, in norm
    note: str = ""  # why it has no figures, or that it ran PyTorch's code


def parse_set(text: str) -> tuple[str, int, dict]:
    """NAME[@I]=KEY:VALUE,... as (name, variant index, overrides); ValueError saying what is malformed."""
    head, sep, body = text.partition("=")
    name, _, index = head.partition("@")
    pairs = [p.partition(":") for p in body.split(",") if p]
    if not sep or not name or not pairs or any(not k or not colon for k, colon, _ in pairs) or \
            (index and not index.isdigit()):
        raise ValueError(f"--set {text!r}: give NAME[@I]=KEY:VALUE,... (e.g. wide=BLOCK_N:64,num_warps:4)")
    return name, int(index or 0), {k: int(v) if v.lstrip("-").isdigit() else v for k, _, v in pairs}


def candidates(variants: list[dict], picks: list[int], sets: list[tuple[str, int, dict]]) -> list[tuple]:
    """(label, parameters) of each pick that exists and each --set over its variant. A key kernels.J.KEY sets
    KEY of the program's kernel J, not the template's main one (params["kernels"])."""
    out = [(f"variant {i}", variants[i]) for i in picks if i < len(variants)]
    for name, i, over in sets:
        if i >= len(variants):
            raise ValueError(f"--set {name}@{i}: the template offers {len(variants)} variants")
        params = {**variants[i], **{k: v for k, v in over.items() if not k.startswith("kernels.")}}
        for key, v in ((k, v) for k, v in over.items() if k.startswith("kernels.")):
            j, dot, inner = key.removeprefix("kernels.").partition(".")
            if not (j.isdigit() and dot and inner):
                raise ValueError(f"--set {name}: give kernels.J.KEY:VALUE, not {key}")
            kernels = dict(params.get("kernels", {}))
            kernels[j] = {**kernels.get(j, {}), inner: v}
            params["kernels"] = kernels
        out.append((name, params))
    return out


def rows_for(task: Path, template, picks: list[int], sets: list, small: bool, compiled: bool, folder: Path,
             device: torch.device) -> list[tuple[Row, object]]:
    """Each row of a task, its error measured, with the call to time (None where it has no figures)."""
    a = analyze(str(task), small=small, name=task.stem)
    if not template.match(a):
        raise ValueError(f"the {template.NAME} template does not match {task}")
    module, _, _ = load_task(str(task), small)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    with torch.no_grad():  # a copy in float64: the model keeps its own dtypes
        golden = copy.deepcopy(model).double()(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                                                 else x for x in inputs])
    found = [(Row(task.stem, "eager"), model)]
    if compiled:
        found.append((Row(task.stem, "torch.compile"), torch.compile(model)))
    for n, (label, params) in enumerate(candidates(template.variants(a), picks, sets)):
        row = Row(task.stem, label, params)
        try:
            path = folder / f"{task.stem}_{n}.py"
            path.write_text(template.render(a, params))
            cand = import_file(path, f"variants_bench_{task.stem}_{n}").ModelNew(*module.get_init_inputs()).to(device)
            cand.load_state_dict(model.state_dict(), strict=False)
            found.append((row, cand))
        except Exception as e:  # a refused render, or a candidate that cannot be built
            row.note = f"{type(e).__name__}: {first_line(e)}"
            found.append((row, None))
    calls = [(row, None if fn is None else lambda fn=fn: fn(*inputs)) for row, fn in found]
    return [(row, call if call is not None and _checked(row, call, golden) else None) for row, call in calls]


def _checked(row: Row, call, golden: torch.Tensor) -> bool:
    """Whether a row ran: its error against the float64 run recorded, and a fallback to the task's PyTorch code
    noted; where it failed, the error's first line."""
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call()
        except Exception as e:
            row.note = f"{type(e).__name__}: {first_line(e)}"
            return False
    row.error = rel_err(out, golden)
    if any(FALLBACK in str(w.message) for w in caught):
        row.note = "ran PyTorch's code"
    return True


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else "no message")[:200]


def kernel_split(call, calls: int = 20) -> list[tuple[str, float]]:
    """The GPU kernels `call` launches, each under its own name (tools/gpu_checks.kernel_times; copies and fills
    as "other") with its mean ms a call over `calls` calls, longest first."""
    with torch.no_grad():
        call()  # compiled and warm before the profiler starts
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
    work = activity(prof.events())
    times = kernel_times(work, {w.name for w in work if w.kind == "kernel"})
    return [(name, ms / calls) for name, ms in times.items()]


def table(rows: list[Row], gpu: bool) -> str:
    head = "| task | candidate | " + ("ms | " if gpu else "") + "error vs float64 | parameters, or why no figures |"
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        ms = ", ".join(f"{t:.4f}" for t in r.times) or "–"
        what = r.note or ", ".join(f"{k}={v}" for k, v in r.params.items())
        if r.kernels:
            what += "; kernels: " + ", ".join(f"{name[:40]} {kernel_ms:.4f}" for name, kernel_ms in r.kernels[:3])
        if r.note and r.params:
            what += " (" + ", ".join(f"{k}={v}" for k, v in r.params.items()) + ")"
        error = "–" if r.error is None else f"{r.error:.2e}"
        lines.append(f"| {r.task} | {r.label} | " + (f"{ms} | " if gpu else "") + f"{error} | {what} |")
    return "\n".join(lines) + "\n"


def add_picks(p: argparse.ArgumentParser, variants: str) -> None:
    """The arguments that pick a template's candidates over task files (this bench's and sass_bench.py's), with
    `variants` the default indices."""
    p.add_argument("tasks", nargs="+", help="task files (class Model, get_inputs, get_init_inputs)")
    p.add_argument("--template", required=True, help=f"the template: {', '.join(sorted(BY_NAME))}")
    p.add_argument("--variants", default=variants, help=f"the template's variants by index (default {variants})")
    p.add_argument("--set", action="append", default=[], metavar="NAME[@I]=KEY:VALUE,...",
                   help="variant I (default 0) with parameters replaced; again for each")


def picked(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[object, list[int], list]:
    """The template, variant indices and parameter sets add_picks' arguments name; p.error (exit 2, one
    sentence) for an unknown template, a missing task file or a malformed --variants or --set."""
    template = BY_NAME.get(args.template)
    if template is None:
        p.error(f"no template {args.template!r}; the templates: {', '.join(sorted(BY_NAME))}")
    missing = [t for t in args.tasks if not Path(t).is_file()]
    if missing:
        p.error(f"no task file {missing[0]}")
    try:
        picks = [int(i) for i in args.variants.split(",") if i]
        sets = [parse_set(s) for s in args.set]
    except ValueError as e:
        example = p.get_default("variants")
        p.error(str(e) if "--set" in str(e) else f"--variants {args.variants}: give indices, e.g. {example}")
    return template, picks, sets


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_picks(p, "0,1,2")
    p.add_argument("--compile", action="store_true", help="time torch.compile too (GPU)")
    p.add_argument("--reps", type=int, default=1, help="rounds of timing, every row once a round (default 1)")
    p.add_argument("--small", action="store_true", help="the tasks at their SMALL_SHAPES")
    p.add_argument("--kernels", action="store_true", help="each row's GPU time split over its kernels (GPU)")
    args = p.parse_args()
    template, picks, sets = picked(p, args)
    gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"  # interpreted: no GPU times
    device = torch.device("cuda" if gpu else "cpu")
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # as the evaluator's fp32
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for task in args.tasks:
            try:
                found += rows_for(Path(task), template, picks, sets, args.small, args.compile, Path(folder), device)
            except ValueError as e:
                p.error(str(e))
            print(f"{Path(task).stem}: {len(found)} rows so far", file=sys.stderr, flush=True)
        for _ in range(args.reps if gpu else 0):
            for row, call in found:
                if call is not None:
                    with torch.no_grad():
                        row.times.append(time_call(call, device).median_ms)
        for row, call in found if gpu and args.kernels else []:
            if call is not None:
                row.kernels = kernel_split(call)
    rows = [row for row, _ in found]
    print(table(rows, gpu) + ("" if gpu else "\nNo GPU (or TRITON_INTERPRET=1): errors from the Triton interpreter, "
                                            "no times" + (" and no kernels" if args.kernels else "") + ".\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
