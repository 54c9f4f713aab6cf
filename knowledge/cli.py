"""`kernelwright kb ...`: search, grow and inspect the knowledge store.

    kernelwright kb search "online softmax" [--kind docs|kernels] [--k 5] [--json]
    kernelwright kb add notes.md                     # a document
    kernelwright kb add kernel.py --task TASK.py     # a kernel, verified by the evaluator first
    kernelwright kb list [--kind docs|kernels]
    kernelwright kb stats
    kernelwright kb rebuild

Every subcommand takes --kb-dir (default: $KERNELWRIGHT_KB_DIR, else the per-user data directory).
Exit codes: 0 done; 1 the work failed (store unreadable, kernel not verified); 2 bad input or usage.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from knowledge.errors import KBError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kb-dir", default=argparse.SUPPRESS, metavar="DIR",
                        help="the store's directory (default: $KERNELWRIGHT_KB_DIR or ~/.local/share/kernelwright/kb)")
    kb = subparsers.add_parser("kb", help="search and grow the knowledge store of docs and verified kernels",
                               description="The knowledge store: hardware and optimization documents and "
                                           "verified kernels, retrieved to guide the search.")
    kb.add_argument("--kb-dir", default=None, metavar="DIR", help=argparse.SUPPRESS)
    kb.set_defaults(func=lambda args: _usage(kb))
    sub = kb.add_subparsers(dest="kb_command", metavar="SUBCOMMAND")

    p = sub.add_parser("search", parents=[common], help="find docs and kernels relevant to a query")
    p.add_argument("query")
    p.add_argument("--kind", choices=["docs", "kernels"], help="search one collection (default: both)")
    p.add_argument("--k", type=int, default=5, help="results per collection (default 5)")
    p.add_argument("--arch", help="only items for this target (sm_90, sm_80, sm_89, sm_100, gfx942, cpu)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a summary")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("add", parents=[common], help="add documents, or kernels verified against a task")
    p.add_argument("paths", nargs="+", metavar="PATH", help="Markdown/text documents or kernel .py files")
    p.add_argument("--task", help="task file the kernels are verified against (required for .py files)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="per kernel (default 300)")
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("list", parents=[common], help="list the documents and kernels in the store")
    p.add_argument("--kind", choices=["docs", "kernels"], help="list one collection (default: both)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("stats", parents=[common], help="counts, size and embedding of the store")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("rebuild", parents=[common],
                       help="recreate the store from the shipped corpus, keeping added kernels when readable")
    p.set_defaults(func=cmd_rebuild)


def main(argv: list[str] | None = None) -> int:
    """`python -m knowledge.cli kb ...`, the same commands without the top-level CLI."""
    parser = argparse.ArgumentParser(prog="kernelwright")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args) if getattr(args, "func", None) else _usage(parser)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _store(args):
    from knowledge.store import KnowledgeStore

    return KnowledgeStore(args.kb_dir)


def _fail(msg: str, code: int = EXIT_FAILED) -> int:
    print(f"kernelwright kb: {msg}", file=sys.stderr)
    return code


def _guarded(fn):
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except KBError as e:
            return _fail(str(e))
    run.__doc__, run.__name__ = fn.__doc__, fn.__name__
    return run


@_guarded
def cmd_search(args: argparse.Namespace) -> int:
    if args.k < 1:
        return _fail("--k must be at least 1.", EXIT_USAGE)
    where = {"arch": args.arch} if args.arch else None
    with _store(args) as store:
        found = [r for kind in ([args.kind] if args.kind else ["docs", "kernels"])
                 for r in store.retrieve(args.query, kind=kind, k=args.k, where=where)]
    if args.json:
        print(json.dumps([{"kind": r.kind, "id": r.id, "score": round(r.score, 4), "metadata": r.metadata,
                           "text": r.text} for r in found], indent=1))
        return EXIT_OK
    if not found:
        print("No results.")
    for r in found:
        title = r.metadata.get("title", "")
        if r.kind == "kernel":
            extra = ", ".join(f"{k}={r.metadata[k]}" for k in ("family", "dtype", "arch", "task",
                                                               "speedup_vs_eager") if r.metadata.get(k))
            print(f"[kernel {r.score:.2f}] {r.id}: {title} ({extra})")
        else:
            body = " ".join(r.text.split("\n\n", 1)[-1].split())
            print(f"[doc {r.score:.2f}] {r.id}: {r.text.splitlines()[0]}\n    {body[:220]}...")
    return EXIT_OK


@_guarded
def cmd_add(args: argparse.Namespace) -> int:
    from knowledge.corpus import DOC_SUFFIXES

    paths = [Path(p) for p in args.paths]
    for p in paths:
        if not p.is_file():
            return _fail(f"{p} is not a readable file.", EXIT_USAGE)
        if p.suffix not in DOC_SUFFIXES + (".py",):
            return _fail(f"{p} is neither a document ({', '.join(DOC_SUFFIXES)}) nor a kernel (.py).", EXIT_USAGE)
        if p.suffix == ".py" and not args.task:
            return _fail(f"refusing to add {p} unverified: kernels enter the library only after the evaluator "
                         f"verifies them, so pass --task TASK.py.", EXIT_USAGE)
    code = EXIT_OK
    with _store(args) as store:
        for p in paths:
            if p.suffix != ".py":
                doc_id, n = store.add_document(p)
                print(f"added document {doc_id} ({n} passages) from {p}")
            else:
                code = max(code, _add_kernel(store, p, Path(args.task), args.timeout))
    return code


def _add_kernel(store, path: Path, task: Path, timeout: float) -> int:
    from knowledge.code import infer_family
    from tools.evaluate import evaluate
    from tools.results import EvalJob, TaskSpec
    from tools.task import TaskError, check_spec

    spec = TaskSpec(path=str(task), name=task.stem)
    try:
        check_spec(spec)
        source = path.read_text(encoding="utf-8")
    except TaskError as e:
        return _fail(str(e), EXIT_USAGE)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {path}: {e}.", EXIT_USAGE)
    result = evaluate(EvalJob(spec, source, timeout_s=timeout))
    if result.task_error:
        return _fail(f"the task {task} could not be loaded: {result.reason}", EXIT_USAGE)
    if not result.correct:
        return _fail(f"not added: {path} was judged '{result.verdict}' against {task.name}: {result.reason}")
    meta = {"task": task.stem, "family": infer_family(task.read_text(encoding="utf-8")), "file": str(path)}
    kid = store.write_back(source, meta, result)
    t = result.timing
    speed = (f", {t.speedup_vs_eager:.2f}x eager" if t and t.speedup_vs_eager else
             ", interpreted: no speedup recorded" if result.interpreted else "")
    print(f"added kernel {kid} from {path} (verified correct on {result.device}{speed})")
    return EXIT_OK


@_guarded
def cmd_list(args: argparse.Namespace) -> int:
    with _store(args) as store:
        if args.kind in (None, "docs"):
            docs: dict[str, tuple[dict, int]] = {}
            for _, m in store.items("docs"):
                meta, n = docs.get(m.get("doc_id", ""), (m, 0))
                docs[m.get("doc_id", "")] = (meta, n + 1)
            print(f"{len(docs)} documents:")
            for doc_id, (m, n) in sorted(docs.items()):
                print(f"  {doc_id:<26} {m.get('kind', ''):<9} {m.get('arch', ''):<13} {n:>2} passages  {m.get('title', '')}")
        if args.kind in (None, "kernels"):
            kernels = store.items("kernels")
            print(f"{len(kernels)} kernels:")
            for kid, m in kernels:
                speed = f"{m['speedup_vs_eager']:.2f}x" if m.get("speedup_vs_eager") else "-"
                print(f"  {kid:<26} {m.get('family', ''):<11} {m.get('arch', ''):<7} {speed:>7}  "
                      f"{m.get('task') or m.get('origin', '')}: {m.get('title', '')}")
    return EXIT_OK


@_guarded
def cmd_stats(args: argparse.Namespace) -> int:
    with _store(args) as store:
        s = store.stats()
    if args.json:
        print(json.dumps(s, indent=1))
        return EXIT_OK
    print(f"store: {s['path']} ({s['bytes'] / 1e6:.1f} MB, {s['embed']} embedding, built {s['built']})")
    print(f"documents: {s['documents']} ({s['chunks']} passages)")
    print(f"kernels: {s['kernels']} ({s['written_back']} written back)")
    print("families: " + ", ".join(f"{k} {v}" for k, v in s["families"].items()))
    print("targets: " + ", ".join(f"{k} {v}" for k, v in s["archs"].items()))
    return EXIT_OK


@_guarded
def cmd_rebuild(args: argparse.Namespace) -> int:
    from knowledge.store import KnowledgeStore

    report = KnowledgeStore(args.kb_dir).rebuild()
    print(report.summary())
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
