"""The shipped corpus: Markdown documents under knowledge/corpus/, seed kernels under knowledge/kernels/.

A document opens with front matter between `---` lines, one `key: value` per line:

    ---
    id: hw-h100          (defaults to the file name)
    title: NVIDIA H100 / H200 (Hopper, sm_90)
    kind: hardware       (hardware | playbook | note)
    family: any          (an op family, comma-separated, or any)
    arch: sm_90          (comma-separated targets, or any)
    ---

Documents are cut into chunks at `## ` headings so that retrieval returns passages, not whole files.
A seed kernel's module docstring carries `family:`, `dtype:`, `arch:` and `params:` lines (code.kernel_header).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.code import code_hash, infer_family, kernel_header

PACKAGE_DIR = Path(__file__).resolve().parent
CORPUS_DIR = PACKAGE_DIR / "corpus"
KERNELS_DIR = PACKAGE_DIR / "kernels"
ARCHS = ("sm_90", "sm_80", "sm_89", "sm_100", "gfx942", "cpu")
DOC_SUFFIXES = (".md", ".markdown", ".txt", ".rst")
_CHUNK_MAX = 1800  # characters of body per chunk; longer sections are cut at paragraph breaks
_CHUNK_MIN = 300   # a shorter section is merged into the next one


@dataclass
class Chunk:
    id: str
    text: str  # the passage; retrieval prefixes "title > heading" (chunk_label)
    embed_text: str  # what is embedded: the passage with its title and heading weighted up
    metadata: dict


@dataclass
class Doc:
    id: str
    title: str
    kind: str
    family: str
    arch: list[str]
    body: str
    path: str = ""
    origin: str = "seed"
    chunks: list[Chunk] = field(default_factory=list)


@dataclass
class SeedKernel:
    id: str
    source: str
    embed_text: str
    metadata: dict


def arch_flags(arch: list[str] | str) -> dict[str, bool]:
    """`for_<arch>` booleans that filters use: a target listed, or `any`, sets its flag."""
    archs = [a.strip() for a in arch.split(",")] if isinstance(arch, str) else list(arch)
    every = "any" in archs
    return {f"for_{a}": every or a in archs for a in ARCHS}


def parse_doc(text: str, default_id: str, path: str = "", origin: str = "seed") -> Doc:
    meta: dict[str, str] = {}
    body = text
    m = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, flags=re.S)
    if m:
        for line in m.group(1).splitlines():
            k, sep, v = line.partition(":")
            if sep:
                meta[k.strip().lower()] = v.strip()
        body = text[m.end():]
    title = meta.get("title")
    if not title:
        h = re.search(r"^#\s+(.+)$", body, flags=re.M)
        title = h.group(1).strip() if h else default_id
    arch = [a.strip() for a in meta.get("arch", "any").split(",") if a.strip()] or ["any"]
    doc = Doc(id=meta.get("id", default_id), title=title, kind=meta.get("kind", "note"),
              family=meta.get("family", "any"), arch=arch, body=body.strip(), path=path, origin=origin)
    doc.chunks = chunk_doc(doc)
    return doc


def load_doc(path: Path, origin: str = "seed") -> Doc:
    return parse_doc(path.read_text(encoding="utf-8"), path.stem, str(path), origin)


def _sections(body: str) -> list[tuple[str, str]]:
    """(heading, text) pairs cut at `## ` headings; text before the first heading has heading ''."""
    parts = re.split(r"^##\s+(.+)$", body, flags=re.M)
    out = [("", parts[0].strip())]
    out += [(parts[i].strip(), parts[i + 1].strip()) for i in range(1, len(parts), 2)]
    return [(h, t) for h, t in out if t or h]


def _split_long(text: str) -> list[str]:
    pieces, cur = [], ""
    for para in re.split(r"\n\s*\n", text):
        if cur and len(cur) + len(para) > _CHUNK_MAX:
            pieces.append(cur)
            cur = para
        else:
            cur = f"{cur}\n\n{para}" if cur else para
    return pieces + ([cur] if cur else [])


def _render(sections: list[tuple[str, str]], first_bare: bool = True) -> str:
    parts = [t if (i == 0 and first_bare) or not h else f"## {h}\n{t}" for i, (h, t) in enumerate(sections)]
    return "\n\n".join(p for p in parts if p)


def chunk_doc(doc: Doc) -> list[Chunk]:
    """Sections of the body (its `# title` line dropped); short ones join the next, long ones are cut."""
    merged: list[tuple[str, str]] = []
    carry: list[tuple[str, str]] = []
    for heading, text in _sections(re.sub(r"^#\s+.+\n", "", doc.body, count=1)):
        carry.append((heading, text))
        joined = _render(carry)
        if len(joined) < _CHUNK_MIN:
            continue
        label = " / ".join(h for h, _ in carry if h)
        merged += [(label, piece) for piece in _split_long(joined)]
        carry = []
    if carry:
        if merged:
            label, text = merged.pop()
            label = " / ".join([label] + [h for h, _ in carry if h])
            merged.append((label, f"{text}\n\n{_render(carry, first_bare=False)}"))
        else:
            merged.append((" / ".join(h for h, _ in carry if h), _render(carry)))
    chunks = []
    for n, (heading, text) in enumerate(merged):
        meta = {"doc_id": doc.id, "title": doc.title, "heading": heading, "kind": doc.kind,
                "family": doc.family, "arch": ",".join(doc.arch), "origin": doc.origin,
                "chunk": n, "path": doc.path, **arch_flags(doc.arch)}
        chunks.append(Chunk(id=f"{doc.id}#{n}", text=text,
                            embed_text=chunk_embed_text(doc.title, heading, text), metadata=meta))
    return chunks


def chunk_label(metadata: dict) -> str:
    title, heading = metadata.get("title", ""), metadata.get("heading", "")
    return f"{title} > {heading}" if heading else title


def chunk_embed_text(title: str, heading: str, text: str) -> str:
    """What a passage is embedded as: its title and heading count twice, then the passage."""
    return f"{title}\n{heading}\n{title}\n{heading}\n{text}"


def seed_docs() -> list[Doc]:
    return [load_doc(p) for p in sorted(CORPUS_DIR.glob("*.md"))]


def kernel_embed_text(source: str, metadata: dict) -> str:
    """What a kernel is embedded as: its header, its family's name and the task name, then the code."""
    head = kernel_header(source)
    lead = " ".join(str(metadata.get(k, "")) for k in ("title", "family", "task", "dtype"))
    return f"{lead}\n{lead}\n{head.get('title', '')}\n{source}"


def load_kernel(path: Path) -> SeedKernel:
    source = path.read_text(encoding="utf-8")
    head = kernel_header(source)
    arch = [a.strip() for a in head.get("arch", "any").split(",") if a.strip()]
    meta = {"kind": "kernel", "title": head.get("title", path.stem),
            "family": head.get("family", infer_family(source)), "dtype": head.get("dtype", "any"),
            "arch": ",".join(arch), "params": head.get("params", ""), "task": "", "origin": "seed",
            "path": str(path), "code_hash": code_hash(source), "verified": 0, **arch_flags(arch)}
    return SeedKernel(id=f"seed-{path.stem}", source=source,
                      embed_text=kernel_embed_text(source, meta), metadata=meta)


def seed_kernels() -> list[SeedKernel]:
    return [load_kernel(p) for p in sorted(KERNELS_DIR.glob("*.py")) if not p.name.startswith("_")]


def corpus_fingerprint() -> str:
    """Changes whenever a shipped document or seed kernel does: the store rebuilds on a mismatch."""
    h = hashlib.sha256()
    for p in sorted(CORPUS_DIR.glob("*.md")) + sorted(KERNELS_DIR.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]
