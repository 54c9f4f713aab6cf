"""Retrieval quality of the default embedding on the labelled queries (benchmarks/kb_recall.py prints more)."""
from knowledge.corpus import seed_docs, seed_kernels
from knowledge.recall import load_queries, recall_at_k
from knowledge.store import KnowledgeStore


def test_labelled_set_is_large_and_names_real_items():
    queries = load_queries()
    assert len(queries) >= 30
    known = {d.id for d in seed_docs()} | {k.id for k in seed_kernels()}
    for q in queries:
        assert q["kind"] in ("docs", "kernels") and q["expect"] and set(q["expect"]) <= known, q


def test_default_embedding_recall_at_5(kb_dir):
    with KnowledgeStore(kb_dir) as store:
        report = recall_at_k(store, load_queries(), k=5)
    assert report.embed == "hash"
    assert report.recall >= 0.9, report.misses
    assert report.ms_per_query < 200
