"""`kernelwright eval TASK CANDIDATE`: one candidate, one verdict. Exit 0 correct, 1 not, 2 bad input."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tools.results import MAX_DEEP_SETS, VERIFIED_ON, EvalJob, EvalResult, TaskSpec
from tools.task import TaskError, add_shapes_option, check_spec, parse_shape_sets

KERNELS_SHOWN = 10  # the largest kernels eval lists by device time

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers) -> None:
    p = subparsers.add_parser("eval", help="verify and time one candidate kernel against a task",
                              description="Verify a candidate (a file defining ModelNew) against a task (a "
                                          "KernelBench-format file) in a sandboxed worker, then time it.")
    p.add_argument("task", help="task file: class Model, get_inputs(), get_init_inputs()")
    p.add_argument("candidate", help="candidate file: class ModelNew launching @triton.jit kernels")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="hard limit (default 300)")
    p.add_argument("--trials", type=int, default=4, help="verification trials with fresh inputs (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the task's and the candidate's parameters")
    p.add_argument("--trial-seed", type=int, metavar="N", help="the trials' inputs, as a failure names them "
                                                               "(default: drawn unpredictably)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16", "float64"], help="cast inputs and weights")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", default=None, help="use the task's SMALL_SHAPES")
    size.add_argument("--full", dest="small", action="store_false", help="use the task's own shapes, also on a CPU")
    p.add_argument("--no-profile", action="store_true", help="verify only")
    p.add_argument("--deep", type=int, default=0, metavar="N",
                   help="re-verify a correct kernel on N more input sets across the input space (scales 1e-3 to "
                        "1e3, shifted and masked rows, fresh seeds) and report the worst error and its input; "
                        "--trial-seed replays them")
    add_shapes_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tools.evaluate import evaluate
    try:
        spec = TaskSpec(path=args.task, name=Path(args.task).stem, dtype=args.dtype, small=args.small,
                        shape_sets=parse_shape_sets(args.shapes))
        check_spec(spec)
        candidate = Path(args.candidate).read_text()
    except TaskError as e:
        return _usage_error(str(e))
    except (OSError, UnicodeDecodeError) as e:
        return _usage_error(f"Cannot read candidate {args.candidate}: {e.strerror if isinstance(e, OSError) else e}.")
    if args.timeout <= 0 or args.trials < 1:
        return _usage_error("--timeout and --trials must be positive.")
    if not 0 <= args.deep <= MAX_DEEP_SETS:
        return _usage_error(f"--deep takes 0 to {MAX_DEEP_SETS} input sets.")
    result = evaluate(EvalJob(spec, candidate, timeout_s=args.timeout, trials=args.trials, seed=args.seed,
                              trial_seed=args.trial_seed, profile=not args.no_profile, deep=args.deep))
    print(json.dumps(result.to_json(), indent=1) if args.json else summary(result))
    if result.task_error:
        return EXIT_USAGE
    return EXIT_OK if result.correct else EXIT_FAILED


def summary(r: EvalResult) -> str:
    lines = [f"{r.verdict.upper()}: {r.reason}", f"device: {r.device}"]
    if r.verified_on:
        lines.append(f"verified on: {r.verified_on} ({VERIFIED_ON[r.verified_on]})")
    if r.shapes:
        lines += shape_lines(r)
    d = r.deep
    if d and d.failed:
        lines.append(f"--deep: {d.failed} of {d.sets} input sets failed; worst at {d.worst_input}: {d.worst_reason}")
    elif d:
        lines.append(f"--deep: all {d.sets} input sets passed; worst relative error {d.worst_rel_err:.2e} (max abs "
                     f"error {d.worst_abs_err:.2e}) at {d.worst_input}")
    if r.sanitizer:
        from tools.sanitizer import describe
        lines += [f"--deep compute-sanitizer {describe(c)}" for c in r.sanitizer]
    t = r.timing
    if t and t.interpreted:
        lines.append(f"interpreter time {t.ms:.3f} ms (Triton interpreter on a CPU: not a GPU figure, "
                     f"no speedup is reported)")
    elif t:
        lines.append(f"candidate {t.ms:.4f} ms (spread {t.spread_pct:.1f}%)  eager {t.eager_ms:.4f} ms  "
                     f"torch.compile {_ms(t.compile_ms)}  floor {_ms(t.floor_ms)}")
        lines.append(f"speedup vs eager {_x(t.speedup_vs_eager)}  vs torch.compile {_x(t.speedup_vs_compile)}  "
                     f"floor/candidate {t.floor_fraction or 0:.2f}")
        if r.baselines and r.baselines.compile_error:
            lines.append(f"torch.compile gave no time: {r.baselines.compile_error}")
    if r.kernel_ms:
        total = sum(r.kernel_ms.values())
        lines.append(f"device time by kernel (one profiled forward, {total:.4f} ms in all):")
        lines += [f"  {ms:10.4f} ms  {ms / total if total else 0:6.1%}  {name[:100]}"
                  for name, ms in list(r.kernel_ms.items())[:KERNELS_SHOWN]]
        if len(r.kernel_ms) > KERNELS_SHOWN:
            lines.append(f"  ... and {len(r.kernel_ms) - KERNELS_SHOWN} more")
    if r.torch_ops:
        lines.append(f"kept in PyTorch (declared): {', '.join(r.torch_ops)}")
    if r.compile:
        for k in r.compile.kernels:
            lines.append(f"kernel {k.name}: registers {k.registers}, spills {k.spills}, shared {k.shared_bytes} B, "
                         f"num_warps {k.num_warps}, num_stages {k.num_stages}")
        lines.append(f"compile metadata: {r.compile.source}")
    return "\n".join(lines)


def shape_lines(r: EvalResult) -> list[str]:
    """The summary's lines on the shape sets: each one's verdict, with its GPU time and speedups where it has them,
    then their geomeans over those sets."""
    from tools.score import shape_speedups
    from tools.worker import describe_shapes
    figures = shape_speedups(r.shapes)
    lines = [f"shape sets ({len(r.shapes)}, the task's own first):"]
    for c, s in zip(r.shapes, figures["sets"]):
        detail = f": {c.reason}" if c.verdict != "correct" else (
            f" (relative error {c.rel_err:.2e})" if c.rel_err is not None else "")
        lines.append(f"  {describe_shapes(c.shapes)}: {'FALLBACK' if c.fallback else c.verdict.upper()}{detail}"
                     + (f"; {speedup_text(s)}" if s["vs_eager"] is not None else ""))
    return lines + ([f"  {geomean_text(figures)}"] if figures["timed"] else [])


def shape_timing_lines(figures: dict) -> list[str]:
    """Each shape set's GPU time and speedups, then their geomeans (tools/score.py shape_speedups); none without
    GPU times."""
    from tools.worker import describe_shapes
    if not figures["timed"]:
        return []
    return ["per shape set:"] + [f"  {describe_shapes(s['shapes'])}: {speedup_text(s)}" for s in figures["sets"]
                                 if s["vs_eager"] is not None] + [f"  {geomean_text(figures)}"]


def speedup_text(s: dict) -> str:
    """One shape set's GPU figures: "0.0123 ms, 1.50x vs eager, 1.20x vs torch.compile"."""
    return f"{s['ms']:.4f} ms, {_x(s['vs_eager'])} vs eager, {_x(s['vs_compile'])} vs torch.compile"


def geomean_text(figures: dict) -> str:
    g = figures["geomean"]
    return (f"geomean over the {figures['timed']} shape sets with GPU times: {_x(g['eager'])} vs eager, "
            f"{_x(g['compile'])} vs torch.compile")


def _ms(v: float | None) -> str:
    return f"{v:.4f} ms" if v is not None else "n/a"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "n/a"


def _usage_error(message: str) -> int:
    import sys
    print(f"kernelwright: {message}", file=sys.stderr)
    return EXIT_USAGE
