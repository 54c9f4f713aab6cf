"""The `kernelwright` command. Each subcommand lives beside what it drives and registers itself here.

Exit codes: 0 success; 1 the work failed (a candidate incorrect or rejected, a task without a kernel);
2 bad input or usage; 3 and 4 the `ci` gates (verification, performance); 130 interrupted (work done so
far is kept)."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from agent import batch, chat, ci, export, optimize
    from knowledge import cli as kb
    from tools import cli_eval
    parser = argparse.ArgumentParser(prog="kernelwright", description="Find faster, verified Triton kernels "
                                     "for PyTorch operators.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (cli_eval, optimize, export, batch, ci, chat, kb):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return run(args)
    except KeyboardInterrupt:
        print("kernelwright: interrupted; work finished so far is kept.", file=sys.stderr)
        return 130


def run(args: argparse.Namespace) -> int:
    """Runs a parsed subcommand; bad input it reports as a UsageError becomes one line and exit 2."""
    from agent.optimize import UsageError
    from tools.cluster import ClusterError
    try:
        return args.func(args)
    except (UsageError, ClusterError) as e:
        print(f"kernelwright: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
