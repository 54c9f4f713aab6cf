"""Retrieval quality on the labelled queries in knowledge/eval/queries.json: recall@k and time per query."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.store import KnowledgeStore

QUERIES = Path(__file__).resolve().parent / "eval" / "queries.json"


@dataclass
class RecallReport:
    embed: str
    k: int
    recall: float  # mean over queries of |expected ∩ top-k| / |expected|
    ms_per_query: float
    misses: list[tuple[str, list[str], list[str]]] = field(default_factory=list)  # query, expected, got


def load_queries(path: Path = QUERIES) -> list[dict]:
    return json.loads(Path(path).read_text())


def result_ids(store: KnowledgeStore, query: str, kind: str, k: int) -> list[str]:
    """Document ids (not passage ids) or kernel ids of the top k results."""
    got = store.retrieve(query, kind=kind, k=k)
    return [r.metadata.get("doc_id", r.id) if r.kind == "doc" else r.id for r in got]


def recall_at_k(store: KnowledgeStore, queries: list[dict], k: int = 5) -> RecallReport:
    store.retrieve("warm up", kind="docs", k=1)  # opening the store is not a query's cost
    total, misses = 0.0, []
    t0 = time.perf_counter()
    for q in queries:
        ids = result_ids(store, q["query"], q["kind"], k)
        hit = sum(1 for e in q["expect"] if e in ids) / len(q["expect"])
        total += hit
        if hit < 1:
            misses.append((q["query"], q["expect"], ids))
    ms = (time.perf_counter() - t0) * 1000 / max(len(queries), 1)
    return RecallReport(store.embed, k, total / max(len(queries), 1), ms, misses)
