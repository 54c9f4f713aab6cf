"""Issue 16's benchmark: shape-general kernels, verified over the shapes a model sees. Ten tasks of KernelBench's
level 1 and 2 (norms, reductions, GEMM + logsumexp, GEMM + pointwise epilogue), each at four shape sets of its
batch: its own, a smaller odd size, 1, and another size that is no power of two. `kernelwright batch` with no LLM
builds each task twice: "specialized", searched at the task's own shapes alone (the kernels of today), and
"general", whose every candidate is also verified at the other three sets (`shape_sets` in the task list: a
dynamic batch where the plan allows; a static candidate takes its generated fallback to the task's PyTorch code
there, with one warning, and the evaluator refuses it). Then in one process on the GPU, at every shape set: eager
PyTorch, torch.compile, the general kernel and the specialized one (at the other sets it takes its fallback: the
table says so), each output checked against eager's. Prints one row per task x shape set, the geomeans and the
issue's three targets: at the tuned shape the general kernel within 5% of the specialized one; at the other shapes
never slower than eager (2% allowed for timing noise); the geomean over all shapes at least 1.2x torch.compile.

    python benchmarks/shapes_bench.py --list [--kernelbench ../shared/kernelbench] [--tasks T1,T2] [--shapes ...]
    python benchmarks/shapes_bench.py --out OUT [--budget 3] [--build-seconds 300] [--max-seconds 540]

--tasks takes LEVEL/FILE entries of --kernelbench (level1/39_L2Norm_.py); --shapes NAME=V1,V2,... (as `kernelwright
optimize --shapes`) replaces the three derived sets of every task, the task's own set staying first. The builds go
to OUT/specialized and OUT/general (logs OUT/specialized.log, OUT/general.log) and resume where the last call
stopped; a task is timed once both its builds are done and each row is kept in OUT/rows.json, so calls of under
ten minutes continue each other until every row is there (other --shapes or tasks: another OUT, or delete
OUT/rows.json to time again). Every call writes the table of the rows so far to OUT/shapes.md and OUT/shapes.json.
GPU only: on a machine without CUDA anything but --list says so and exits 2.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import torch  # noqa: E402

import kernelbench_bench as kb  # noqa: E402
from llm_ops_bench import rel_err  # noqa: E402
from tools.score import geomean  # noqa: E402
from tools.task import TaskError, parse_shape_sets  # noqa: E402

# Issue 16's ten tasks of the dev set, all with a `batch_size` global. The dev set holds no plain softmax or
# log-softmax: the two GEMM + logsumexp tasks (log-softmax's normaliser) stand for them (66_Matmul_Dropout_Softmax
# draws random numbers in training mode and cannot be verified). Plans of today: 35, 38 and 39 lower to row kernels
# over the batch, 48 and 52 to column kernels over it and the three GEMMs (their M the batch) to dynamic GEMMs, the
# shape-general kinds; 34 (PyTorch's instance norm folds the batch into the channels) and 37 (a norm over the
# whole tensor, batch included) get no verified general kernel until the plans grow.
TASKS = (
    "level1/34_InstanceNorm.py",  # norms: per (sample, channel) over H x W
    "level1/35_GroupNorm_.py",  # per (sample, group of channels)
    "level1/38_L1Norm_.py",  # per row: x / mean(|x|)
    "level1/39_L2Norm_.py",  # per row: x / ||x||
    "level1/37_FrobeniusNorm_.py",  # reductions: the whole tensor, batch included
    "level1/48_Mean_reduction_over_a_dimension.py",  # over the middle dim
    "level1/52_Argmin_over_a_dimension.py",  # an index over the middle dim
    "level2/22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py",  # GEMM + logsumexp over the row
    "level2/64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU.py",
    "level2/86_Matmul_Divide_GELU.py",  # GEMM + pointwise epilogue
)
BATCH = "batch_size"  # KernelBench's batch global, from which the shape sets are derived
BUILDS = ("specialized", "general")
SAID = "kernelwright candidate:"  # how a generated candidate's fallback warning begins (agent/templates/program.py)
SEED = 0
TUNED_SLACK = 1.05  # target 1: the general kernel's time at the tuned shape over the specialized one's
NOISE = 1.02  # target 2: a fallback runs eager's code; its time may differ from eager's by this much in noise
COMPILE_TARGET = 1.2  # target 3: the geomean over all shapes of torch.compile's time over the general kernel's
MIN_TASK_S = 45.0  # a task is not started with less than this left of --max-seconds


class BadInput(Exception):
    """A task list or shape set that cannot be used; the message is one sentence."""


# --- tasks and shape sets ------------------------------------------------------------------------------------
@dataclass
class Task:
    entry: str  # LEVEL/FILE as --tasks names it
    path: Path
    sets: list[dict[str, int]]  # the task's own shape set first

    @property
    def name(self) -> str:
        return self.path.stem


def int_globals(path: Path) -> dict[str, int]:
    """The module-level integers of a task file (`batch_size = 8192 * 2` too), read without running it."""
    values: dict[str, int] = {}

    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
            a, b = value(node.left), value(node.right)
            if a is not None and b is not None and (not isinstance(node.op, ast.Pow) or 0 <= b <= 64):
                return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.Pow: a ** b,
                        ast.FloorDiv: a // b if b else None}[type(node.op)]
        return None

    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and (v := value(node.value)) is not None:
                    values[target.id] = v
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for t, e in zip(target.elts, node.value.elts):
                        if isinstance(t, ast.Name) and (v := value(e)) is not None:
                            values[t.id] = v
    return values


def derived_batches(b: int) -> list[int]:
    """The batches a task of batch `b` is measured at: b itself, a smaller odd size (about b/3), 1, and another
    size that is no power of two (about 3b/4, even; 3b + 3 under 16); each once, in that order."""
    out = [b]
    odd = b // 3 - (b // 3 + 1) % 2
    odd = odd if odd > 1 else b - 1 - b % 2  # the largest odd size under b
    if odd > 1:
        out.append(odd)
    if b > 1:
        out.append(1)
    other = 3 * b // 4 + 2 if b >= 16 else 3 * b + 3
    while other & (other - 1) == 0 or other in out:
        other += 2
    return out + [other]


def resolve(kernelbench: Path, entries: list[str], shapes: list[str] | None) -> list[Task]:
    """The tasks and their shape sets; BadInput in one sentence for a missing file, a name twice, a --shapes
    global a task lacks, or a task without `batch_size` when no --shapes is given."""
    try:
        given = parse_shape_sets(shapes)
    except TaskError as e:
        raise BadInput(str(e)) from None
    if any(v < 1 for s in given for v in s.values()):
        raise BadInput("--shapes takes NAME=V1,V2,... with values of at least 1.")
    if not entries:
        raise BadInput("--tasks names no task; give LEVEL/FILE entries such as level1/39_L2Norm_.py.")
    tasks: list[Task] = []
    for entry in entries:
        path = kernelbench / (entry if entry.endswith(".py") else entry + ".py")
        if Path(entry).is_absolute() or ".." in Path(entry).parts or not path.is_file():
            raise BadInput(f"There is no task file {entry} under {kernelbench}; --tasks takes LEVEL/FILE entries "
                           f"such as level1/39_L2Norm_.py.")
        if any(t.name == path.stem for t in tasks):
            raise BadInput(f"--tasks names {path.stem} twice.")
        try:
            own = int_globals(path)
        except (SyntaxError, UnicodeDecodeError, ValueError) as e:
            raise BadInput(f"Task file {entry} is not valid Python ({e}).") from None
        names = list(dict.fromkeys(k for s in given for k in s)) or [BATCH]
        missing = [n for n in names if n not in own]
        if missing:
            how = "" if given else "; give its shape sets with --shapes"
            raise BadInput(f"Task {entry} has no integer global {', '.join(missing)}{how}.")
        mine = {n: own[n] for n in names}
        others = given or [{BATCH: b} for b in derived_batches(own[BATCH])[1:]]
        tasks.append(Task(entry, path, [mine] + [s for s in others if {**mine, **s} != mine]))
    return tasks


def label(shapes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shapes.items())


def write_suites(out: Path, tasks: list[Task]) -> dict[str, Path]:
    """OUT/specialized.toml (the tasks as they are) and OUT/general.toml (each with its other shape sets), at the
    same paths in every call so that `batch --resume` accepts them."""
    out.mkdir(parents=True, exist_ok=True)
    suites = {}
    for build in BUILDS:
        text = ""
        for t in tasks:
            text += f"[[task]]\npath = {json.dumps(str(t.path.resolve()))}\n"
            if build == "general" and len(t.sets) > 1:
                sets = ", ".join("{" + ", ".join(f"{k} = {v}" for k, v in s.items()) + "}" for s in t.sets[1:])
                text += f"shape_sets = [{sets}]\n"
            text += "\n"
        suites[build] = out / f"{build}.toml"
        suites[build].write_text(text)
    return suites


def build(out: Path, tasks: list[Task], budget: int, seconds: float, time_limit: float) -> None:
    """Both builds, each resumed where it stopped, the unfinished ones sharing `seconds` equally."""
    suites = write_suites(out, tasks)
    deadline = time.monotonic() + seconds
    todo = [b for b in BUILDS if not kb.finished(out / b, [t.path for t in tasks])]
    for i, b in enumerate(todo):
        share = (deadline - time.monotonic()) / (len(todo) - i)
        if share >= kb.MIN_SLICE_S:
            code = kb.run_batch(suites[b], out / b, budget, share, no_knowledge=True, time_limit=time_limit)
            print(f"{b} build exited {code} (its log: {out / f'{b}.log'})", flush=True)


def built(folder: Path, task: Task) -> tuple[bool, Path | None]:
    """(whether the build of the task is done, its best.py where it has a verified kernel)."""
    state = folder / "batch.json"
    entry = json.loads(state.read_text())["tasks"].get(task.name, {}) if state.is_file() else {}
    best = folder / entry.get("dir", task.name) / "best.py"
    return entry.get("status") == "done", best if best.is_file() else None


# --- measuring ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    task: str
    shapes: dict  # the shape set, e.g. {"batch_size": 37}
    tuned: bool  # the task's own shapes, the ones the specialized kernel was searched at
    device: str = ""
    ms: dict = field(default_factory=dict)  # "eager", "compile" and BUILDS -> median ms
    fallback: dict = field(default_factory=dict)  # BUILDS -> whether it took its fallback to the task's code here
    err: dict = field(default_factory=dict)  # "compile" and BUILDS -> relative error against eager's output
    notes: list = field(default_factory=list)  # why a column is empty

    def key(self) -> tuple[str, str]:
        return self.task, label(self.shapes)


def measure(task: Task, index: int, kernels: dict[str, Path | None], dev: torch.device) -> Row:
    """One row: the task at its index-th shape set, every implementation built under the same seed from that set's
    init inputs, called on the same inputs, checked against eager's output and timed (on a GPU with L2 flushed
    before each call; the tests run it on a CPU, in the Triton interpreter)."""
    from tools.measure import no_grad_call
    from tools.profile import time_call
    from tools.results import TaskSpec
    from tools.task import import_file, load_task_module
    from tools.worker import build_candidate, build_reference
    shapes, cuda = task.sets[index], dev.type == "cuda"
    row = Row(task.name, shapes, index == 0, torch.cuda.get_device_name() if cuda else "cpu")
    tag = f"{task.name}_{index}"
    module = load_task_module(TaskSpec(str(task.path), task.name), False, shapes, f"kw_shapes_task_{tag}")
    init, model = build_reference(module, SEED, dev)
    torch.manual_seed(SEED + 1)
    with torch.device(dev):
        inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    torch._dynamo.reset()
    impls = {"eager": model, "compile": torch.compile(model)}
    for b, best in kernels.items():
        if best is None:
            row.notes.append(f"{b}: no verified kernel (see OUT/{b})")
            continue
        try:
            candidate = import_file(best, f"kw_shapes_{b}_{tag}")  # fresh: its fallback warns once per module
            for name, v in shapes.items():  # it carries the task's source: its globals follow the task's
                if hasattr(candidate, name):
                    setattr(candidate, name, v)
            impls[b] = build_candidate(candidate, init, SEED, dev)
        except Exception as e:
            row.notes.append(f"{b}: could not be built at these shapes ({_describe(e)})")
    with torch.no_grad():
        ref = model(*inputs)
    for name, fn in impls.items():
        try:
            with warnings.catch_warnings(record=True) as caught, torch.no_grad():
                warnings.simplefilter("always")
                out = fn(*inputs)
                if cuda:
                    torch.cuda.synchronize()
            if name in BUILDS:
                row.fallback[name] = any(str(w.message).startswith(SAID) for w in caught)
            if name != "eager":
                row.err[name] = rel_err(out, ref)
            del out
            row.ms[name] = time_call(no_grad_call(fn, inputs), dev).median_ms
        except Exception as e:
            row.notes.append(f"{name}: {_describe(e)}")
    del impls, model, inputs, ref
    torch._dynamo.reset()
    if cuda:
        torch.cuda.empty_cache()
    return row


def _describe(e: Exception) -> str:
    line = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {line[:200]}".rstrip(": ").replace("|", "/")


# --- the table ---------------------------------------------------------------------------------------------
@dataclass
class Target:
    what: str
    value: str  # the figure the target is judged on
    met: bool | None  # None: no rows to judge
    detail: str = ""  # the rows that miss it, or have no figures


def gm(rows: list[Row], num: str, den: str) -> float | None:
    return geomean(r.ms[num] / r.ms[den] for r in rows if r.ms.get(num) and r.ms.get(den))


def geomeans(rows: list[Row]) -> dict[str, float | None]:
    tuned, other = [r for r in rows if r.tuned], [r for r in rows if not r.tuned]
    return {"general over eager, all shapes": gm(rows, "eager", "general"),
            "general over torch.compile, all shapes": gm(rows, "compile", "general"),
            "general over eager, other shapes": gm(other, "eager", "general"),
            "specialized over eager, tuned shape": gm(tuned, "eager", "specialized"),
            "general time / specialized time, tuned shape": gm(tuned, "general", "specialized")}


def targets(rows: list[Row]) -> list[Target]:
    """Issue 16's three targets over the rows; a row without the figures a target needs counts against it."""
    out = []
    tuned = [r for r in rows if r.tuned]
    have = [r for r in tuned if r.ms.get("general") and r.ms.get("specialized")]
    ratios = {r.task: r.ms["general"] / r.ms["specialized"] for r in have}
    slow = [f"{t} {v:.2f}x" for t, v in ratios.items() if v > TUNED_SLACK]
    out.append(_target(f"at the tuned shape, the general kernel within {TUNED_SLACK - 1:.0%} of the specialized one",
                       f"worst {max(ratios.values()):.2f}x its time" if ratios else "-", tuned, have, slow))
    other = [r for r in rows if not r.tuned]
    have = [r for r in other if r.ms.get("general") and r.ms.get("eager")]
    ratios = {f"{r.task} {label(r.shapes)}": r.ms["general"] / r.ms["eager"] for r in have}
    slow = [f"{k} {v:.2f}x" for k, v in ratios.items() if v > NOISE]
    out.append(_target(f"at the other shapes, the general kernel never slower than eager ({NOISE - 1:.0%} noise)",
                       f"worst {max(ratios.values()):.2f}x eager's time" if ratios else "-", other, have, slow))
    value = gm(rows, "compile", "general")
    have = [r for r in rows if r.ms.get("general") and r.ms.get("compile")]
    slow = [] if value is None or value >= COMPILE_TARGET else [f"geomean {value:.2f}x"]
    out.append(_target(f"geomean over all shapes at least {COMPILE_TARGET}x torch.compile",
                       f"{value:.2f}x" if value else "-", rows, have, slow))
    return out


def _target(what: str, value: str, rows: list[Row], have: list[Row], misses: list[str]) -> Target:
    if not rows:
        return Target(what, value, None)
    lacking = [f"{r.task} {label(r.shapes)}" for r in rows if r not in have]
    detail = "; ".join(([f"missed by {', '.join(misses)}"] if misses else []) +
                       ([f"no figures for {', '.join(lacking)}"] if lacking else []))
    return Target(what, value, not misses and not lacking, detail)


def table(rows: list[Row]) -> list[str]:
    """Markdown lines: one row per task x shape set, then the geomeans, the targets and the notes."""
    def ms(v):
        return f"{v:.4f}" if v is not None else "-"

    def x(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    def flag(r, b):
        return "-" if b not in r.fallback else "**yes**" if r.fallback[b] else "no"

    head = ["task", "shape set", "eager ms", "compile ms", "general ms", "specialized ms",
            "general/specialized time (tuned)", "general vs eager", "general vs compile", "general fallback",
            "specialized fallback", "general err", "specialized err"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * 7 + "---|---|---:|---:|"]
    for r in rows:
        m = r.ms
        err = [f"{r.err[b]:.1e}" if b in r.err else "-" for b in BUILDS[::-1]]
        lines.append(f"| {r.task} | {label(r.shapes)}{' (tuned)' if r.tuned else ''} | "
                     + " | ".join(ms(m.get(k)) for k in ("eager", "compile", "general", "specialized"))
                     + f" | {x(m.get('general'), m.get('specialized')) if r.tuned else '-'}"
                     f" | {x(m.get('eager'), m.get('general'))} | {x(m.get('compile'), m.get('general'))}"
                     f" | {flag(r, 'general')} | {flag(r, 'specialized')} | {' | '.join(err)} |")
    lines += ["", "Speedups are the other's time over the general kernel's; a fallback runs the task's PyTorch code "
              "(eager) behind the kernel's guards; errors are against eager's output, ||out - eager|| / ||eager||.",
              ""]
    lines += [f"- geomean {k}: {v:.3f}" if v is not None else f"- geomean {k}: -" for k, v in geomeans(rows).items()]
    lines.append("")
    for t in targets(rows):
        verdict = "no rows" if t.met is None else "met" if t.met else "NOT met"
        lines.append(f"- target: {t.what}: {t.value}, {verdict}" + (f" ({t.detail})" if t.detail else ""))
    notes = [f"- {r.task} {label(r.shapes)}: {n}" for r in rows for n in r.notes]
    return lines + ([""] + notes if notes else [])


# --- running -----------------------------------------------------------------------------------------------
def load_rows(path: Path) -> dict[tuple[str, str], Row]:
    rows = [Row(**r) for r in json.loads(path.read_text())] if path.is_file() else []
    return {r.key(): r for r in rows}


def time_rows(out: Path, tasks: list[Task], deadline: float, dev: torch.device) -> tuple[list[Row], list[str]]:
    """The rows of `tasks` in order: those of earlier calls from OUT/rows.json, the rest timed here while time is
    left, each task once both its builds are done (each row saved at once). Returns them and the tasks left."""
    done = load_rows(out / "rows.json")
    left = []
    for t in tasks:
        if all((t.name, label(s)) in done for s in t.sets):
            continue
        status = {b: built(out / b, t) for b in BUILDS}
        if not all(finished for finished, _ in status.values()):
            left.append(f"{t.name} (build unfinished)")
            continue
        if time.monotonic() > deadline - MIN_TASK_S:
            left.append(f"{t.name} (no time left in this call)")
            continue
        for i, s in enumerate(t.sets):
            if (t.name, label(s)) not in done:
                try:
                    row = measure(t, i, {b: best for b, (_, best) in status.items()}, dev)
                except Exception as e:  # the task itself at these shapes (out of memory, say): tried again next call
                    left.append(f"{t.name} {label(s)} (could not be measured: {_describe(e)})")
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                done[row.key()] = row
                (out / "rows.json").write_text(json.dumps([asdict(r) for r in done.values()], indent=1))
                print(f"{t.name} {label(s)}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in row.ms.items()), flush=True)
    rows = [done[(t.name, label(s))] for t in tasks for s in t.sets if (t.name, label(s)) in done]
    return rows, left


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="output folder: OUT/specialized, OUT/general (the builds), OUT/rows.json, "
                                 "OUT/shapes.md, OUT/shapes.json")
    p.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"),
                   help="KernelBench's folder of levels (default ../shared/kernelbench)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated LEVEL/FILE entries (default: issue "
                                                            "16's ten, listed by --list)")
    p.add_argument("--shapes", action="append", metavar="NAME=V1,V2,...",
                   help="the shape sets besides each task's own, for every task (default: batch_size at a smaller "
                        "odd size, 1 and another size that is no power of two); repeat for more globals")
    p.add_argument("--budget", type=int, default=3, help="evaluations per task in each build (default 3)")
    p.add_argument("--build-seconds", type=float, default=300.0,
                   help="seconds of this call for the two builds, shared by the unfinished ones (default 300)")
    p.add_argument("--time-limit", type=float, default=240.0, metavar="S",
                   help="wall-clock seconds per task in a build (default 240)")
    p.add_argument("--max-seconds", type=float, default=540.0,
                   help="seconds for this call, builds and timing together (default 540); no task is timed past it")
    p.add_argument("--list", action="store_true", help="print the tasks and shape sets and run nothing (CPU)")
    args = p.parse_args(argv)
    started = time.monotonic()
    try:
        tasks = resolve(Path(args.kernelbench), [e.strip() for e in args.tasks.split(",") if e.strip()], args.shapes)
    except BadInput as e:
        print(f"shapes_bench: {e}", file=sys.stderr)
        return 2
    if args.list:
        for t in tasks:
            print(f"{t.entry}: {label(t.sets[0])} (tuned); " + "; ".join(label(s) for s in t.sets[1:]))
        return 0
    if not torch.cuda.is_available():
        print("shapes_bench times kernels on a CUDA GPU and this machine has none; --list shows what it would run.",
              file=sys.stderr)
        return 2
    if not args.out or args.budget < 1:
        print("shapes_bench: give --out OUT and a --budget of at least 1.", file=sys.stderr)
        return 2
    out = Path(args.out)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # as the evaluator runs fp32
    build(out, tasks, args.budget, min(args.build_seconds, args.max_seconds), args.time_limit)
    rows, left = time_rows(out, tasks, started + args.max_seconds, torch.device("cuda"))
    devices = sorted({r.device for r in rows}) or [torch.cuda.get_device_name()]
    lines = [f"# Shape-general kernels (issue 16), fp32, {', '.join(devices)}, torch {torch.__version__}", ""]
    lines += table(rows) + (["", f"Not timed yet (call again): {', '.join(left)}."] if left else [])
    print("\n".join(lines))
    (out / "shapes.md").write_text("\n".join(lines) + "\n")
    (out / "shapes.json").write_text(json.dumps({
        "devices": devices, "torch": torch.__version__, "rows": [asdict(r) for r in rows],
        "geomeans": geomeans(rows), "targets": [asdict(t) for t in targets(rows)], "not_timed": left}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
