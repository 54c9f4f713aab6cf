"""A verified kernel's metadata, flattened for Chroma (str, int, float, bool; no None, no lists)."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from knowledge.code import code_hash, infer_family, kernel_header
from knowledge.corpus import arch_flags
from tools.results import EvalResult

# Fields that describe one measurement; they move together when a newer measurement replaces an older one.
MEASURED = ("device", "interpreted", "ms", "eager_ms", "compile_ms", "speedup_vs_eager",
            "speedup_vs_compile", "floor_fraction", "spread_pct")


def arch_of_device(device: str) -> str:
    """'cuda:NVIDIA H200 (sm_90)' -> 'sm_90'; 'rocm:MI300X (gfx942)' -> 'gfx942'; 'cpu' -> 'cpu'."""
    m = re.search(r"\b(sm_\d+|gfx\d+[0-9a-f]?)a?\b", device or "")
    if m:
        return m.group(1)
    return "cpu" if (device or "").lower().startswith("cpu") else "unknown"


def _flat(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def kernel_metadata(source: str, metadata: dict, result: EvalResult) -> dict:
    """The metadata a write-back stores: the caller's (task, parent_id, shapes, ...) plus the measurement."""
    head = kernel_header(source)
    arch = str(metadata.get("arch") or arch_of_device(result.device))
    family = str(metadata.get("family") or head.get("family") or infer_family(source))
    task = str(metadata.get("task") or "")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    meta = {k: _flat(v) for k, v in metadata.items() if not k.startswith("for_")}
    meta.update({
        "kind": "kernel", "origin": "writeback", "family": family, "task": task, "arch": arch,
        "title": str(metadata.get("title") or head.get("title") or f"{family} kernel for {task or 'a task'}"),
        "dtype": str(metadata.get("dtype") or head.get("dtype") or "float32"),
        "parent_id": "" if metadata.get("parent_id") is None else str(metadata["parent_id"]),
        "code_hash": code_hash(source), "verified": 1, "created": now, "updated": now,
        "device": result.device, "interpreted": bool(result.interpreted),
        "max_abs_err": result.max_abs_err, **arch_flags(arch),
    })
    t = result.timing
    if t is not None:
        meta.update({"ms": t.ms, "eager_ms": t.eager_ms, "compile_ms": t.compile_ms,
                     "speedup_vs_eager": t.speedup_vs_eager, "speedup_vs_compile": t.speedup_vs_compile,
                     "floor_fraction": t.floor_fraction, "spread_pct": t.spread_pct})
    return {k: v for k, v in meta.items() if v is not None}


def merge_kernel_metadata(old: dict, new: dict) -> dict:
    """A repeat write-back of the same code: the newer measurement wins, except that an interpreted
    (CPU) run never replaces a GPU measurement; targets accumulate; the verification count goes up."""
    merged = dict(old)
    keep_old_measure = new.get("interpreted") and old.get("interpreted") is False and "ms" in old
    for k, v in new.items():
        if k in ("created", "origin", "title", "path", "verified") or k.startswith("for_"):
            continue
        if keep_old_measure and (k in MEASURED or k == "arch"):
            continue
        if k in ("task", "parent_id", "family") and old.get(k) and not v:
            continue
        merged[k] = v
    if not keep_old_measure:
        for k in MEASURED:
            if k not in new:
                merged.pop(k, None)
    archs = [a for a in str(old.get("arch", "")).split(",") + str(merged.get("arch", "")).split(",") if a]
    merged["arch"] = "any" if "any" in archs else ",".join(dict.fromkeys(archs))
    merged.update(arch_flags(merged["arch"]))
    merged["verified"] = int(old.get("verified", 0)) + 1
    return merged


