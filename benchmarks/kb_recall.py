"""Recall@5 of the knowledge store on the labelled queries, for each embedding option available here.

    python benchmarks/kb_recall.py [--embed hash,minilm,openai] [--k 5] [--misses]

Each option gets a fresh store in a temporary directory, built from the shipped corpus. An option whose
package or endpoint is missing is reported as unavailable, not silently skipped.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from knowledge.embed import EMBEDDINGS  # noqa: E402
from knowledge.errors import KBError  # noqa: E402
from knowledge.recall import load_queries, recall_at_k  # noqa: E402
from knowledge.store import KnowledgeStore  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embed", default=",".join(EMBEDDINGS), help="comma-separated embedding options")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--misses", action="store_true", help="print the queries that missed")
    args = ap.parse_args(argv)
    queries = load_queries()
    print(f"{len(queries)} labelled queries, recall@{args.k}")
    print(f"{'embedding':<10} {'recall@' + str(args.k):>9} {'ms/query':>9} {'build s':>8}  note")
    for name in args.embed.split(","):
        with tempfile.TemporaryDirectory(prefix=f"kb-{name}-") as tmp:
            try:
                t0 = time.perf_counter()
                store = KnowledgeStore(Path(tmp) / "kb", embed=name)
                store.stats()
                build = time.perf_counter() - t0
                rep = recall_at_k(store, queries, args.k)
                store.close()
            except KBError as e:
                print(f"{name:<10} {'-':>9} {'-':>9} {'-':>8}  unavailable: {e}")
                continue
        print(f"{name:<10} {rep.recall:>9.3f} {rep.ms_per_query:>9.1f} {build:>8.1f}")
        if args.misses:
            for q, expected, got in rep.misses:
                print(f"    miss: {q!r} expected {expected} got {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
