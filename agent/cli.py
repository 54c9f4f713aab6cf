"""The `kernelwright` command. Each subcommand lives beside what it drives and registers itself here.

Exit codes: 0 success; 1 the work failed (a candidate incorrect or rejected, a gate tripped);
2 bad input or usage; 130 interrupted (work done so far is kept)."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from tools import cli_eval
    parser = argparse.ArgumentParser(prog="kernelwright", description="Find faster, verified Triton kernels "
                                     "for PyTorch operators.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cli_eval.register(sub)
    for module in ("agent.optimize", "agent.batch", "agent.ci", "agent.chat", "knowledge.cli"):
        try:
            __import__(module, fromlist=["register"]).register(sub)
        except ImportError as e:
            if e.name != module:  # a module that exists but fails to import is a real error
                raise
    return parser




def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("kernelwright: interrupted; work finished so far is kept.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
