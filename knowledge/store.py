"""The knowledge store: hardware/optimization documents and verified kernels in Chroma.

    store = KnowledgeStore()                      # or KnowledgeStore("/path/kb", embed="hash")
    store.retrieve("online softmax for long rows", kind="docs", k=4, where={"arch": "sm_90"})
    store.context_for_task(task_source, "sm_90")  # docs + best similar kernels, within a budget
    store.write_back(candidate_source, {"task": "19_ReLU", "parent_id": 7}, result)

Data directory: the constructor's `kb_dir`, else $KERNELWRIGHT_KB_DIR, else $XDG_DATA_HOME/kernelwright/kb
(~/.local/share/kernelwright/kb). First use builds it from the shipped corpus, offline. A store that
cannot be read raises KBError naming `kernelwright kb rebuild`; `rebuild()` recreates it from the corpus
and keeps written-back kernels and added documents when the old store can still be read.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from agent.interfaces import Retrieved
from knowledge import records
from knowledge.code import infer_family, task_query
from knowledge.corpus import (ARCHS, chunk_embed_text, chunk_label, corpus_fingerprint, load_doc,
                              seed_docs, seed_kernels)
from knowledge.embed import Embedder, fit_embedder, load_embedder, selected_embed
from knowledge.errors import REBUILD, KBError, UnverifiedKernelError
from tools.results import EvalResult

log = logging.getLogger(__name__)
FORMAT = 1
MANIFEST, EMBED_STATE, SQLITE = "manifest.json", "embedder.json", "chroma.sqlite3"
COLLECTIONS = {"doc": "docs", "kernel": "kernels"}
FAMILY_BONUS = 0.1  # added to a kernel's similarity when it is of the task's op family
KEEP_FRACTION = 0.6  # context_for_task drops kernels scoring below this fraction of the best
ARCH_WORDS = {"sm_90": "Hopper H100 H200 sm_90", "sm_80": "Ampere A100 sm_80", "sm_89": "Ada L40S sm_89",
              "sm_100": "Blackwell B200 sm_100", "gfx942": "CDNA3 MI300X gfx942 ROCm", "cpu": "CPU interpreter"}


def default_kb_dir() -> Path:
    if os.environ.get("KERNELWRIGHT_KB_DIR"):
        return Path(os.environ["KERNELWRIGHT_KB_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kernelwright" / "kb"


@dataclass
class TaskKnowledge:
    """What the store knows that bears on one task, ready for a prompt."""

    query: str
    docs: list[Retrieved]
    kernels: list[Retrieved]

    @property
    def chars(self) -> int:
        return sum(len(r.text) for r in self.docs + self.kernels)


@dataclass
class RebuildReport:
    path: str
    embed: str
    docs: int  # document chunks in the new store
    kernels: int
    kept_docs: int  # added documents carried over (chunks)
    kept_kernels: int  # written-back kernels carried over
    lost: bool  # the old store could not be read: its additions are gone
    seconds: float

    def summary(self) -> str:
        kept = ("the old store could not be read, so any written-back kernels and added documents "
                "were lost" if self.lost else
                f"kept {self.kept_kernels} written-back kernels and {self.kept_docs} added document chunks")
        return (f"Rebuilt the knowledge store at {self.path} ({self.embed} embedding) with {self.docs} "
                f"document chunks and {self.kernels} kernels in {self.seconds:.1f}s; {kept}.")


@dataclass
class _Item:
    id: str
    document: str
    metadata: dict
    embed_text: str = ""


@dataclass
class KnowledgeStore:
    """A Chroma-backed store of docs and verified kernels; satisfies agent.interfaces.KnowledgeStore."""

    kb_dir: Path | str | None = None
    embed: str | None = None  # hash | minilm | openai; default from KERNELWRIGHT_EMBED, else hash
    _client: object = field(default=None, init=False, repr=False)
    _cols: dict = field(default_factory=dict, init=False, repr=False)
    _embedder: Embedder | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.kb_dir = Path(self.kb_dir).expanduser() if self.kb_dir else default_kb_dir()
        self.embed = selected_embed(self.embed)

    # ------------------------------------------------------------ opening, building, rebuilding

    def _fail(self, problem: str) -> KBError:
        return KBError(f"the knowledge store at {self.kb_dir} {problem}; run `{REBUILD}` to recreate it.")

    @contextmanager
    def _guard(self, doing: str):
        try:
            yield
        except KBError:
            raise
        except Exception as e:  # Chroma and SQLite raise many types; each means the same to a user
            raise self._fail(f"could not be read while {doing} ({type(e).__name__}: {str(e)[:120]})") from None

    def _open(self) -> None:
        if self._client is not None:
            return
        d = Path(self.kb_dir)
        if d.exists() and not d.is_dir():
            raise KBError(f"the knowledge store path {d} is a file, not a directory; pass another --kb-dir.")
        if not d.exists() or not any(d.iterdir()):
            self._build(kept=[], lost=False, replace=False)
        elif not (d / MANIFEST).is_file():
            raise self._fail("is missing its manifest (or is not a kernelwright store)")
        manifest = self._manifest()
        if manifest.get("embed") != self.embed:
            raise KBError(f"the knowledge store at {d} was built with the '{manifest.get('embed')}' "
                          f"embedding, not '{self.embed}'; run `{REBUILD}` to re-embed it.")
        if manifest.get("corpus") != corpus_fingerprint():
            log.info("the shipped corpus changed since %s was built: rebuilding it", d)
            self.rebuild()
        self._connect()

    def _manifest(self) -> dict:
        try:
            data = json.loads((Path(self.kb_dir) / MANIFEST).read_text())
        except (OSError, ValueError):
            raise self._fail("has an unreadable manifest") from None
        if data.get("format") != FORMAT:
            raise self._fail(f"has format {data.get('format')} where {FORMAT} is expected")
        return data

    def _connect(self) -> None:
        d = Path(self.kb_dir)
        if not (d / SQLITE).is_file():
            raise self._fail("is missing its database file")
        try:
            state = json.loads((d / EMBED_STATE).read_text())
        except (OSError, ValueError):
            raise self._fail("is missing its embedding table") from None
        self._embedder = load_embedder(self.embed, state)
        with self._guard("opening it"):
            client = _client(d)
            try:
                self._cols = {k: client.get_collection(name, embedding_function=None)
                              for k, name in COLLECTIONS.items()}
                for col in self._cols.values():
                    col.count()  # touches the database: a corrupt file fails here, not mid-search
            except Exception:
                _close(client)
                raise
            self._client = client

    def close(self) -> None:
        if self._client is not None:
            _close(self._client)
        self._client, self._cols, self._embedder = None, {}, None

    def __enter__(self) -> "KnowledgeStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rebuild(self) -> RebuildReport:
        """Recreate the store from the shipped corpus, carrying over what was added to the old one."""
        self.close()
        kept, lost = [], False
        d = Path(self.kb_dir)
        if d.exists() and any(d.iterdir()):
            if not ((d / MANIFEST).exists() or (d / SQLITE).exists()):
                raise KBError(f"{d} is not a kernelwright knowledge store, so `{REBUILD}` will not delete it.")
            kept, lost = self._read_additions()
        return self._build(kept, lost, replace=True)

    def _read_additions(self) -> tuple[list[tuple[str, _Item]], bool]:
        """Written-back kernels, measured seeds and added documents of the old store, or lost=True."""
        client = None
        try:
            client = _client(Path(self.kb_dir))
            out = []
            for kind, name in COLLECTIONS.items():
                got = client.get_collection(name, embedding_function=None).get(
                    where={"$or": [{"origin": {"$ne": "seed"}}, {"verified": {"$gt": 0}}]},
                    include=["documents", "metadatas"])
                out += [(kind, _Item(i, doc, meta or {}))
                        for i, doc, meta in zip(got["ids"], got["documents"], got["metadatas"])]
            return out, False
        except Exception as e:
            log.info("could not read the old store at %s: %s", self.kb_dir, e)
            return [], True
        finally:
            if client is not None:
                _close(client)

    def _build(self, kept: list[tuple[str, _Item]], lost: bool, replace: bool) -> RebuildReport:
        """Build into a sibling temporary directory, then move it into place. On first use
        (replace=False) a store that another process finished first is kept and ours is discarded."""
        t0 = time.perf_counter()
        d = Path(self.kb_dir)
        docs = [_Item(c.id, c.text, c.metadata, c.embed_text) for doc in seed_docs() for c in doc.chunks]
        kernels = {k.metadata["code_hash"]: _Item(k.id, k.source, k.metadata, k.embed_text)
                   for k in seed_kernels()}
        embedder = fit_embedder(self.embed, [i.embed_text for i in docs + list(kernels.values())])
        for kind, item in kept:
            item.embed_text = _embed_text(kind, item)
            if kind == "doc":
                docs.append(item)
            elif item.metadata.get("code_hash") in kernels:  # a measured seed: keep its measurements
                seed = kernels[item.metadata["code_hash"]]
                seed.metadata = {**seed.metadata, **{k: v for k, v in item.metadata.items()
                                                     if k not in ("path", "origin", "title")}}
            else:  # a written-back kernel, or a measured seed whose shipped code has since changed
                if any(item.id == k.id for k in kernels.values()):
                    item.id = f"k-{item.metadata.get('code_hash', uuid.uuid4().hex)[:16]}"
                    item.metadata = {**item.metadata, "origin": "writeback"}
                kernels[item.metadata.get("code_hash", item.id)] = item
        tmp = d.parent / f".{d.name}.build-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            client = _client(tmp)
            try:
                for kind, items in (("doc", docs), ("kernel", list(kernels.values()))):
                    col = client.create_collection(COLLECTIONS[kind], embedding_function=None,
                                                   configuration={"hnsw": {"space": "cosine"}})
                    _add(col, items, embedder)
            finally:
                _close(client)
            (tmp / EMBED_STATE).write_text(json.dumps(embedder.state()))
            manifest = {"format": FORMAT, "embed": self.embed, "corpus": corpus_fingerprint(),
                        "built": _now(), "docs": len(docs), "kernels": len(kernels)}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            _swap_in(tmp, d, replace)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        n_kept_k = sum(1 for kind, i in kept if kind == "kernel")
        return RebuildReport(str(d), self.embed, len(docs), len(kernels), len(kept) - n_kept_k, n_kept_k,
                             lost, time.perf_counter() - t0)

    # ------------------------------------------------------------ retrieval

    def retrieve(self, query: str, *, kind: str, k: int = 5, where: dict | None = None,
                 budget_chars: int | None = None) -> list[Retrieved]:
        """The k items nearest to `query` in the docs or kernels collection, best first.

        `where` is a Chroma metadata filter; {"arch": "sm_90"} (also inside $and/$or) matches every item
        that applies to that target, including those marked `any`. At most two passages per document
        are returned. With `budget_chars`, items that would exceed it are skipped.
        """
        kind = _kind(kind)
        self._open()
        col = self._cols[kind]
        vec = self._embedder.embed([query])[0]
        with self._guard("searching it"):
            n = col.count()
            if n == 0 or k <= 0:
                return []
            got = col.query(query_embeddings=[vec], n_results=min(n, k * 4), where=_translate(where),
                            include=["documents", "metadatas", "distances"])
        out, per_doc = [], {}
        for i, doc, meta, dist in zip(got["ids"][0], got["documents"][0], got["metadatas"][0],
                                      got["distances"][0]):
            meta = {m: v for m, v in (meta or {}).items() if not m.startswith("for_")}
            if kind == "doc":
                per_doc[meta.get("doc_id")] = per_doc.get(meta.get("doc_id"), 0) + 1
                if per_doc[meta.get("doc_id")] > 2:
                    continue
                doc = f"{chunk_label(meta)}\n\n{doc}"
            out.append(Retrieved(kind=kind, id=i, text=doc, metadata=meta, score=1.0 - float(dist)))
        return _within_budget(out[:k] if budget_chars is None else out, k, budget_chars)

    def context_for_task(self, task_source: str, arch: str, k_docs: int = 4, k_kernels: int = 2,
                         budget_chars: int = 12000) -> TaskKnowledge:
        """Docs (the target's hardware notes first, then playbooks) and the best similar kernels.

        Kernels of the task's own op family rank higher, kernels far less similar than the best one are
        dropped, and among kernels written back for the same task the fastest wins. Kernels take at most
        half of `budget_chars`; docs take what is left.
        """
        query, family = task_query(task_source), infer_family(task_source)
        target = _arch_filter(arch)
        best: dict[str, Retrieved] = {}
        for r in self.retrieve(query, kind="kernel", k=max(k_kernels * 4, 8), where=target):
            r.score += FAMILY_BONUS if r.metadata.get("family") == family else 0.0
            key = r.metadata.get("task") or r.id
            if key not in best or _speed(r) > _speed(best[key]):
                best[key] = r
        ranked = sorted(best.values(), key=lambda r: -r.score)
        ranked = [r for r in ranked if r.score >= KEEP_FRACTION * ranked[0].score] if ranked else []
        kernels = _within_budget(ranked, k_kernels, budget_chars // 2)
        left = budget_chars - sum(len(r.text) for r in kernels)
        hw = self.retrieve(f"{query} {ARCH_WORDS.get(arch, arch)}", kind="doc", k=1,
                           where={"$and": [{"kind": "hardware"}, target]}, budget_chars=left)
        left -= sum(len(r.text) for r in hw)
        rest = self.retrieve(query, kind="doc", k=max(k_docs - len(hw), 0),
                             where={"$and": [{"kind": {"$ne": "hardware"}}, target]}, budget_chars=left)
        return TaskKnowledge(query, hw + rest, kernels)

    # ------------------------------------------------------------ writing

    def write_back(self, source: str, metadata: dict, result: EvalResult) -> str:
        """Store a verified kernel; the same normalized code updates the existing entry. Returns its id."""
        if not result.correct:
            raise UnverifiedKernelError(f"not written back: the kernel's verdict is '{result.verdict}' "
                                        f"({result.reason[:200]}); only correct kernels enter the library.")
        self._open()
        col = self._cols["kernel"]
        meta = records.kernel_metadata(source, metadata, result)
        with self._guard("writing to it"):
            got = col.get(where={"code_hash": meta["code_hash"]}, include=["metadatas"])
            if got["ids"]:
                old = got["metadatas"][0] or {}
                merged = records.merge_kernel_metadata(old, meta)
                dropped = {k: None for k in old if k not in merged}  # Chroma merges; None deletes a key
                col.update(ids=[got["ids"][0]], metadatas=[{**dropped, **merged}])
                return got["ids"][0]
            kid = f"k-{meta['code_hash'][:16]}"
            _add(col, [_Item(kid, source, meta, _embed_text("kernel", _Item(kid, source, meta)))],
                 self._embedder)
        return kid

    def add_document(self, path: Path | str) -> tuple[str, int]:
        """Add (or replace) a Markdown/text document; returns its id and its number of chunks."""
        self._open()
        doc = load_doc(Path(path), origin="user")
        doc.id = f"user-{doc.id}"
        for c in doc.chunks:
            c.id = f"{doc.id}#{c.metadata['chunk']}"
            c.metadata["doc_id"] = doc.id
        col = self._cols["doc"]
        with self._guard("adding a document"):
            col.delete(where={"doc_id": doc.id})
            _add(col, [_Item(c.id, c.text, c.metadata, c.embed_text) for c in doc.chunks], self._embedder)
        return doc.id, len(doc.chunks)

    # ------------------------------------------------------------ listing

    def items(self, kind: str) -> list[tuple[str, dict]]:
        """(id, metadata) of every item of a collection, in id order."""
        kind = _kind(kind)
        self._open()
        with self._guard("listing it"):
            got = self._cols[kind].get(include=["metadatas"])
        return sorted(zip(got["ids"], [m or {} for m in got["metadatas"]]))

    def stats(self) -> dict:
        self._open()
        docs, kernels = self.items("doc"), self.items("kernel")
        size = sum(p.stat().st_size for p in Path(self.kb_dir).rglob("*") if p.is_file())
        return {"path": str(self.kb_dir), "embed": self.embed, "built": self._manifest().get("built"),
                "documents": len({m.get("doc_id") for _, m in docs}), "chunks": len(docs),
                "kernels": len(kernels),
                "written_back": sum(1 for _, m in kernels if m.get("origin") != "seed"),
                "families": _count(m.get("family", "") for _, m in kernels),
                "archs": _count(a for _, m in kernels for a in str(m.get("arch", "")).split(",")),
                "bytes": size}


# ---------------------------------------------------------------- helpers

def _client(path: Path):
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False,
                                                                       allow_reset=False))


def _close(client) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        close()


def _add(col, items: list[_Item], embedder: Embedder) -> None:
    for start in range(0, len(items), 128):
        batch = items[start:start + 128]
        col.add(ids=[i.id for i in batch], documents=[i.document for i in batch],
                metadatas=[i.metadata for i in batch], embeddings=embedder.embed([i.embed_text for i in batch]))


def _embed_text(kind: str, item: _Item) -> str:
    from knowledge.corpus import kernel_embed_text

    if kind == "doc":
        return chunk_embed_text(item.metadata.get("title", ""), item.metadata.get("heading", ""), item.document)
    return kernel_embed_text(item.document, item.metadata)


def _swap_in(tmp: Path, d: Path, replace: bool) -> None:
    """Move a finished build into place; an old store is moved aside first and then deleted."""
    if not replace:
        try:
            tmp.rename(d)  # atomic; also replaces an empty directory
        except OSError:
            if not (d / MANIFEST).exists():  # not a concurrent first build: a real failure
                raise
        return
    old = None
    if d.exists():
        old = d.parent / f".{d.name}.old-{uuid.uuid4().hex[:8]}"
        d.rename(old)
    try:
        tmp.rename(d)
    except OSError:
        if old is not None and not d.exists():
            old.rename(d)
        if not d.exists():
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _kind(kind: str) -> str:
    k = kind.lower().rstrip("s")
    if k not in COLLECTIONS:
        raise KBError(f"unknown kind '{kind}': use docs or kernels.")
    return k


def _arch_filter(arch: str) -> dict:
    return {f"for_{arch}": True} if arch in ARCHS else {"arch": {"$in": [arch, "any"]}}


def _translate(where: dict | None) -> dict | None:
    """{"arch": "sm_90"} becomes the for_sm_90 flag, so items marked `any` or several targets match."""
    if not where:
        return None
    out = {}
    for key, val in where.items():
        if key in ("$and", "$or"):
            out[key] = [_translate(w) for w in val]
        elif key == "arch" and isinstance(val, str) and val in ARCHS:
            out[f"for_{val}"] = True
        else:
            out[key] = val
    return out if len(out) == 1 else {"$and": [{k: v} for k, v in out.items()]}


def _within_budget(items: list[Retrieved], k: int, budget: int | None) -> list[Retrieved]:
    out, used = [], 0
    for r in items:
        if len(out) == k:
            break
        if budget is not None and used + len(r.text) > budget:
            continue
        out.append(r)
        used += len(r.text)
    return out


def _speed(r: Retrieved) -> float:
    return float(r.metadata.get("speedup_vs_eager") or 0.0)


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        if v:
            out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
