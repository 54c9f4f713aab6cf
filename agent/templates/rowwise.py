"""Row-reduction template: reductions over a tensor's innermost axes with their prologue and epilogue
fused: softmax, log-softmax, logsumexp, layer/RMS/group/instance norm, L2 normalization, losses
(cross-entropy, MSE, Huber, KL, cosine), sums/means/max/argmax over the last axis, and matrix-vector
products. A row that fits a block is read once (one_pass); wider rows loop per reduction stage (looped), with
online softmax, one-pass mean/variance and a selected sum (cross-entropy's target) folded into the first
pass; long rows split over SPLIT programs per row plus a combine kernel, GROUP rows at a time so that the
combine's second read of a group comes from L2, or in one persistent launch whose second pass trails the
first by a row (LAG)."""
from __future__ import annotations

from agent.analysis import TaskAnalysis
from agent.templates import base
from agent.templates.codegen import narrow_rows, next_pow2, pair_rows
from agent.templates.kernels import looped_passes
from agent.templates.params import (L2_BYTES, SMS, held_split, kernel_invalid, l2_groups, lag_split, row_item,
                                   sizes)

NAME = "rowwise"
FAMILIES = ("softmax", "norm", "reduction", "argreduce", "loss", "matvec")


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.main.layout == "row" and not pl.has("scan") and not pl.has("gemm")


def space(analysis: TaskAnalysis) -> dict[str, list]:
    return base.space(analysis)


def default(analysis: TaskAnalysis) -> dict:
    return base.default(analysis)


def variants(analysis: TaskAnalysis) -> list[dict]:
    """The default, the other row strategy (one-pass vs looped; a one-pass row held at bf16 takes 8 warps, not
    16: codegen.narrow_rows; one with per-element outputs holds bf16 pairs: codegen.pair_rows), split rows
    where they apply, and, where the rows of a two-pass kernel outgrow L2, a split whose chunks stay in
    registers across the row's combine (COOP, second: the input read once), a split in one launch whose second
    read trails the first (LAG, third) and a split run in groups of rows that fit L2; where the default's rows
    are read twice and many, persistent programs next (params.persistent). A looped default that reads its row
    again, with eviction hints that keep it in L2 for the later pass (evict), comes second, or third after a form
    that reads the row once; the looped alternative takes them too, and in 4096-wide chunks is followed by
    2048-wide ones at 8 warps. A one-pass bf16 row that fits L2 comes second as pairs, two rows a program at 4
    warps; a looped row read once ends with other chunks (reads_once)."""
    d = default(analysis)
    main = base.plan(analysis).main
    streams = streams_rows(main)
    out = [d]
    other = {**d, "mode": "looped", "BLOCK_R": 2048, "BLOCK_O": 1, "num_warps": 8} if d["mode"] == "one_pass" \
        else {**d, "mode": "one_pass", "num_warps": 8 if narrow_rows(main) else 16, "BLOCK_O": 1}
    if other["mode"] == "looped" and looped_passes(main, other) > 1:
        # a row read again, kept in L2 for it (evict): on an H200 (session 20) an RMSNorm over 16384x8192 bf16
        # ran 0.1506 -> 0.1339 ms in 2048-wide chunks at 8 warps, 0.1319 -> 0.1286 in 4096-wide at 16 (compile's
        # 0.1283, the one-pass default's 0.1335)
        other = {**other, "evict": 1, **({"BLOCK_R": 4096, "num_warps": 16} if sizes(main)[1] >= 8192 else {})}
    if other["mode"] == "one_pass" and pair_rows(main):  # a program a row: two blocks an SM hold their pairs
        other = {**other, "pairs": 1, **({"PERSIST": 0} if "PERSIST" in d else {})}
    if other["mode"] == "one_pass" and streams:
        other = {**other, "evict": 1}
    if d.get("SPLIT", 1) > 1:
        out.append({**d, "SPLIT": max(8, d["SPLIT"] // 8)})
    if d.get("welford"):
        out.append({**d, "welford": 2})
    out.append(other)
    if other.get("BLOCK_R") == 4096 and other.get("evict"):
        # and 2048-wide chunks at 8 warps: on an H200 (session 69, ms) PolyNorm over 16384x8192 bf16 (three sums of
        # powers a row) ran 0.1471 so, 0.1524 at 4096 and 16 warps, 0.1762 in one pass (compile's 0.1480)
        out.append({**other, "BLOCK_R": 2048, "num_warps": 8})
    groups = l2_groups(main) if "GROUP" in space(analysis) and d["mode"] == "looped" else []
    if groups and main.writes_elements:
        # first: a chunk a program, held in registers across the row's combine (the input read once); then the
        # split's passes in one launch, the second read a row behind the first, from L2
        out.insert(1, {**d, **held_split(main)})
        out.insert(2, {**d, "BLOCK_O": 1, "BLOCK_R": 4096, "num_warps": 8, "LAG": 1, "SPLIT": lag_split(main)})
        group = groups[-1]
        split = min(2048, max(8, next_pow2(-(-4 * SMS // group))))
        while split > 8 and 2 * -(-sizes(main)[1] // split) < 4096:  # each split at least half a block
            split //= 2
        out.append({**d, "BLOCK_O": 1, "BLOCK_R": 4096, "num_warps": 8, "SPLIT": split, "GROUP": group})
    if d.get("PERSIST") == 0:  # rows read twice, many, one a SM: persistent programs second (params.persistent)
        out.insert(1, {**d, "PERSIST": 1})
    if d["mode"] == "one_pass" and streams:
        out.insert(1, {**d, "evict": 1, "num_warps": min(8, d["num_warps"])})
    elif d["mode"] == "one_pass" and pair_rows(main) and d.get("PERSIST", 0) == 0:
        # rows that fit L2 held as pairs, two a program at 4 warps: on an H200 (session 31) an RMSNorm over
        # 4096x4096 bf16 ran 0.0204 ms three times, the default's 8 warps a row 0.0211 (Liger's 0.0210-0.0212)
        out.insert(1, {**d, "pairs": 1, "BLOCK_O": 2, "num_warps": 4, "evict": 1})
    out = [p for p in out if kernel_invalid(main, p) is None]
    if d["mode"] == "looped" and d.get("SPLIT", 1) == 1 and looped_passes(main, d) > 1:
        # a row read again, kept in L2 for it: second, or third after a form that reads the row once; at most 16
        # warps (on an H200, session 32, fp32 rows of 65536 and 65535 in 16384-wide chunks, ms, 32 -> 16 warps:
        # 4.11 -> 4.08, and realigned (kernels._realign) 4.74 -> 4.54)
        once = len(out) > 1 and (out[1].get("COOP") or out[1]["mode"] == "one_pass")
        out.insert(2 if once else 1, {**d, "evict": 1, "num_warps": min(16, d["num_warps"])})
    if reads_once(main, d):
        out += [p for p in ({**d, "BLOCK_R": 8192, "num_warps": 16}, {**d, "BLOCK_R": 2048, "num_warps": 8}) if p != d]
    return out


def streams_rows(main) -> bool:
    """Whether a one-pass row kernel's variants try its loads with the `evict` hint second: rows of twice L2 or
    more, read once, with a per-element output. On an H200 (session 29, bf16, ms, hint off -> on): softmax over
    2048x32768 0.0714 -> 0.0696, RMSNorm over 16384x8192 0.1334 -> 0.1285, LayerNorm 0.1436 -> 0.1427 at 16
    warps and 0.1336 -> 0.1287 at 8 (its two reductions ran faster at 8, RMSNorm's one level); softmax over
    8192x4096 (64 MB) level, RMSNorm and LayerNorm over 4096x4096 (32 MB) 2-4% slower, cross-entropy over
    4096x32000 (no per-element output) 1.3% slower at its 8 warps."""
    o, r, _ = sizes(main)
    return o * r * row_item(main) >= 2 * L2_BYTES and main.writes_elements


def reads_once(main, d: dict) -> bool:
    """Whether a looped default reads its rows once and writes nothing per element (cross-entropy over a
    vocabulary: an online log-sum-exp and the target's logit in one pass), so that its variants end with wider
    chunks at 16 warps and narrower ones at 8: no one chunk was fastest at both sizes. On an H200
    (session 31, bf16, the whole forward, ms, as 8192 at 16 warps / 4096 at 8 / 2048 at 8): 4096x32000 0.0753 /
    0.0777 / 0.0784, 2048x128256 0.1389 / 0.1370 / 0.1358."""
    return d["mode"] == "looped" and d.get("SPLIT", 1) == 1 and looped_passes(main, d) == 1 and not main.writes_elements


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
