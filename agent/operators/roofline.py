"""Roofline-guided structural moves: what the fittest measured candidate's gap to its floor, its kind of bound,
its kernels' device times and its compile metadata say to try next, before random parameter moves.

    for move in moves(analysis, template, params, result, task.analysis):
        ...   # move.params: a whole configuration; move.reason: one line, why

A result without a GPU timing, or at its floor (agent/graph.py floor_bar, the search's own stop), gets no move.
The rules look at the Triton kernel with the most device time (EvalResult.kernel_ms; without a profile, the
template's main kernel), in this order:
  spills    its registers spill (EvalResult.compile), not under a cap of its own (maxnreg): more warps, then a
            smaller tile (a convolution: a narrower K tile, then more warps; but a plain deep one's K steps of 64
            more warps first)
  registers a Triton convolution, or a held split (COOP: each program holds its chunk through the row's
            combine, so the chunks an SM holds are its data in flight), whose floor is its bytes
            (tools/profile.bytes_bound) and whose registers, not its shared memory, hold it to fewer programs
            an SM than it could hold (EvalResult.compile): each cap on a thread's registers that fits more
            than the one before, the least strict first (maxnreg; a held split counts the whole rows it runs at
            once, since a row's programs wait for each other: level 1's 35 at 2 rows ran 4.83 ms uncapped,
            5.23 at 5 programs an SM, still 2 rows, and 4.38 at 6, 3 rows); convolutions on
            an H200 at 128: level 1's 79 and 59 and level 2's 21 in 64-position tiles 1.03-1.13x faster, level
            1's 81 and 86 and level 2's 15 and 26 0.81-0.99x, and 50, 54 and 57, whose floors are their
            products, 0.69-0.76x). Its intensity against the ridge of fp32's FMA rate calls 79 and
            59 compute-bound, but their tf32x3 products take less time than their bytes
  reads     memory-bound, a row kernel that reads its rows more than once: the pass fusions that are off (online
            softmax, Welford, the folded target), the row held in registers (one_pass), persistent programs whose
            rows in flight fit L2, a split in one launch whose second read trails its first by a row (LAG), a
            split run in groups of rows that fit L2 (its second read from L2), eviction hints that keep a row in
            L2 for its later passes (evict), the last pass walking back over what L2 still holds, a split's
            output pass as a flat kernel
  gemm      the main GEMM: the vendor GEMM under the Triton epilogue (impl), FMA products split into TF32 parts
            (precision tf32x3: a convolution's in registers, a matrix product's operands once in memory), split
            operands' tiles walked by a persistent program an SM (persistent), a convolution's other tiles, a
            rows tile over two batch elements (SAMPLES), split-K where the output tiles do not fill the GPU,
            tile shapes nearer the output's (more tiles where they do not fill it, larger ones where they do)
  chunks    memory-bound, a looped row kernel that already reads its rows once: its chunk loop software-
            pipelined, the online softmax's max in the form params.online_form picks (fewer instructions),
            then longer chunks per iteration and more warps (on an H200, cross-entropy over 128k logits read once
            went from 1.37x its floor to 1.29x pipelined; 16384-wide chunks over 32 warps were slower)
  programs  memory-bound, fewer programs than SMs: smaller row or column blocks, rows split over programs
  windows   memory-bound, a plane kernel whose windows read 16-byte aligned rows: lanes taking VEC outputs
            each, the windows built from vector loads (Gen.window_lanes)
Before them all, whichever kernel takes the time: a memory-bound convolution in rows tiles whose norm reads its
output for statistics tries those statistics in the convolution's epilogue (stats_epilogue), and once they are
there, where its products cost less than its output's bytes, a second launch computing it again for the norm's
output instead of writing it and reading it back (recompute).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from agent.context import RunConfig
from agent.graph import floor_bar
from agent.operators.template import config_key
from agent.templates import base
from agent.templates.codegen import SM_SMEM_BYTES, next_pow2, register_programs
from agent.templates.gemm import persistent_pays, vendor_loses
from agent.templates.implicit_gemm import conv_tiles, gemm_dims, outer_steps
from agent.templates.kernels import looped_passes, online_pairs
from agent.templates.params import (MAX_PER_SM, SMS, deep_steps, gemm_tiles, held_split, interleaved_tiles,
                                    kernel_default, kernel_invalid, kernel_space, l2_groups, lag_split, lanes,
                                    online_form, persistent, rows_form, sizes)
from agent.templates.schedule import Kernel
from agent.templates.split_operands import pays
from agent.templates.stats_epilogue import Pool, Stats, recompute_pays, stats_pair
from tools.profile import bytes_bound
from tools.results import EvalResult

BLOCK_RESERVED = 1024  # an SM's shared memory each block takes beside its own (codegen.SM_SMEM_BYTES)
MARGIN = RunConfig.floor_margin  # "at the floor" for the proposer is the stop's, at the default margin
KERNEL_INDEX = re.compile(r"_kernel(\d+)(?:_\w+)?$")  # a Triton kernel's name in a template candidate: _row_kernel7
FUSIONS = (("online", "the online softmax, its max and sum in one pass"),
           ("welford", "Welford's mean and variance in one pass"),
           ("fold", "the target's pick folded into the first pass"))
TILES = {"row": ("BLOCK_O", "BLOCK_R"), "col": ("BLOCK_I", "BLOCK_R"), "flat": ("BLOCK",),  # what sizes a tile
         "plane": ("BLOCK_H", "BLOCK_W"), "gemm": ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
         "attention": ("BLOCK_M", "BLOCK_N"), "rnn": ("BLOCK_H", "BLOCK_K")}


@dataclass
class Move:
    params: dict  # the whole configuration to evaluate (the template's parameters, "kernels" included)
    reason: str  # one line: what was measured and what to try
    kernel: int | None = None  # the kernel it retunes through params["kernels"]; None: the template's main kernel


def moves(analysis, template, params: dict, result: EvalResult, task: dict, margin: float = MARGIN) -> list[Move]:
    """Structural moves from `params` (a configuration of `template`, fitted to this task) whose candidate measured
    `result`, the most promising first; `task` is the task's analysis in its JSON form (TaskContext.analysis)."""
    t = result.timing
    if t is None or t.interpreted or not t.floor_fraction or t.floor_fraction >= floor_bar(task, margin):
        return []
    pl = base.plan(analysis, params)
    i = hot_kernel(pl, result.kernel_ms)
    kernel = pl.kernels[i]
    own = base._kernel_params(params)
    current = {**kernel_default(kernel), **params.get("kernels", {}).get(str(i), {})} if i != pl.primary \
        else base.fitted(kernel, own)
    tunable = i != pl.primary or current is own  # the parameters describe it (not a vendor GEMM's epilogue)
    intensity = t.flops / t.bytes if t.bytes else analysis.intensity
    bound = "compute" if intensity > analysis.ridge else "memory"
    head = f"{bound}-bound at {1 / t.floor_fraction:.2f}x the floor"
    found: list[tuple[dict, str]] = []  # (changes to the hot kernel's parameters, why), or plan-level changes
    if tunable:
        found += _spills(kernel, current, result, i)
        found += _registers(kernel, current, result, i) if bytes_bound(t.copy_ms, t.floor_ms) else []
        if bound == "memory" and kernel.layout == "row":
            found += _reads(kernel, current) + _chunks(kernel, current) + _held_rows(kernel, current)
    if kernel.layout == "gemm" and i == pl.primary:
        found += _gemm(analysis, template, kernel, params, vendor_loses(pl, kernel.nodes[0]))
    if bound == "memory" and tunable:
        found += _programs(kernel, current)
    vec = lanes(kernel, current) if bound == "memory" and tunable and kernel.layout == "plane" else {}
    if vec:
        found.append((vec, f"its windows load a tap at a time: try {vec['VEC']} outputs a lane from vector loads "
                           f"(VEC)"))
    out, seen = [], set()
    stats = None if params.get("stats") else stats_pair(pl.kernels, pl.primary, base.fitted(pl.main, own))
    if bound == "memory" and isinstance(stats, (Stats, Pool)):  # the whole plan's move, first
        what = "statistics" if isinstance(stats, Stats) else "sums over its positions"
        found.insert(0, ({"stats": 1}, f"kernel {stats.row_kernel} reads the convolution's output for its "
                                       f"{what}: try them in the convolution's epilogue (stats)"))
    if params.get("impl") == "torch" and "triton" in template.space(analysis).get("impl", []):
        found.insert(0, ({"impl": "triton"}, "a vendor GEMM, its time in no Triton kernel's profile: try the Triton "
                                             "one at these tiles, the epilogue in it (impl torch->triton)"))
    st = stats_pair(pl.kernels, pl.primary, base.fitted(pl.main, own)) if params.get("stats") else None
    if bound == "memory" and not params.get("recompute") and isinstance(st, Stats) and \
            recompute_pays(pl.kernels, pl.primary, st):
        found.insert(0, ({"recompute": 1}, f"kernel {st.row_kernel} reads back the convolution's output, whose "
                                           f"products cost less than its bytes: compute them again instead "
                                           f"(recompute)"))
    for changes, why in found:
        plan_wide = bool({"stats", "recompute", "impl"} & set(changes))
        child = {**params, **changes} if i == pl.primary or plan_wide else _retuned(params, i, changes)
        key = config_key(child)
        if child == params or key in seen or base.invalid(analysis, child) is not None:
            continue
        seen.add(key)
        out.append(Move(child, f"{head}, {why}", None if i == pl.primary or plan_wide else i))
    return out


def hot_kernel(pl: base.Plan, kernel_ms: dict[str, float]) -> int:
    """The index of the plan's Triton kernel that took the most device time, or its main kernel without a profile."""
    for name, _ in sorted(kernel_ms.items(), key=lambda kv: -kv[1]):
        i = _index(name)
        if i is not None and i < len(pl.kernels) and pl.kernels[i].kind != "torch_gemm":
            return i
    return pl.primary


def row_reads(kernel: Kernel, p: dict) -> int:
    """How often a row kernel under parameters `p` reads each row: once held in registers, else once per reduction
    stage left after the pass fusions (kernels.py), plus a pass writing the row; a split reads its chunk, then
    again to write it, unless it holds the chunk (COOP)."""
    full = kernel.writes_elements
    if p.get("SPLIT", 1) > 1:
        return 1 + (full and not p.get("COOP"))
    if p.get("mode") == "one_pass" or p.get("BLOCK_R", 1024) >= sizes(kernel)[1]:
        return 1
    return looped_passes(kernel, p)


# --- the rules: each gives (changes, why) for the hot kernel ---------------------------------------------
def _compiled(result: EvalResult, i: int) -> list:
    """The compile metadata (KernelInfo) of the plan's kernel i, one per launch that reported it."""
    return [k for k in (result.compile.kernels if result.compile else []) if _index(k.name) == i]


def _spills(kernel: Kernel, p: dict, result: EvalResult, i: int) -> list[tuple[dict, str]]:
    infos = _compiled(result, i)
    spills = sum(k.spills or 0 for k in infos)
    if not spills or p.get("maxnreg"):  # a cap's spill is the price the cap chose: more warps would undo it
        return []
    registers = max((k.registers or 0 for k in infos), default=0)
    fact = f"{spills} registers spilled ({registers} a thread at {p.get('num_warps', 4)} warps)"
    space, out = kernel_space(kernel), []
    warps = p.get("num_warps", 4) * 2
    if warps in space.get("num_warps", []):
        out.append(({"num_warps": warps}, f"{fact}: try num_warps {warps // 2}->{warps}"))
    smaller = _smaller_tile(kernel, p, space)
    if smaller:
        out.append((smaller, f"{fact}: try a smaller tile ({_words(p, smaller)})"))
    # a convolution's registers go to its gathered [K, M] index tiles: a narrower K first (on one H100, level 2's
    # 3-channel transposed convolutions ran 1.4-1.9x faster at BLOCK_K 16 than 32, slower at 8 warps); but not
    # a plain deep one's K steps of 64 (params.deep_steps), which spill and still win: on an H200 (session 63)
    # level 1's 62 ran 8.669 ms at K 32, 7.873 at K 64 on 4 warps and 7.656 on 8, the search's pick there and on
    # level 2's 54
    conv = kernel.layout == "gemm" and kernel.nodes[0].fn == "conv"
    deep = conv and p.get("BLOCK_K") == 64 and deep_steps(kernel.nodes[0], {**p, "BLOCK_K": 32})
    return out[::-1] if conv and not deep else out


def _registers(kernel: Kernel, p: dict, result: EvalResult, i: int) -> list[tuple[dict, str]]:
    infos = [k for k in _compiled(result, i) if k.registers]
    conv = kernel.layout == "gemm" and kernel.nodes[0].fn == "conv" and p.get("impl", "triton") == "triton"
    held = kernel.layout == "row" and p.get("COOP")  # on an H200, level 1's 35: 103 a thread, 4 programs an SM
    # streamed tiles launch per_sm programs an SM, so a cap fitting more takes as many more: on an H200 (session
    # 54) level 2's 21 (176 registers, 2 an SM) ran 1.524 ms at a cap of 168 alone, 1.442 with per_sm 3
    stream = conv and p.get("tiles") == "stream"
    if not (conv or held) or p.get("maxnreg") or not infos or any(k.spills for k in infos):
        return []
    registers, shared = max(k.registers for k in infos), max(k.shared_bytes or 0 for k in infos)
    threads = 32 * p.get("num_warps", 4)

    def programs(cap: int) -> int:  # an SM's blocks under `cap` registers a thread, allocated 8 at a time
        return min(register_programs(cap, threads), SM_SMEM_BYTES // (shared + BLOCK_RESERVED))

    def at_once(cap: int) -> int:  # what runs at once: programs, or a held split's whole rows (the rest poll)
        if held:
            return min(programs(cap) * SMS // p["SPLIT"], sizes(kernel)[0])
        return min(programs(cap), MAX_PER_SM) if stream else programs(cap)

    now, unit = programs(registers), " rows at once" if held else ""
    fits, out = at_once(registers), []
    for cap in sorted((c for c in kernel_space(kernel).get("maxnreg", []) if c), reverse=True):
        if at_once(cap) > fits:  # a stricter cap only where it runs more than the last
            fits = at_once(cap)
            move, what = ({"maxnreg": cap, "per_sm": fits}, "maxnreg, per_sm") if stream \
                else ({"maxnreg": cap}, "maxnreg")
            out.append((move, f"{registers} registers a thread at {p.get('num_warps', 4)} warps hold it to {now} "
                              f"programs an SM: try at most {cap} ({fits}{unit}; {what})"))
    return out


def _smaller_tile(kernel: Kernel, p: dict, space: dict) -> dict:
    if kernel.layout == "row" and p.get("mode") == "one_pass" and p.get("BLOCK_O", 1) == 1:
        if "looped" in space["mode"]:
            return {"mode": "looped", "BLOCK_R": min(4096, max(space["BLOCK_R"]))}
        return {}
    keys = [k for k in TILES.get(kernel.layout, ()) if k in p and p[k] // 2 in space.get(k, [])
            and not (k == "BLOCK_R" and kernel.layout == "row" and p.get("mode") == "one_pass")]
    conv = kernel.layout == "gemm" and kernel.nodes[0].fn == "conv" and "BLOCK_K" in keys
    key = "BLOCK_K" if conv else max(keys, key=lambda k: p[k], default=None)
    return {key: p[key] // 2} if key else {}


def _reads(kernel: Kernel, p: dict) -> list[tuple[dict, str]]:
    reads = row_reads(kernel, p)
    if reads < 2:
        return []
    fact, space, out = f"{reads} reads per row", kernel_space(kernel), []
    for key, words in FUSIONS:
        if key in space and not p.get(key, 1):
            out.append(({key: 1}, f"{fact}: try {words} ({key} 0->1)"))
    if "one_pass" in space["mode"] and p.get("mode") != "one_pass":
        row = {"mode": "one_pass", "BLOCK_O": 1}
        warps = next((w for w in space["num_warps"] if w >= p.get("num_warps", 4)
                      and kernel_invalid(kernel, {**p, **row, "num_warps": w}) is None), None)
        if warps:
            out.append(({**row, "num_warps": warps}, f"{fact}: try the row held in registers, read once (one_pass)"))
    persist = persistent(kernel, p, space)
    if persist:
        out.append((persist, f"{fact}: try {persist['PERSIST'] * SMS} persistent programs taking rows in turn, "
                             f"the rows in flight within L2 (its later reads from L2)"))
    groups = l2_groups(kernel) if "SPLIT" in space and kernel.writes_elements else []
    fused = {k: p.get(k) or 1 for k, _ in FUSIONS if k in space}  # a split takes one pass
    held = {**held_split(kernel), **fused}
    if groups and kernel_invalid(kernel, {**p, **held}) is None:
        out.append((held, f"{fact}: try a chunk a program, held in registers while the row's statistics are "
                          f"combined, so the row is read once (SPLIT {held['SPLIT']}, COOP 0->1)"))
    lagged = {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": min(4096, max(space["BLOCK_R"])), "num_warps": 8, "GROUP": 0,
              "LAG": 1, "SPLIT": lag_split(kernel), "COOP": 0, **fused}
    if groups and not p.get("LAG") and kernel_invalid(kernel, {**p, **lagged}) is None:
        out.append((lagged, f"{fact}: try the split in one launch, each chunk's second read a row behind its "
                            f"first, from L2 (SPLIT {lagged['SPLIT']}, LAG 0->1)"))
    if groups and not p.get("GROUP"):
        group = groups[-1]
        grouped = {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": min(4096, max(space["BLOCK_R"])), "num_warps": 8,
                   "GROUP": group, "LAG": 0, "COOP": 0, **fused}
        valid = [s for s in space["SPLIT"] if s > 1 and kernel_invalid(kernel, {**p, **grouped, "SPLIT": s}) is None]
        split = min((s for s in valid if s * group >= 4 * SMS), default=max(valid, default=0))
        if split:
            out.append(({**grouped, "SPLIT": split}, f"{fact}: try a split run {group} rows at a time, its second "
                                                      f"read from L2 (SPLIT {split}, GROUP {group})"))
    if "evict" in space and not p.get("evict") and p.get("mode") == "looped" and p.get("SPLIT", 1) == 1:
        out.append(({"evict": 1}, f"{fact}: try the earlier passes' loads kept in L2 (evict_last) and the last "
                                  f"pass's let go first (evict 0->1)"))
    if "tail_first" in space and not p.get("tail_first"):
        out.append(({"tail_first": 1}, f"{fact}: try the last pass from the row's end, first re-reading what L2 "
                                       f"still holds (tail_first 0->1)"))
    if p.get("SPLIT", 1) > 1 and not (p.get("FLAT") or p.get("LAG") or p.get("COOP") or p.get("GROUP")) and \
            kernel.writes_elements:
        out.append(({"FLAT": 1}, f"{fact}: try the output pass as a flat kernel over the rows' statistics, a block "
                                 f"a program (FLAT 0->1)"))
    return out


def _chunks(kernel: Kernel, p: dict) -> list[tuple[dict, str]]:
    if p.get("mode") != "looped" or p.get("SPLIT", 1) > 1 or row_reads(kernel, p) > 1:
        return []
    space, br, warps = kernel_space(kernel), p.get("BLOCK_R", 1024), p.get("num_warps", 4)
    out = []
    if not p.get("pipeline") and 1 in space.get("pipeline", []):
        out.append(({"pipeline": 1, "num_stages": max(3, p.get("num_stages", 1))},
                    f"rows read once, {br}-wide chunks: try the chunk loop software-pipelined, the next chunks' "
                    f"loads in flight while one computes (pipeline 0->1)"))
    form = online_form(kernel) if online_pairs(kernel) else None
    if p.get("online", 1) not in (0, form) and form in space.get("online", []):
        where = "per group of a thread's 16 bytes" if form == 3 else "once per chunk"
        out.append(({"online": form}, f"rows read once: try the online softmax's max taken {where} (online "
                                      f"{p.get('online', 1)}->{form}), fewer instructions per element"))
    for times in (4, 2):
        more = {"BLOCK_R": br * times, "num_warps": min(max(space["num_warps"]), warps * times)}
        if more["BLOCK_R"] in space["BLOCK_R"]:
            out.append((more, f"rows read once, {br}-wide chunks: try more bytes in flight ({_words(p, more)})"))
    return out


def _held_rows(kernel: Kernel, p: dict) -> list[tuple[dict, str]]:
    """A row held in registers (one_pass) wider than a chunk: the row in 4096-wide chunks at 16 warps, then 2048 at
    8, a pass read again kept in L2 (evict). PolyNorm over 16384x8192 bf16 (session 70, ms) in one pass at 16 warps
    ran 0.1978 on an H100 (0.1762 on an H200, session 69), in 4096-wide chunks 0.1810 (0.1524) and in 2048-wide
    ones 0.1842 (0.1470); the search had spent its budget of 4 on one-pass forms and parameter moves."""
    space, width = kernel_space(kernel), sizes(kernel)[1]
    if p.get("mode") != "one_pass" or p.get("SPLIT", 1) > 1 or "looped" not in space.get("mode", []) or \
            width <= 4096:
        return []
    out = []
    for block, warps in ((4096, 16), (2048, 8)):
        chunked = {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": block, "num_warps": warps}
        if p.get("pairs"):
            chunked["pairs"] = 0
        if "evict" in space and looped_passes(kernel, {**p, **chunked}) > 1:
            chunked["evict"] = 1
        valid = block in space["BLOCK_R"] and warps in space["num_warps"]
        if valid and kernel_invalid(kernel, {**p, **chunked}) is None:
            words = ", ".join(f"{k} {p.get(k, 0)}->{v}" for k, v in chunked.items() if p.get(k, 0) != v)
            out.append((chunked, f"a row of {width} held in registers at {p.get('num_warps', 4)} warps: try it in "
                                 f"{block}-wide chunks ({words})"))
    return out


def _programs(kernel: Kernel, p: dict) -> list[tuple[dict, str]]:
    o, r, i = sizes(kernel) if kernel.layout in ("row", "col") else (0, 0, 0)
    space = kernel_space(kernel)
    if kernel.layout == "row":
        programs = math.ceil(o / min(p.get("BLOCK_O", 1), next_pow2(o))) * p.get("SPLIT", 1)
    elif kernel.layout == "col":
        programs = o * math.ceil(i / p.get("BLOCK_I", 64))
    elif kernel.layout == "flat":
        programs = math.ceil(math.prod(kernel.domain) / p.get("BLOCK", 1024))
    else:
        return []
    if programs >= SMS:
        return []
    fact = f"{programs} programs for {SMS} SMs"
    if kernel.layout == "row" and p.get("BLOCK_O", 1) > 1:
        return [({"BLOCK_O": 1}, f"{fact}: try one row per program (BLOCK_O {p['BLOCK_O']}->1)")]
    if kernel.layout == "row" and "SPLIT" in space and p.get("SPLIT", 1) == 1:
        split = {"mode": "looped", "BLOCK_R": min(4096, max(space["BLOCK_R"]))}
        valid = [s for s in space["SPLIT"] if s > 1 and kernel_invalid(kernel, {**p, **split, "SPLIT": s}) is None]
        s = min((s for s in valid if s * o >= 4 * SMS), default=max(valid, default=0))
        return [({**split, "SPLIT": s}, f"{fact}: try each row split over {s} programs (SPLIT 1->{s})")] if s else []
    key = {"col": "BLOCK_I", "flat": "BLOCK"}.get(kernel.layout)
    if key and p.get(key, 0) // 2 in space.get(key, []):
        return [({key: p[key] // 2}, f"{fact}: try smaller blocks ({key} {p[key]}->{p[key] // 2})")]
    return []


def _gemm(analysis, template, kernel: Kernel, p: dict, no_vendor: bool) -> list[tuple[dict, str]]:
    """Moves for the main GEMM or convolution; with `no_vendor` (gemm.vendor_loses) none to the vendor's."""
    batch, m, n, k = gemm_dims(kernel.nodes[0])
    bm, bn = p.get("BLOCK_M", 64), p.get("BLOCK_N", 64)
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * batch
    space, out = template.space(analysis), []
    if "torch" in space.get("impl", []) and p.get("impl") != "torch" and not no_vendor:
        out.append(({"impl": "torch"}, "a Triton GEMM: try the vendor GEMM under the Triton epilogue "
                                       "(impl triton->torch)"))
    if p.get("precision", "ieee") == "ieee" and "tf32x3" in space.get("precision", []) and p.get("BLOCK_K", 1) > 1 \
            and kernel.nodes[0].fn == "conv":  # 1.17-2.31x faster on 26 of 28 (gemm.split_products)
        out.append(({"impl": "triton", "precision": "tf32x3", "num_stages": 1},
                    "a convolution's fp32 dot steps in FMA products: try each operand split into two TF32 parts "
                    "on tensor cores (precision ieee->tf32x3, one pipeline stage)"))
    if p.get("precision", "ieee") == "ieee" and "tf32x3" in space.get("precision", []) and \
            kernel.nodes[0].fn != "conv" and p.get("shapes", "static") == "static" and pays(kernel.nodes[0]):
        out.append(({"impl": "triton", "precision": "tf32x3", "num_stages": min(3, p.get("num_stages", 3)),
                     "persistent": int(persistent_pays(m, n, batch, p))},
                    "an fp32 matrix product in FMA products: try its operands split once into TF32 parts, three "
                    "tensor-core products a step (precision ieee->tf32x3)"))  # 1.8x cuBLAS's (split_operands)
    if p.get("precision") == "tf32x3" and kernel.nodes[0].fn != "conv" and not p.get("persistent") and \
            p.get("shapes", "static") == "static" and p.get("SPLIT_K", 1) == 1 and persistent_pays(m, n, batch, p):
        out.append(({"impl": "triton", "persistent": 1}, f"{tiles} output tiles of split operands, a program each: "
                                                         "try a program an SM walking them, its parts read by TMA "
                                                         "(persistent 0->1)"))  # 2-7% (gemm.persistent_pays)
    if p.get("BLOCK_K", 1) > 1 and outer_steps(kernel.nodes[0]):  # 1.4-1.8x faster on six KernelBench tasks
        out.append(({"impl": "triton", **gemm_tiles(kernel)}, f"a phased convolution over few input channels: try "
                                                             f"outer-product K steps (BLOCK_K {p['BLOCK_K']}->1)"))
    if p.get("tiles") == "rows" and p.get("SAMPLES", 1) == 1 and kernel.domain[0] % 2 == 0:  # H200: 0.80-1.11x
        out.append(({"SAMPLES": 2}, "a rows tile loads each weight for its own outputs alone: try a row of two batch "
                                    "elements a program, each weight serving both (SAMPLES 1->2)"))
    if "tiles" in space:  # measured both ways on KernelBench's convolutions: 3x faster for some, 2x slower others
        now = conv_tiles(kernel.nodes[0], p)
        for other in [t for t in space["tiles"] if t != now]:  # with interleaved tiles' own sizes, or off them
            split = p.get("precision") == "tf32x3"  # tiles of their own (params.interleaved_tiles)
            sizes_of = interleaved_tiles(kernel, split) if other == "interleaved" else rows_form(kernel.nodes[0]) \
                if other == "rows" else gemm_tiles(kernel) if now in ("interleaved", "rows") else {}
            out.append(({"impl": "triton", **sizes_of, "tiles": other}, f"a Triton convolution: try {other} tiles "
                                                                        f"(tiles {now}->{other})"))
    if "packed" in space and p.get("impl", "triton") == "triton":  # either way 1.6x for some (params.packed_default)
        now = p.get("packed", 0)
        out.append(({"packed": 1 - now}, f"a Triton convolution: try its weight {'as it is' if now else 'packed'} "
                                         f"(packed {now}->{1 - now})"))
    splits = [s for s in space.get("SPLIT_K", [1]) if s > 1]
    if tiles < SMS and splits and p.get("SPLIT_K", 1) == 1:
        s = min((s for s in splits if s * tiles >= SMS), default=max(splits))
        out.append(({"impl": "triton", "SPLIT_K": s}, f"{tiles} output tiles for {SMS} SMs: try SPLIT_K 1->{s}"))
    shapes = [(bm // 2, bn), (bm, bn // 2)] if tiles < SMS else [(bm * 2, bn), (bm, bn * 2)]
    for tm, tn in sorted(shapes, key=lambda s: abs(math.log2(s[0] / s[1]) - math.log2(max(m, 1) / max(n, 1)))):
        if tm in space.get("BLOCK_M", []) and tn in space.get("BLOCK_N", []):
            out.append(({"impl": "triton", "BLOCK_M": tm, "BLOCK_N": tn, "num_warps": 8 if tm * tn >= 8192 else 4},
                        f"{tiles} output tiles of {bm}x{bn} for {SMS} SMs: try {tm}x{tn} tiles"))
    return out


def _retuned(params: dict, i: int, changes: dict) -> dict:
    tuned = dict(params.get("kernels", {}))
    tuned[str(i)] = dict(sorted({**tuned.get(str(i), {}), **changes}.items()))
    return {**params, "kernels": dict(sorted(tuned.items()))}


def _index(name: str) -> int | None:
    m = KERNEL_INDEX.search(name)
    return int(m.group(1)) if m else None


def _words(p: dict, changes: dict) -> str:
    return ", ".join(f"{k} {p.get(k)}->{v}" for k, v in changes.items())
