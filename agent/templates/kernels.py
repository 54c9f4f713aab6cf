"""Whole @triton.jit kernels from a scheduled Kernel and its parameters (the layouts are in codegen.py).

    code = render_kernel(kernel, "k0", {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 2048, "num_warps": 8})

With p["shapes"] == "dynamic" (set by program.py for the kernels over the batch, batch_of) a flat or row kernel
takes the batch, its domain's leading dim, as the run-time argument n0: its masks and its grid follow it, every
other size stays a constant. A column kernel (a reduction over a middle dim) needs no mask for it: only its grid,
one program per outer index and tile of the inner dims, follows the batch, its tile picked by the batch at call
time (_col_tiers). Offsets need no batch size (the leading dim is addressed by division alone). A
matrix-product kernel (mm, no SPLIT_K) takes its M, the rows of its output, as n0 the same way: N and K stay
constants, the rows are always masked.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import re

import torch

from agent.templates.attention_kernel import render_attention
from agent.templates.codegen import (DESCRIPTOR_IMPORT, NEUTRAL, SMS, Gen, KernelCode, Launch, Scope, _leaves,
                                     descriptor_name, dot_cast, indent, kernel_header, next_pow2, store_lines,
                                     walk_lead, walk_step, walks)
from agent.templates.fold import fold_sums, is_zero, reads_reduction
from agent.templates.implicit_gemm import gemm_block, render_conv
from agent.templates.ir import Leaf, Node, contiguous_strides
from agent.templates.pointwise_ops import number
from agent.templates.rnn_kernel import render_rnn
from agent.templates.reductions import chan_merge, reduced, shifted_merge
from agent.templates.schedule import Kernel, squeezed
from agent.templates.split_operands import descriptors, operand_parts, products, split_launches


def online_pairs(kernel: Kernel) -> dict[Node, Node]:
    """sum(exp(x - max(x))) reductions that can run in the same pass as their max (online softmax):
    {sum node: max node}."""
    pairs = {}
    for r in kernel.nodes:
        if r.op != "reduce" or r.fn != "sum" or not isinstance(r.args[0], Node):
            continue
        e = r.args[0]
        if e.op != "pw" or e.fn != "exp" or not isinstance(e.args[0], Node):
            continue
        w = e.args[0]
        if w.op != "pw" or w.fn != "sub" or len(w.args) != 2 or w.attrs.get("alpha", 1) != 1:
            continue
        x, m = w.args
        if isinstance(m, Node) and m.op == "reduce" and m.fn == "max" and m.args[0] is x and \
                kernel.level.get(m) == "red":
            pairs[r] = m
    return pairs


NAN_KEEPING = {"add", "sub", "rsub", "mul", "div", "true_divide", "neg", "reciprocal", "exp", "exp2", "log", "log2",
               "log1p", "sqrt", "rsqrt"}  # pointwise ops whose result is NaN where an argument is


def stabilizers(kernel: Kernel) -> set[Node]:
    """The maxes whose exp(x - max) the kernel sums that may lose a NaN: reduced by tl.max and tl.maximum, faster
    than a NaN-keeping combine (which ran the interpreter's one-pass softmax more than 2x slower). A row with a NaN
    has a NaN sum; a max qualifies where every stored value its NaN would reach is NaN through that sum anyway (a
    softmax, a cross-entropy), not where the max is stored or compared (logsumexp's infinite rows)."""
    out = set()
    for total, m in online_pairs(kernel).items():
        nan, differs = {total}, {m}  # NaN in a row with a NaN either way; maybe not NaN with the NaN lost
        for n in kernel.nodes:
            if n is total or n is m:
                continue
            args = [a for a in n.args if isinstance(a, Node)]
            if (n.op == "pw" and n.fn in NAN_KEEPING or n.op == "reduce" and n.fn == "sum") and \
                    any(a in nan for a in args):
                nan.add(n)
            elif any(a in differs for a in args):
                differs.add(n)
        if not any(n in kernel.stores for n in differs):
            out.add(m)
    return out


def welford_pairs(kernel: Kernel) -> dict[Node, Node]:
    """sum((x - sum(x) * c)^2) reductions whose mean reduction can share their pass (Welford's update):
    {sum of squares node: sum node}."""
    pairs = {}
    for r in kernel.nodes:
        if r.op != "reduce" or r.fn != "sum" or not isinstance(r.args[0], Node):
            continue
        e = r.args[0]
        if e.op == "pw" and e.fn == "mul" and len(e.args) == 2 and e.args[0] is e.args[1]:
            d = e.args[0]
        elif e.op == "pw" and e.fn == "pow" and len(e.args) == 2 and e.args[1] == 2:
            d = e.args[0]
        else:
            continue
        if not (isinstance(d, Node) and d.op == "pw" and d.fn == "sub" and d.attrs.get("alpha", 1) == 1):
            continue
        x, m = d.args
        if not (isinstance(m, Node) and m.op == "pw" and m.fn == "mul" and isinstance(m.args[0], Node)):
            continue
        s = m.args[0]
        if s.op == "reduce" and s.fn == "sum" and s.args[0] is x and kernel.level.get(s) == "red" and \
                isinstance(m.args[1], float) and abs(m.args[1] * _count(kernel) - 1) < 1e-9:
            pairs[r] = s
    return pairs


def _count(kernel: Kernel) -> int:
    return math.prod(kernel.domain[k] for k in kernel.rdims)


def reduction_stages(kernel: Kernel, pairs: dict | None = None) -> dict[Node, int]:
    memo: dict = {}
    pairs = pairs or {}

    def dep(m) -> int:
        if not isinstance(m, Node) or m not in kernel.level:
            return 0
        if m not in memo:
            if m in pairs:
                memo[m] = dep(pairs[m])
            elif m.op == "reduce":
                memo[m] = 1 + dep(m.args[0])
            else:
                memo[m] = max((dep(a) for a in m.inputs), default=0)
        return memo[m]

    return {m: dep(m) for m in kernel.nodes if m.op == "reduce"}


BATCH_ARG, BATCH_HOST = "n0", "kw_batch"  # the batch in a dynamic kernel, and in the forward that launches it


def _dynamic(kernel: Kernel, p: dict) -> bool:
    if p.get("shapes", "static") != "dynamic":
        return False
    if kernel.layout == "gemm":
        g = kernel.nodes[0]
        if g.fn != "mm" or len(kernel.domain) != 2 or g.attrs.get("split_k", 1) > 1:
            raise ValueError("shapes='dynamic' covers GEMM kernels only as a plain mm whose M is the batch")
        return True
    if kernel.layout not in ("flat", "row", "col") or 0 in kernel.rdims or p.get("SPLIT", 1) > 1:
        raise ValueError("shapes='dynamic' covers flat kernels, and row and column kernels without SPLIT, over the "
                         "batch")
    return True


def _times(n: str, c: int) -> str:
    return n if c == 1 else f"{n} * {c}"


def render_kernel(kernel: Kernel, name: str, p: dict) -> KernelCode:
    _dynamic(kernel, p)  # refuses what shapes="dynamic" does not cover, before any layout's code runs
    if kernel.layout == "rnn":
        return render_rnn(kernel, name, p)
    if kernel.layout == "attention":
        return render_attention(kernel, name, p)
    if kernel.layout == "gemm":
        return render_conv(kernel, name, p) if kernel.nodes[0].fn == "conv" else _gemm(kernel, name, p)
    if kernel.layout == "flat" or kernel.layout == "plane" and p.get("layout") == "flat":
        return _flat(kernel, name, p)
    if kernel.layout == "plane":
        return _plane(kernel, name, p)
    if kernel.layout == "row" and p.get("fold", 1):
        kernel = fold_sums(kernel)  # a selected sum (cross-entropy's target) joins the first pass
    if (p.get("SPLIT", 1) > 1 or "EPI_PARTS" in p) and kernel.layout == "row":
        code = _split(kernel, name, p)
        return _row_groups(code, Gen(kernel, name, p).O, p["GROUP"]) if p.get("GROUP") else code
    if p.get("SPLIT", 1) > 1 and kernel.layout == "col":
        return _col_split(kernel, name, p)
    return _reduction(kernel, name, p)


def col_splittable(kernel: Kernel) -> bool:
    """Whether a column kernel's reduced axis can be split over programs (_col_split): sums, maxima and minima,
    none reading another's result, and no per-element output."""
    reduces = [m for m in kernel.nodes if m.op == "reduce"]
    return kernel.layout == "col" and bool(reduces) and not kernel.writes_elements and \
        all(r.fn in ("sum", "max", "min") for r in reduces) and set(reduction_stages(kernel).values()) == {1}


def _col_split(kernel: Kernel, name: str, p: dict) -> KernelCode:
    """A column reduction whose reduced axis is split over SPLIT programs a tile of columns: each reduces its
    chunk of rows into partials ([SPLIT, outer, columns], a buffer a reduction), and a second kernel combines
    each column's partials and computes and stores what follows them. The programs take the first chunk of
    every tile, then every second chunk, and so on. On an H200 (session 36), level 1's max over dim 1 of
    128x4096x4095 (2048 tiles of 256 columns) ran 2.310 ms a whole column a program, 2.203 / 2.185 / 2.158 at
    SPLIT 2 / 4 / 8 so, and 2.378 / 2.313 / 2.269 with a tile's chunks on consecutive programs instead."""
    gen = Gen(kernel, name, p)
    meta = _sizes(kernel, gen, p)
    p = {**p, **meta}
    gen.block_r, split = meta["BLOCK_R"], p["SPLIT"]
    chunk = math.ceil(math.ceil(gen.R / split) / meta["BLOCK_R"]) * meta["BLOCK_R"]
    tiles = gen.O * math.ceil(gen.I / meta["BLOCK_I"])
    reduces = [r for r in kernel.nodes if r.op == "reduce"]
    rng, stages = _range(p)
    gen.top.lines += [f"pid_s = tl.program_id(0) // {tiles}"] + _prologue(gen, p, f"(tl.program_id(0) % {tiles})")
    gen.top.lines += [f"for r0 in {rng}(pid_s * {chunk}, pid_s * {chunk} + {chunk}, BLOCK_R{stages}):"] + indent(
        _chunk(gen, "r0") + _accumulate(gen, reduces, []).lines)
    size, place = gen.O * gen.I, f"ro * {gen.I} + ri"  # a partial buffer's stride a chunk; a column's place
    parts = [f"{name}_part{t}" for t in range(len(reduces))]
    for r, buf in zip(reduces, parts):
        gen.reduce_end(r)
        gen.top.lines.append(f"tl.store({gen.ptr(buf)} + pid_s * {size} + {place}, {gen.top.cache[r]}, mask=rmask)")
    blocks = {"BLOCK_R": meta["BLOCK_R"], "BLOCK_I": meta["BLOCK_I"]}
    first = KernelCode("\n".join(kernel_header(name, gen, list(blocks)) + indent(gen.top.lines)), [
        Launch(name, (split * tiles,), list(gen.ptrs), blocks, p.get("num_warps", 4), p.get("num_stages", 1))])
    comb = Gen(kernel, name + "_final", p)
    comb.top.lines += _prologue(comb, p) + [f"rs = tl.arange(0, {next_pow2(split)})[:, None]",
                                            f"pm = rmask & (rs < {split})"]
    for r, buf in zip(reduces, parts):
        pt, value = comb.fresh("pt"), comb.fresh("r")
        comb.top.lines += [f"{pt} = tl.load({comb.ptr(buf)} + rs * {size} + {place}, mask=pm, other={NEUTRAL[r.fn]})",
                           f"{value} = {reduced(r.fn, pt, 0)}"]
        comb.top.cache[r], comb.kinds[r] = value, "f"
    store_lines(comb, list(kernel.stores.items()))
    src = kernel_header(name + "_final", comb, ["BLOCK_I"]) + indent(comb.top.lines)
    second = Launch(name + "_final", (tiles,), list(comb.ptrs), {"BLOCK_I": meta["BLOCK_I"]}, 4, 1)
    temps = {buf: ((split, size), torch.float32) for buf in parts}
    return KernelCode(first.source + "\n\n\n" + "\n".join(src), first.launches + [second], temps)


def _flat(kernel: Kernel, name: str, p: dict) -> KernelCode:
    gen = Gen(kernel, name, p)
    # evict 1: the tensors it walks loaded evict_last; 2: the smaller ones it reads again (elementwise.variants)
    gen.load_evict = "evict_last" if p.get("evict") == 1 else ""
    gen.reread_evict = "evict_last" if p.get("evict") == 2 else ""
    numel = math.prod(kernel.domain)
    block = min(p.get("BLOCK", 1024), next_pow2(numel))
    dyn = _dynamic(kernel, p)
    inner = numel // kernel.domain[0] if dyn else numel
    pid = "tl.program_id(0).to(tl.int64)" if gen.big else "tl.program_id(0)"
    if kernel.box and not dyn:  # programs over the box alone; offs its elements' places in the whole domain
        start, shape = kernel.box
        numel, box_cs, cs = math.prod(shape), contiguous_strides(shape), contiguous_strides(kernel.domain)
        terms = [f"({f'q // {box_cs[d]}' if box_cs[d] > 1 else 'q'}{f' % {n}' if d else ''}"
                 f"{f' + {start[d]}' if start[d] else ''}) * {cs[d]}" for d, n in enumerate(shape) if n > 1]
        fixed = sum(start[d] * cs[d] for d, n in enumerate(shape) if n == 1)
        place = " + ".join(terms + ([str(fixed)] if fixed or not terms else []))
        block = min(p.get("BLOCK", 1024), next_pow2(numel))
        gen.top.lines += [f"q = {pid} * BLOCK + tl.arange(0, BLOCK)", f"mask = q < {numel}", f"offs = {place}"]
    else:
        gen.top.lines += [f"offs = {pid} * BLOCK + tl.arange(0, BLOCK)",
                          f"mask = offs < {_times(BATCH_ARG, inner) if dyn else numel}"]
    store_lines(gen, list(kernel.stores.items()))
    src = kernel_header(name, gen, ["BLOCK"], [BATCH_ARG] if dyn else []) + indent(gen.top.lines)
    grid = (f"({_times(BATCH_HOST, inner)} + {block - 1}) // {block}",) if dyn else (math.ceil(numel / block),)
    args = list(gen.ptrs) + ([BATCH_HOST] if dyn else [])
    return KernelCode("\n".join(src), [Launch(name, grid, args, {"BLOCK": block}, p.get("num_warps", 4),
                                              p.get("num_stages", 1))])


def _plane(kernel: Kernel, name: str, p: dict) -> KernelCode:
    """Window ops over outputs of rank 3 or more ((N, C, H, W), (N, C, D, H, W), (N, C, 1, L), unbatched
    forms): one plane of the last two dims per program, a 2-D tile of it, so input rows are read contiguously
    and per-channel weights are scalars. With p["ROWS"] a program takes that many tiles down the plane in turn.
    With p["walk"] a program takes its tile of every plane of the dim before them in turn (a 3-D pool's output
    depth), and a window overlapping down that dim reduces only the input planes it does not share with the last
    output's, the rest carried from that one (Gen.window, codegen.walks): each input plane is read once a tile.
    Where only outputs `apart` apart share planes (a dilated window: codegen.walk_step), a program walks those
    equal to rd mod apart. Where a program's first output shares planes of the input, not only padding, with the
    one before it (walk_lead), the walk starts at that one, its taps computed for the carry and its stores masked
    off. On an H200 (session 36) KernelBench's 3-D max pool (k 3, s 2, dilation 3) ran 1.302 -> 1.187 ms so.

    Triton gives all the loads of a kernel the vector width its best-aligned one allows (4 fp32 a lane where one
    tap is 16-byte aligned), also to the taps that are not, which it then loads an element at a time: a warp's
    load spans 512 bytes for 128 it uses, and L1, not HBM, bounds the kernel. p["unaligned"] gives every load
    one element per lane instead (kernel_header): 128 bytes a warp, but no vector loads where taps align."""
    walk = bool(p.get("walk"))  # a program walks the dim before the plane's (Gen.window: walks)
    nc, oh, ow = math.prod(kernel.domain[:-3 if walk else -2]), kernel.domain[-2], kernel.domain[-1]
    bh, bw = min(p.get("BLOCK_H", 8), next_pow2(oh)), min(p.get("BLOCK_W", 64), next_pow2(ow))
    vec = min(p.get("VEC", 1), bw)  # outputs a lane takes along the row: Gen.window_lanes
    gen = Gen(kernel, name, {**p, "VEC": vec})
    rank, apart, lead = len(kernel.domain), 1, False
    if walk:
        gen.groups = [(list(range(rank - 3)), "ro"), ([rank - 3], "od"), ([rank - 2], "rh"), ([rank - 1], "rw")]
        window = next(m for m in kernel.nodes if walks(m, rank))
        apart, lead = walk_step(window)[0], walk_lead(window)
        gen.walk_back = apart * lead
    rows = max(1, min(p.get("ROWS", 1), math.ceil(oh / bh)))  # tiles a program takes down the plane, in a loop
    nh, nw = math.ceil(oh / (bh * rows)), math.ceil(ow / bw)
    big = ".to(tl.int64)" if gen.big else ""
    gen.top.lines += ["pid = tl.program_id(0)", f"ro = (pid // {apart * nh * nw}){big}", f"tile = pid % {nh * nw}"]
    if apart > 1:  # the outputs a program walks: those equal to rd mod apart
        gen.top.lines.append(f"rd = (pid // {nh * nw}) % {apart}")
    if vec > 1:  # a lane's VEC outputs: rg the first, lane the offsets from it (Gen.window_lanes)
        gen.top.lines += [f"rg = (tile % {nw}) * BLOCK_W + (tl.arange(0, BLOCK_W // VEC) * VEC)[None, :, None]",
                          "lane = tl.arange(0, VEC)[None, None, :]", "rw = rg + lane"]
    else:
        gen.top.lines.append(f"rw = (tile % {nw}) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]")
    head = len(gen.top.lines)
    step = f"(tile // {nw}) * {bh * rows} + hh * BLOCK_H" if rows > 1 else f"(tile // {nw}) * BLOCK_H"
    gen.top.lines.append(f"rh = {step} + tl.arange(0, BLOCK_H){'[:, None, None]' if vec > 1 else '[:, None]'}")
    if lead:  # the output before the walk's first is computed for its carry, its taps masked by the plane's
        gen.top.lines += [f"tmask = (rh < {oh}) & (rw < {ow})", "mask = tl.where(od >= 0, tmask, False)"]
        gen.tile_mask = "tmask"
    else:
        gen.top.lines.append(f"mask = (rh < {oh}) & (rw < {ow})")
    gen.top.lines += [f"hmask = rh < {oh}"] if vec > 1 else []
    store_lines(gen, list(kernel.stores.items()))
    if rows > 1:
        before, body = _loop_invariant(gen.top.lines[head:], {"hh"})
        gen.top.lines[head:] = before + [f"for hh in range({rows}):"] + indent(body)
    if walk:
        before, body = _loop_invariant(gen.top.lines[head:], {"od"})
        od = kernel.domain[-3]
        loop = [f"for od in range({-lead}, {od}):" if lead else f"for od in range({od}):"] if apart == 1 else [
            f"for wi in range({-lead}, ({od} + {apart - 1} - rd) // {apart}):", f"    od = rd + wi * {apart}"]
        gen.top.lines[head:] = before + gen.walk_init + loop + indent(body)
    meta = {"BLOCK_H": bh, "BLOCK_W": bw, **({"VEC": vec} if vec > 1 else {})}
    src = kernel_header(name, gen, list(meta), unaligned=bool(p.get("unaligned"))) + indent(gen.top.lines)
    launch = Launch(name, (nc * apart * nh * nw,), list(gen.ptrs), meta, p.get("num_warps", 4),
                    p.get("num_stages", 1))
    return KernelCode("\n".join(src), [launch])


def _loop_invariant(lines: list[str], varying: set[str]) -> tuple[list[str], list[str]]:
    """A loop's body split into the assignments that give the same value on every iteration, to run once
    before it, and the rest, each part in order. An assignment stays in the loop if it assigns or reads a
    name in `varying`, one the loop assigns more than once, or one assigned in the loop from such a name.
    Triton keeps a load in a loop that stores where the load might read, but a candidate's kernels store
    only to buffers of their own: in KernelBench's 3x7 depthwise convolution (ROWS 4) the filter's 21 scalar
    loads ran in every row's iteration, and ran once so, 0.3436 -> 0.2898 ms on an H200 (session 22)."""
    statements = []
    for line in lines:
        try:
            statements.append(ast.parse(line.strip()).body[0])
        except SyntaxError:  # a block's header: `for t in range(3):` read with a body, `else:` as nothing
            try:
                statements.append(ast.parse(line.strip() + " pass").body[0])
            except SyntaxError:
                statements.append(None)

    def targets(stmt) -> set[str]:
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.For)):
            nodes = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            return {n.id for t in nodes for n in ast.walk(t) if isinstance(n, ast.Name)}
        return set()

    counts: dict[str, int] = {}
    for stmt in statements:
        for name in targets(stmt):
            counts[name] = counts.get(name, 0) + 1
    varying = set(varying) | {name for name, n in counts.items() if n > 1}
    before, body = [], []
    for line, stmt in zip(lines, statements):
        simple = isinstance(stmt, ast.Assign) and not line.startswith(" ")  # not in a block of the body
        reads = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} if simple else set()
        if simple and not (reads | targets(stmt)) & varying:
            before.append(line)
        else:
            body.append(line)
            varying |= targets(stmt)
    return before, body


def _prologue(gen: Gen, p: dict, block: str = "tl.program_id(0)") -> list[str]:
    """The indices and mask of a program's rows (or columns); `block` is its block of rows in a row layout."""
    big = ".to(tl.int64)" if gen.big else ""
    if gen.layout == "row":
        start = "row0 + " if p.get("GROUP") else ""  # a group of rows launched on its own (_row_groups)
        dyn = p.get("shapes") == "dynamic"
        rows = _times(BATCH_ARG, gen.O // gen.D[0]) if dyn else gen.O
        exact = not (dyn or start) and gen.O % p["BLOCK_O"] == 0  # every program's rows exist: a constant mask
        return [f"ro = ({start}{block} * BLOCK_O + tl.arange(0, BLOCK_O)[:, None]){big}",
                "rmask = tl.full([BLOCK_O, 1], 1, tl.int1)" if exact else f"rmask = ro < {rows}"]
    # a dynamic column kernel picks its tile at call time (_col_tiers): its count of column tiles follows it
    n_i = f"tl.cdiv({gen.I}, BLOCK_I)" if p.get("shapes") == "dynamic" else math.ceil(gen.I / p["BLOCK_I"])
    return [f"ro = ({block} // {n_i}){big}",
            f"ri = (({block} % {n_i}) * BLOCK_I + tl.arange(0, BLOCK_I)[None, :]){big}",
            f"rmask = ri < {gen.I}"]


def _chunk(gen: Gen, start: str) -> list[str]:
    gen.chunk_start = start
    big = ".to(tl.int64)" if gen.big else ""
    if gen.layout == "row":
        lanes = "BLOCK_R - 1 - tl.arange(0, BLOCK_R)" if gen.flip else "tl.arange(0, BLOCK_R)"
        return [f"rr = ({start} + {lanes}[None, :]){big}", f"mask = rmask & (rr < {gen.R})"]
    return [f"rr = ({start} + tl.arange(0, BLOCK_R)[:, None]){big}", f"mask = (rr < {gen.R}) & rmask"]


def _loop(gen: Gen, body: list[str], reverse: bool = False) -> list[str]:
    """The chunk loop over a row, or from its end with `reverse`. In a row layout the whole chunks need no bound
    on the reduced index: they run unmasked (but for rmask), and the remainder chunk, if any, with the bound,
    after them (before them in reverse); rows of no multiple of 16 bytes start their whole chunks on a word
    (_realign)."""
    rng, stages = _range(gen.p)
    if gen.layout != "row":
        return [f"for r0 in {rng}(0, {gen.R}, BLOCK_R{stages}):"] + indent(_chunk(gen, "r0") + body)
    n = gen.R // gen.block_r
    head = [f"for it in {rng}(0, {n}{stages}):", f"    r0 = ({n - 1} - it) * BLOCK_R"] if reverse else \
        [f"for r0 in {rng}(0, {n * gen.block_r}, BLOCK_R{stages}):"]
    chunk = _chunk(gen, "r0")
    index, rest, before = chunk[:1], chunk + body, []
    width = _realign(gen, body) if n else 0
    if width:
        big = ".to(tl.int64)" if gen.big else ""
        before = [f"rbase = (ro * {gen.R} + {width - 1}) // {width} * {width}", f"hd = rbase - ro * {gen.R}"]
        before = [] if before[1] in gen.top.lines else before  # set by the row's first loop
        index = [f"rq = (r0 + tl.arange(0, BLOCK_R)[None, :]){big}", "rr = rq + hd"]
        rest = [index[0], f"rr = (rq + hd) % {gen.R}", f"mask = rmask & (rq < {gen.R})"] + body
        body = [_walk(gen.R).sub("rbase + rq", line) for line in body]
    whole = head + indent(index + ["mask = tl.broadcast_to(rmask, [BLOCK_O, BLOCK_R])"] + body)
    rest = [f"r0 = {n * gen.block_r}"] + rest if n * gen.block_r < gen.R else []
    return before + (rest + whole if reverse else whole + rest)


def _walk(r: int) -> re.Pattern:
    """A row kernel's offset of an element of rows of r contiguous elements, as Gen.offset writes it."""
    return re.compile(rf"\bro \* {r} \+ rr\b(?!\s*[*/%])")


def _realign(gen: Gen, body: list[str]) -> int:
    """Elements in 16 bytes where a row kernel's whole chunks start on them instead of at multiples of BLOCK_R
    from each row's start, 0 where they do not. Rows of a length that is no multiple of 16 bytes (KernelBench's
    L1 and L2 norms over 65535 fp32 columns) start anywhere in a 16-byte word, and their loads and stores went
    one element at a time: each row's whole chunks then start hd = rbase - ro * R elements in, at rbase, its
    first aligned element, and its remainder chunk wraps around the row, taking the elements after them and the
    hd before. Only where every per-element access in the body walks the rows (ro * R + rr; no weight along
    them, no chunk loads at r0, no index kept as argmax's) and nothing depends on the order of the chunks (no
    scan). On an H200 (session 32, ms, evict_last for the second pass, 16384-wide chunks at 32 warps): the L1
    norm 5.27 -> 4.72, the L2 norm 5.18 -> 4.74, their floor 4.02 (at 16 warps 4.54 and 4.44; rows of 65536,
    aligned, 4.08); without the eviction hint 5.38 -> 5.43. The remainder's loads and stores split in two,
    its whole words from rbase and the rest at the row's own indices, ran slower: 5.91 and 5.88."""
    floats = [a.dtype.itemsize for m in gen.k.nodes for a in m.args
              if isinstance(a, Leaf) and a.kind == "tensor" and a.dtype.is_floating_point]
    width = 16 // min(floats, default=4)
    left = [_walk(gen.R).sub("", line) for line in body]
    if gen.layout != "row" or gen.k.scan_reverse is not None or gen.R % width == 0 or gen.block_r % width \
            or left == body or any(re.search(r"\b(rr|r0)\b", line) for line in left):
        return 0
    return width


def _range(p: dict) -> tuple[str, str]:
    """A chunk loop's range and its extra arguments: Python's, or with p["pipeline"] Triton's tl.range,
    software-pipelined over num_stages (the next chunks' loads issued, through shared memory, while this one
    computes)."""
    if not p.get("pipeline") or p.get("num_stages", 1) < 2:
        return "range", ""
    return "tl.range", f", num_stages={p['num_stages']}"


def _point_sum(gen: Gen, r: Node, emit: bool = True) -> bool:
    """A row's sum of where(i == t, e, 0), i its reduced index and t one value per row (cross-entropy's target),
    is e at i = t, or 0 where t is outside the row: emitted as one masked load per row, ahead of any chunk loop,
    instead of a compare and select per element. False (nothing emitted) for any other reduction; with `emit`
    false, only whether r is one. Rows only: a column kernel (a class dim ahead of the spatial ones, as in a
    segmentation's cross-entropy) sums the select over its tile."""
    w = r.args[0] if r.fn == "sum" and len(gen.k.rdims) == 1 and gen.layout == "row" else None
    if not (isinstance(w, Node) and w.op == "pw" and w.fn == "where" and is_zero(w.args[2])
            and isinstance(w.args[0], Node) and w.args[0].fn == "eq"):
        return False
    index, target = w.args[0].args
    if isinstance(target, Leaf) and target.kind == "iota":
        index, target = target, index
    if not (isinstance(index, Leaf) and index.kind == "iota" and (index.value, index.step) == (0, 1)
            and gen.leaf_offset(index, w.args[0].shape, "full") == "rr") or reads_reduction(gen.k, target):
        return False
    outer, gen.body = gen.body, Scope()
    start, gen.chunk_start = gen.chunk_start, None  # rr is the target here, not a chunk
    t = gen.arg(target, w.args[0], "full")
    ok = t.kind == "i" and not gen.per_element(t.code)
    if not (ok and emit):
        gen.body, gen.chunk_start = outer, start
        return ok
    at = f"tl.full([BLOCK_O, 1], {t.code}, tl.int64)" if number(t) is not None else \
        f"tl.broadcast_to({t.code}, [BLOCK_O, 1])"  # one target for every row (all ignored): a number, not a tensor
    gen.body.lines += [f"rr = {at}", f"mask = rmask & (rr >= 0) & (rr < {gen.R})"]
    # e at the target: a one-pass kernel's values over the whole row (and its rows held as pairs) are not it
    row_values, pairs, gen.pairs = gen.take_per_element(), gen.pairs, set()
    gen.reduce_now(r)
    gen.top.cache.update(row_values)
    # its own names for the index and mask: a chunk loop's rr and mask must not be assigned before the loop
    gen.top.lines += _own_indices(gen.body.lines, "_t")
    gen.body, gen.chunk_start, gen.pairs = outer, start, pairs
    return True


def _own_indices(lines: list[str], suffix: str) -> list[str]:
    """`lines` with a chunk's index and mask (rr, mask; not the mask= keyword) renamed with `suffix`."""
    return [re.sub(r"\b(rr|mask)\b(?!=)", rf"\1{suffix}", line) for line in lines]


def looped_passes(kernel: Kernel, p: dict) -> int:
    """How many chunk loops over its row a looped row kernel under `p` makes: one per reduction stage left after
    the pass fusions (but point sums, a load per row), plus one writing the row."""
    k = fold_sums(kernel) if p.get("fold", 1) else kernel
    pairs = {**(online_pairs(k) if p.get("online", 1) else {}), **(welford_pairs(k) if p.get("welford", 1) else {})}
    points = point_sums(k, p)
    return len({st for r, st in reduction_stages(k, pairs).items() if r not in points}) + \
        k.writes_elements


def point_sums(kernel: Kernel, p: dict) -> set[Node]:
    """The reductions of `kernel` that a row kernel under `p` emits as one load per row (_point_sum)."""
    probe = Gen(kernel, "probe", p)
    return {r for r in kernel.nodes if r.op == "reduce" and _point_sum(probe, r, emit=False)}


def _accumulate(gen: Gen, plain: list, fused: list, one_chunk: bool = False) -> Scope:
    """Starts the accumulators of these reductions (plain ones, and fused online-softmax or Welford pairs)
    before the loop, and returns the loop body: its lines update them chunk by chunk, its cache names the
    chunk's loaded and computed values. With `one_chunk` the body runs once, on the chunk a Welford pivot
    was taken from: it uses the values the pivot loaded."""
    for r in plain:
        gen.reduce_start(r)
    for kind, second, first in fused:
        getattr(gen, f"{kind}_start")(second, first)
    gen.body = Scope()
    if one_chunk:
        gen.body.cache.update(gen.pivot_values)
    for r in plain:
        gen.reduce_step(r)
    for kind, second, first in fused:
        getattr(gen, f"{kind}_step")(second, first)
    body, gen.body = gen.body, gen.top
    return body


def _sizes(kernel: Kernel, gen: Gen, p: dict) -> dict:
    r = next_pow2(gen.R)
    if gen.layout == "row":
        one_pass = p.get("mode", "one_pass") == "one_pass"
        block_r = r if one_pass else min(p.get("BLOCK_R", 1024), r)
        return {"BLOCK_O": min(p.get("BLOCK_O", 1), next_pow2(gen.O)), "BLOCK_R": block_r}
    block_r = min(p.get("BLOCK_R", 32), r)
    return {"BLOCK_R": block_r, "BLOCK_I": min(p.get("BLOCK_I", 64), next_pow2(gen.I))}


def _reduction(kernel: Kernel, name: str, p: dict, gen: Gen | None = None) -> KernelCode:
    gen = gen or Gen(kernel, name, p)
    gen.stabilizers = stabilizers(kernel)
    meta = _sizes(kernel, gen, p)
    gen.block_r = meta["BLOCK_R"]
    gen.chunk, gen.first_chunk = (lambda start: _chunk(gen, start)), "0"
    p = {**p, **meta}
    one_pass = meta["BLOCK_R"] >= gen.R
    gen.chunk_start = None if one_pass or gen.layout != "row" else "r0"  # the chunk loops' start (_loop)
    stages = reduction_stages(kernel)
    dyn = _dynamic(kernel, p)
    blocks = math.ceil(gen.O / meta["BLOCK_O"]) if gen.layout == "row" else 0
    persist = min(blocks, p["PERSIST"] * SMS) if p.get("PERSIST") and not dyn else 0
    gen.top.lines += _prologue(gen, p, "ob" if persist else "tl.program_id(0)")
    full_stores = [(m, b) for m, b in kernel.stores.items() if kernel.level[m] == "full"]
    red_stores = [(m, b) for m, b in kernel.stores.items() if kernel.level[m] == "red"]
    if one_pass:
        # a row loaded once, evict_last (evict): where it pays, rowwise.streams_rows
        gen.load_evict = "evict_last" if p.get("evict") and gen.layout == "row" else ""
        gen.top.lines += _chunk(gen, "0")
        points = point_sums(kernel, p)
        for k, s in enumerate(sorted(set(stages.values()))):
            gen.restage(k)
            todo = [r for r, st in stages.items() if st == s]
            sums = [r for r in todo if r.fn == "sum" and r not in points] if p.get("group", 1) else []
            for r in todo:
                if r in sums[1:] or _point_sum(gen, r):  # cross-entropy's target: one load per row, not a pass
                    continue
                gen.reduce_sums(sums) if r in sums else gen.reduce_now(r)
        gen.restage(len(set(stages.values())))
        store_lines(gen, full_stores + red_stores)
    else:
        online = online_pairs(kernel) if p.get("online", 1) else {}
        welford = welford_pairs(kernel) if p.get("welford", 1) else {}
        stages = reduction_stages(kernel, {**online, **welford})
        # a row read again: its earlier passes keep it in L2 (evict_last), the last lets it go (evict_first)
        evict = bool(p.get("evict")) and gen.layout == "row" and looped_passes(kernel, p) > 1
        gen.evict = "evict_last" if evict else ""
        for s in sorted(set(stages.values())):
            todo = [r for r, st in stages.items() if st == s]
            fused = [(kind, r, pairs[r]) for kind, pairs in (("online", online), ("welford", welford))
                     for r in todo if r in pairs and pairs[r] in todo]
            plain = [r for r in todo if r not in {x for _, a, b in fused for x in (a, b)} and not _point_sum(gen, r)]
            if not plain and not fused:
                continue
            if evict and s == max(stages.values()) and not full_stores:
                gen.evict = "evict_first"
            gen.top.lines += _loop(gen, _accumulate(gen, plain, fused).lines)
            for r in plain:
                gen.reduce_end(r)
            for kind, second, first in fused:
                getattr(gen, f"{kind}_end")(second, first)
        if full_stores:
            gen.body = Scope()
            gen.evict = "evict_first" if evict else ""
            # a reversed scan over a row in chunks takes each chunk's lanes from its end and scans them forward:
            # Triton's reverse scan ran slower (91_cumsum_reverse on an H200, 32768 x 32768: 2.250 -> 2.164 ms)
            gen.flip = bool(kernel.scan_reverse) and gen.layout == "row"
            store_lines(gen, full_stores)
            reverse = bool(kernel.scan_reverse) if kernel.scan_reverse is not None else bool(p.get("tail_first"))
            gen.top.lines += _loop(gen, gen.body.lines, reverse=reverse)
            gen.body, gen.flip = gen.top, False
        gen.evict = ""
        store_lines(gen, red_stores)
    meta_names = ["BLOCK_O", "BLOCK_R"] if gen.layout == "row" else ["BLOCK_R", "BLOCK_I"]
    if persist:  # each program takes blocks of rows (ob) in turn: persist blocks in flight at a time
        gen.top.lines = [f"for ob in range(tl.program_id(0), {blocks}, {persist}):"] + indent(gen.top.lines)
    src = kernel_header(name, gen, meta_names, [BATCH_ARG] if dyn else []) + indent(gen.top.lines)
    host = []
    if dyn and gen.layout == "col":  # a program per (outer index, tile of the inner dims): no mask on the outer
        host, meta = _col_tiers(gen, name, meta)
        grid = (f"{_times(BATCH_HOST, gen.O // gen.D[0])} * (({gen.I} + {meta['BLOCK_I']} - 1) // {meta['BLOCK_I']})",)
    elif dyn:
        grid = (_blocks(_times(BATCH_HOST, gen.O // gen.D[0]), meta["BLOCK_O"]),)
    elif gen.layout == "row":
        grid = (persist or blocks,)
    else:
        grid = (gen.O * math.ceil(gen.I / meta["BLOCK_I"]),)
    launch = Launch(name, grid, list(gen.ptrs) + ([BATCH_HOST] if dyn else []), {k: meta[k] for k in meta_names},
                    p.get("num_warps", 4), p.get("num_stages", 1))
    return KernelCode("\n".join(src), [launch], host=host)


def _col_tiers(gen: Gen, name: str, meta: dict) -> tuple[list[str], dict]:
    """A dynamic column kernel's tile by the batch at call time: its tuned BLOCK_I where the batch gives at least
    two programs per SM, else narrower tiles, as tall (BLOCK_R) as the tuned tile is large, down to 16 columns.
    Tuned at batch 128, a mean over 4096 rows of 4095 columns launched 16 programs at batch 1, 12x eager's time.
    The host line and the launch's meta, which names its variables."""
    per = gen.O // gen.D[0]  # outer indices per batch entry
    bi, br, rp = meta["BLOCK_I"], meta["BLOCK_R"], next_pow2(gen.R)
    tiers = []  # (smallest batch, BLOCK_I, BLOCK_R), widest tile first
    while True:
        batch = math.ceil(2 * SMS / (per * math.ceil(gen.I / bi)))
        tiers.append((batch, bi, br))
        if batch <= 1 or bi <= 16:
            break
        bi, br = bi // 2, min(rp, br * 2)
    choice = " else ".join(f"({b}, {r}) if {BATCH_HOST} >= {n}" for n, b, r in tiers[:-1])
    last = f"({tiers[-1][1]}, {tiers[-1][2]})"
    bi_name, br_name = f"{name}_bi", f"{name}_br"
    line = f"{bi_name}, {br_name} = " + (f"{choice} else {last}" if choice else last)
    return [line], {**meta, "BLOCK_I": bi_name, "BLOCK_R": br_name}


def _split(kernel: Kernel, name: str, p: dict) -> KernelCode:
    """Long rows with a single reduction stage: SPLIT programs per row each reduce a chunk (the last one a
    remainder) and write partial results (sums, maxima, online-softmax or Welford states); a second kernel,
    again SPLIT programs per row, combines them into the row's statistics and writes its chunk of the
    per-element output. With GROUP, both kernels take a row0 argument and cover GROUP rows from it. Under
    shapes="dynamic" (small_batch only) both take the batch n0; the rows, grids and partial buffers follow it.
    With EPI_PARTS, a convolution's epilogue wrote that many partials a row (stats_epilogue): only the second
    kernel runs, over SPLIT chunks a row."""
    gen = Gen(kernel, name, p)
    gen.stabilizers = stabilizers(kernel)
    group = p.get("GROUP", 0)
    dyn = p.get("shapes") == "dynamic"
    meta = _sizes(kernel, gen, {**p, "mode": "looped"})
    if group:
        meta["BLOCK_O"] = min(meta["BLOCK_O"], group)
    rows = min(group, gen.O) if group else gen.O
    n_rows = _times(BATCH_HOST, gen.O // gen.D[0]) if dyn else rows  # host code: the rows of this call
    gen.block_r = meta["BLOCK_R"]
    split = p.get("SPLIT", 1)
    nparts = p.get("EPI_PARTS", split)  # partials a row
    sp = next_pow2(nparts)
    chunk = math.ceil(math.ceil(gen.R / split) / meta["BLOCK_R"]) * meta["BLOCK_R"]
    gen.chunk, gen.first_chunk = (lambda start: _chunk(gen, start)), f"pid_s * {chunk}"
    online = online_pairs(kernel) if p.get("online", 1) else {}
    welford = welford_pairs(kernel) if p.get("welford", 1) else {}
    fused = [(kind, r, pairs[r]) for kind, pairs in (("online", online), ("welford", welford)) for r in pairs]
    done = {x for _, a, b in fused for x in (a, b)}
    plain = [r for r in kernel.nodes if r.op == "reduce" and r not in done]
    rng, stages = _range(p)
    loop = f"for r0 in {rng}(pid_s * {chunk}, pid_s * {chunk} + {chunk}, BLOCK_R{stages}):"
    lag, held = bool(p.get("LAG")), bool(p.get("COOP"))
    one_launch = lag or held
    block, pid_s = (f"t // {split}", f"t % {split}") if one_launch else ("tl.program_id(0)", "tl.program_id(1)")
    gen.evict = "evict_last" if lag else ""  # kept in L2 for the second read
    gen.top.lines += _prologue(gen, {**p, **meta}, block) + [f"pid_s = {pid_s}"]
    if held:  # a chunk a program, one block, kept in registers for the output (_held)
        steps = _accumulate(gen, plain, fused, one_chunk=True)
        gen.top.lines += ([] if gen.pivot_values else _chunk(gen, gen.first_chunk)) + steps.lines
    else:
        gen.top.lines += [loop] + indent(_chunk(gen, "r0") + _accumulate(gen, plain, fused).lines)
    parts: list[tuple[str, str]] = []  # (buffer, value) per partial result

    def part(value: str) -> str:
        parts.append((f"{name}_part{len(parts)}", value))
        return parts[-1][0]

    for r in plain:
        gen.reduce_end(r)
        part(gen.top.cache[r])
    for kind, second, first in fused:
        getattr(gen, f"{kind}_end")(second, first)
        if kind == "online":
            part(gen.top.cache[first]), part(gen.top.cache[second])
        else:
            count, avg, squares = gen.top.cache[("welford_parts", first)]
            part(count), part(avg), part(squares)
    for buf, value in parts:
        gen.top.lines.append(f"tl.store({gen.ptr(buf)} + ro * {split} + pid_s, {value}, mask=rmask)")
    extra = ["row0"] if group else [BATCH_ARG] if dyn else []
    first_src = kernel_header(name, gen, ["BLOCK_O", "BLOCK_R"], extra) + indent(gen.top.lines)
    launch_a = Launch(name, (_blocks(n_rows, meta["BLOCK_O"]), split), list(gen.ptrs) + ([BATCH_HOST] if dyn else []),
                      meta, p.get("num_warps", 4), p.get("num_stages", 1))

    # the combining kernel: row statistics from the partials, then this program's chunk of the output
    comb = Gen(kernel, name + "_final", p)
    if one_launch:  # one kernel: the same pointers, and names that go on from the first part's
        comb.ptrs, comb.count = gen.ptrs, gen.count
    comb.block_r = meta["BLOCK_R"]
    full = [(m, b) for m, b in kernel.stores.items() if kernel.level[m] == "full"]
    red = [(m, b) for m, b in kernel.stores.items() if kernel.level[m] == "red"]
    rows_read = row_values(kernel) if p.get("FLAT") and full and not (one_launch or group or dyn) else None
    if rows_read is not None:  # the output a flat kernel of its own (flat_output); this one stores row values
        full = []
    block_o = meta["BLOCK_O"] if full else min(next_pow2(rows), max(1, 4096 // sp))
    lines = comb.top.lines
    big = ".to(tl.int64)" if comb.big else ""
    start = "row0 + " if group else ""

    def head(block: str, pid_s: str) -> list[str]:  # a program's rows and split
        return [f"ro = ({start}{block} * BLOCK_O + tl.arange(0, BLOCK_O)[:, None]){big}",
                f"rmask = ro < {_times(BATCH_ARG, gen.O // gen.D[0]) if dyn else gen.O}", f"pid_s = {pid_s}"]

    lines += [] if one_launch else head(block, pid_s)
    merged = None
    if nparts > MERGE_PARTS:  # a convolution's partials (EPI_PARTS), first merged MERGE_PARTS at a time
        merged = _merge(name, [buf for buf, _ in parts], gen.O, nparts)
        parts = [(f"{name}_merged{t}", v) for t, (_, v) in enumerate(parts)]
        nparts = merged.launches[0].grid[1]
        sp = next_pow2(nparts)
    # a held split (one row a program) combines its row's partials as one vector into scalars: as [1, SPLIT]
    # tiles, the combine, which the row's other programs wait for, took level 1's 34_InstanceNorm from 4.28 to
    # 6.40 ms (H200, session 15)
    index, tile = (f"{block} * {split} + rs", "") if held else (f"ro * {nparts} + rs", "[None, :]")
    masked = not held or sp > split
    lines += [f"rs = tl.arange(0, {sp}){tile}"] + [f"pm = {'' if held else 'rmask & '}(rs < {nparts})"] * masked
    it = iter(parts)
    fresh = ", volatile=True" if one_launch else ""  # written by other programs of this launch: not from L1
    keep = "" if held else ", axis=1, keep_dims=True"

    source = {}  # each loaded vector's buffer

    def load(neutral: str) -> str:
        buf, _ = next(it)
        var = comb.fresh("pt")
        source[var] = buf
        mask = f", mask=pm, other={neutral}" if masked else ""
        lines.append(f"{var} = tl.load({comb.ptr(buf)} + {index}{mask}{fresh})")
        return var

    for r in plain:
        comb.top.cache[r] = comb.fresh("r")
        lines.append(f"{comb.top.cache[r]} = {reduced(r.fn, load(NEUTRAL[r.fn]), None if held else 1, not held)}")
    for kind, second, first in fused:
        a, b_ = comb.fresh("r"), comb.fresh("r")
        if kind == "online":
            m, s = load("-3.0e38"), load("0.0")
            lines += [f"{a} = {gen.peak_max(first, m, None if held else 1, keep=not held)}",
                      f"{b_} = tl.sum({s} * tl.exp({m} - {a}){keep})"]
        else:
            states = load("0.0"), load("0.0"), load("0.0")
            if held:  # the row's first mean as the shift: one reduction (reductions.shifted_merge)
                shift = comb.fresh("ws")
                lines.append(f"{shift} = tl.load({comb.ptr(source[states[1]])} + {block} * {split}{fresh})")
                lines += shifted_merge(states, shift, (comb.fresh("wc"), comb.fresh("wa"), a, b_))
            else:
                lines += chan_merge(states, 1, (comb.fresh("wc"), comb.fresh("wa"), a, b_))
        comb.top.cache[first], comb.top.cache[second] = a, b_
    for r in kernel.nodes:
        if r.op == "reduce":
            comb.kinds[r] = "f"
    comb.chunk_start = "r0"  # the output's chunk loop
    if held:
        comb.kinds.update({m: k for m, k in gen.kinds.items() if m not in comb.kinds})
        return _held(kernel, name, p, gen, comb, (full, red), parts, meta, steps)
    if lag:
        return _lagged(kernel, name, p, gen, comb, (head, full, red, loop), parts, meta)
    if full:
        comb.body = Scope()
        store_lines(comb, full)
        lines += [loop] + indent(_chunk(comb, "r0") + comb.body.lines)
        comb.body = comb.top
    out = None
    if rows_read is not None:
        row_bufs = {key: f"{name}_stat{t}" for t, key in enumerate(rows_read)}
        lines += [f"tl.store({comb.ptr(buf)} + ro, {'1.0 / ' if recip else ''}{comb.value(m)}, mask=rmask)"
                  for (m, recip), buf in row_bufs.items()]
        if not p.get("recompute"):  # else the convolution's second launch writes it (stats_epilogue.recomputed)
            out = _flat(flat_output(kernel, row_bufs), name + "_out", {"BLOCK": 1024, "num_warps": 4})
    lines.append("first = rmask & ((ro * 0 + pid_s) == 0)")
    store_lines(comb, red, "first")
    meta_b = ["BLOCK_O", "BLOCK_R"] if full else ["BLOCK_O"]
    second_src = kernel_header(name + "_final", comb, meta_b, extra) + indent(lines)
    launch_b = Launch(name + "_final", (_blocks(n_rows, block_o), split if full else 1),
                      list(comb.ptrs) + ([BATCH_HOST] if dyn else []),
                      {"BLOCK_O": block_o, **({"BLOCK_R": meta["BLOCK_R"]} if full else {})},
                      p.get("num_warps", 4) if full else 4, 1)
    temps = {buf: (f"({n_rows}, {nparts})" if dyn else (gen.O, nparts), torch.float32) for buf, _ in parts}
    if rows_read is not None:
        temps.update({buf: ((gen.O,), torch.float32) for buf in row_bufs.values()})
    codes = [KernelCode("\n".join(first_src), [launch_a])] if "EPI_PARTS" not in p else []
    codes += [merged] if merged else []
    codes += [KernelCode("\n".join(second_src), [launch_b], temps)] + ([out] if out else [])
    return KernelCode("\n\n\n".join(c.source for c in codes if c.source), [x for c in codes for x in c.launches],
                      {k: v for c in codes for k, v in c.temps.items()})


def row_values(kernel: Kernel) -> list[tuple[Node, bool]] | None:
    """The row-level values (reductions, or values computed from them) that the kernel's per-element outputs
    read, each (value, whether it is read as a divisor: its reciprocal is stored, as codegen.Gen.pointwise
    multiplies by it), for a flat kernel to read them as stored rows (flat_output); None where one is not a
    float of the rows' own shape (up to dims of 1), or an output is stored into another buffer or under a
    condition."""
    if kernel.store_when or any(isinstance(b, Leaf) for b in kernel.stores.values()):
        return None
    out = []
    for m in _output_nodes(kernel):
        for i, a in enumerate(m.args):
            if isinstance(a, Node) and kernel.level.get(a) == "red":
                if squeezed(a.shape) != squeezed(kernel.keep_shape) or not a.dtype.is_floating_point:
                    return None
                key = (a, _divisor(m) and i == 1)
                out += [key] * (key not in out)
    return out


def _divisor(m: Node) -> bool:
    return m.fn == "div" and len(m.args) == 2 and not m.attrs.get("rounding_mode")


def _output_nodes(kernel: Kernel) -> list[Node]:
    """The per-element members that the kernel's per-element outputs are computed from, in order."""
    need = [m for m, _ in kernel.stores.items() if kernel.level[m] == "full"]
    seen = set(need)
    while need:
        for a in need.pop().args:
            if isinstance(a, Node) and kernel.level.get(a) == "full" and a not in seen:
                seen.add(a)
                need.append(a)
    return [m for m in kernel.nodes if m in seen]


def flat_output(kernel: Kernel, row_bufs: dict) -> Kernel:
    """A split row kernel's per-element outputs as a flat kernel: each row value they read a leaf over its
    buffer, one value a row (row_bufs: (value, reciprocal) -> buffer), broadcast along the rows; a division by
    one a product with its stored reciprocal. On an H200 (session 18) the output pass of level 1's
    37_FrobeniusNorm_ so ran at torch.compile's speed, 3.528 ms against 3.810 looped over a row's chunks; level
    2's 60's group norm 0.474 against 0.560."""
    leaves = {key: Leaf(f"{key[0].name}_row", key[0].shape, torch.float32, base=buf,
                        strides=contiguous_strides(key[0].shape)) for key, buf in row_bufs.items()}
    new: dict = {}
    for m in _output_nodes(kernel):
        args = [leaves.get((a, _divisor(m) and i == 1), new.get(a, a)) if isinstance(a, Node) else a
                for i, a in enumerate(m.args)]
        recip = _divisor(m) and (m.args[1], True) in leaves
        new[m] = dataclasses.replace(m, fn="mul", args=args) if recip else dataclasses.replace(m, args=args)
    members = list(new.values())
    return Kernel("tile", kernel.domain, nodes=members, level={m: "full" for m in members},
                  stores={new[m]: b for m, b in kernel.stores.items() if kernel.level[m] == "full"})


MERGE_PARTS = 4096  # a row's partials one program of a combining kernel merges as one vector


def _merge(name: str, bufs: list[str], rows: int, parts: int) -> KernelCode:
    """A kernel merging each row's `parts` Welford states (count, mean, sum of squared deviations in `bufs`)
    MERGE_PARTS at a time into one state each, for a combining kernel to merge those (a batch norm's partials from
    a convolution's epilogue: stats_epilogue)."""
    chunks = math.ceil(parts / MERGE_PARTS)
    index = f"ro * {chunks} + tl.program_id(1) + tl.arange(0, 1)"
    lines = ["ro = tl.program_id(0)", "rs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)", f"pm = rs < {parts}"]
    lines += [f"{v} = tl.load({b} + ro * {parts} + rs, mask=pm, other=0.0)" for v, b in zip("nmq", ("p0", "p1", "p2"))]
    lines += chan_merge(("n", "m", "q"), 0, ("count", "mean", "total", "squares"))
    lines += [f"tl.store({b} + {index}, {v})" for b, v in zip(("p3", "p4", "p5"), ("count", "mean", "squares"))]
    src = ["@triton.jit", f"def {name}_merge(p0, p1, p2, p3, p4, p5, BLOCK: tl.constexpr):"] + indent(lines)
    out = [f"{name}_merged{t}" for t in range(3)]
    launch = Launch(f"{name}_merge", (rows, chunks), bufs + out, {"BLOCK": MERGE_PARTS}, 8, 1)
    temps = {**{b: ((rows, parts), torch.float32) for b in bufs}, **{b: ((rows, chunks), torch.float32) for b in out}}
    return KernelCode("\n".join(src), [launch], temps)


LAG_PROGRAMS = 2 * SMS  # a lagged split's persistent programs (on an H200: 264 and 528 alike, 132 no faster)


def _lagged(kernel: Kernel, name: str, p: dict, gen: Gen, comb: Gen, pieces: tuple, parts: list,
            meta: dict) -> KernelCode:
    """A split in one persistent launch (LAG): each program takes tickets in turn. Ticket t reduces chunk t (row
    block t // SPLIT) into its partials, and the row block's last chunk in combines them into the row's
    statistics; then the program writes the output of chunk t - SPLIT once that row block's statistics are in.
    The second read of a chunk trails the first by a row block plus the chunks in flight, so it comes from L2
    (the first read marked evict_last, the second and the output evict_first). Measured: a hand-written form
    of a 112x8-group norm over 8 MB rows read 8.9 GB from HBM (its input is 7.5 GB) and ran 4.75-4.8 ms
    on an H200, where two passes ran 6.0 and compile 5.4. This template's form read 7.6-10.1 GB on an H100;
    it ran level 1's 34_InstanceNorm in 6.14 ms against two passes' 7.62, but 35_GroupNorm_ in 7.70-8.58 ms
    against 8.09 (its per-channel affine gathered per element). A counter per row block (the split's chunks
    in, then one more for its statistics) and the ticket counter start at zero; a program only waits for
    tickets below its own, which are running, so the launch cannot deadlock (and the interpreter's
    one-at-a-time programs never wait)."""
    head, full, red, loop = pieces
    split = p["SPLIT"]
    blocks = math.ceil(gen.O / meta["BLOCK_O"])
    sync = gen.ptr(f"{name}_sync")
    stats = [r for r in kernel.nodes if r.op == "reduce"]
    kept = [(f"{name}_stat{i}", comb.top.cache[r]) for i, r in enumerate(stats)]  # each row's statistics
    done = comb.fresh("done")
    store_lines(comb, red)  # the row's own outputs, by the program that combined its statistics
    combine = comb.top.lines + [f"tl.store({comb.ptr(buf)} + ro, {value}, mask=rmask)" for buf, value in kept]
    body = ["if t < TICKETS:"] + indent(
        gen.top.lines + ["tl.debug_barrier()", f"{done} = tl.atomic_add({sync} + t // {split}, 1, sem=\"acq_rel\")",
                         f"if {done} == {split - 1}:"] +
        indent(combine + ["tl.debug_barrier()", f"tl.atomic_add({sync} + t // {split}, 1, sem=\"release\")"]))
    waiting = comb.fresh("seen")
    cache = {r: comb.top.cache[r] for r in stats}
    comb.top, comb.body = Scope(), Scope()
    comb.top.cache.update(cache)
    comb.evict = "evict_first"  # the second read and the output: let them go first, not the chunks still to come
    store_lines(comb, full)
    after = head(f"(t - LAG) // {split}", f"(t - LAG) % {split}")
    after += [f"{waiting} = tl.atomic_add({sync} + (t - LAG) // {split}, 0, sem=\"acquire\")",
              f"while {waiting} <= {split}:",
              f"    {waiting} = tl.atomic_add({sync} + (t - LAG) // {split}, 0, sem=\"acquire\")"]
    after += [f"{value} = tl.load({comb.ptr(buf)} + ro, mask=rmask, other=0.0, volatile=True)" for buf, value in kept]
    after += comb.top.lines + [loop] + indent(_chunk(comb, "r0") + comb.body.lines)
    body += ["if t >= LAG:"] + indent(after)
    lines = [f"t = tl.atomic_add({sync} + {blocks}, 1)", "while t < TICKETS + LAG:"] + indent(
        body + [f"t = tl.atomic_add({sync} + {blocks}, 1)"])
    tickets = blocks * split
    src = kernel_header(name, comb, ["BLOCK_O", "BLOCK_R", "TICKETS", "LAG"]) + indent(lines)
    launch = Launch(name, (min(tickets + split, LAG_PROGRAMS),), list(comb.ptrs),
                    {**meta, "TICKETS": tickets, "LAG": split}, p.get("num_warps", 4), p.get("num_stages", 1))
    temps = {buf: ((gen.O, split), torch.float32) for buf, _ in parts}
    temps.update({buf: ((gen.O,), torch.float32) for buf, _ in kept})
    temps[f"{name}_sync"] = ((blocks + 1,), torch.int32)
    return KernelCode("\n".join(src), [launch], temps)


# polls for a row's statistics before a held chunk is left to the row's last program, where programs run at
# once (a GPU): a second or more. A row's other chunks, started just before or after, take microseconds; a
# bound near that (256 polls) made programs give up under load, and the last programs' re-reads then held
# the GPU (level 1's 34_InstanceNorm 4.2 -> 47 ms, session 15). In the interpreter, which runs programs one
# at a time, a program never waits (the launch passes SPINS 0 for tensors on a CPU).
HELD_SPINS = 1 << 24
HELD_SWEEP = 1024  # elements at a time in the last program's re-read of chunks left to it
READY = 1 << 30  # a row's state once its statistics are in; below it, the count of chunks left to be re-read


def _held(kernel: Kernel, name: str, p: dict, gen: Gen, comb: Gen, stores: tuple, parts: list, meta: dict,
          steps: Scope) -> KernelCode:
    """A split whose chunks stay in registers (COOP): each program takes a ticket t, loads chunk t (one block,
    row block t // SPLIT), stores its partials and counts itself in. The row's last program in combines the
    partials into the row's statistics, stores them and marks the row READY; every other program polls the
    row's count until every partial is in and combines them itself (a few loads from L2 and one reduction,
    where waiting for the last program's statistics took its combine, its stores and a second poll). Every
    program then writes its chunk's output from the values it holds, so the input is read once. Combining in
    every program, on an H200 (session 35, ms): 34_InstanceNorm 4.27 -> 3.99, 35_GroupNorm_ 5.23 -> 4.84.
    On an H200 (session 15), level 1's 34_InstanceNorm
    ran in 4.26 ms and 35_GroupNorm_ in 5.21 (chunks of 8192 at 4 warps), where the lagged split (its second
    read from L2) ran 5.35 and 5.63 and torch.compile 5.50 and 5.39; hand-written forms of the same schedule
    ran 4.20 and 4.54. The row's other programs wait for its last one: its combine is one vector reduction
    into scalars (_split, reductions.shifted_merge). Hand-edited, 34 ran in 4.28 ms so and in 6.40 where the
    combine took [1, SPLIT] tiles and the statistics came back as [1, 1] tiles.
    A poll is an atomic read: polling with volatile loads (one acquiring atomic after) ran slower on an H200
    where a row has many chunks (session 28: 35, 256 a group, 5.25 -> 5.70 ms; 34, 32 a row, 4.30 -> 4.53) and
    1% faster at 8 (38_L1Norm_, 5.45 -> 5.40, behind its two-pass form's 5.28); a nanosleep between loads no
    better. Chunks of 4096 at 2 warps or 16384 at 8 ran no faster than 8192 at 4 on any of the three.
    A program polls for its row's partials at most SPINS times (HELD_SPINS on a GPU, 0 in the interpreter).
    If they are not in by then (its peers never started: the GPU is shared, or the interpreter runs programs
    one at a time), it marks its chunk and counts it into the row's state, and the last program, which never
    waits, re-reads and writes every chunk counted in before it set READY; a chunk counted in after READY is
    written by its own program. The state word orders the two, and each marked chunk is then taken by one
    exchange of its mark (the sweep's or its own program's), so each chunk is written once, and no wait is
    unbounded: the launch cannot deadlock."""
    full, red = stores
    split = p["SPLIT"]
    blocks = math.ceil(comb.O / meta["BLOCK_O"])
    sync, claims = comb.ptr(f"{name}_sync"), comb.ptr(f"{name}_claim")
    row, state = f"t // {split}", f"{sync} + {blocks} + t // {split}"
    stats = [r for r in kernel.nodes if r.op == "reduce"]
    kept = [(f"{name}_stat{i}", comb.top.cache[r]) for i, r in enumerate(stats)]  # each row's statistics
    merge = list(comb.top.lines)  # the partials merged into the row's statistics
    store_lines(comb, red)  # the row's own outputs, by its last program
    combine = comb.top.lines + [f"tl.store({comb.ptr(buf)} + {row}, {value})" for buf, value in kept]
    cache = {r: comb.top.cache[r] for r in stats}

    def output(values: Scope, start: str) -> list[str]:  # a chunk's output, from `values` or loaded afresh
        comb.top, comb.body = Scope(), values
        comb.top.cache.update(cache)
        chunk = _chunk(comb, start)  # first: a value constant along the chunk is loaded at its start
        store_lines(comb, full)
        return chunk + comb.top.lines + comb.body.lines

    c, sub, arrived, old, seen, spins, mine = (comb.fresh(v) for v in
                                               ("c", "s", "arrived", "old", "seen", "spins", "mine"))
    # The chunks counted in before READY are re-read HELD_SWEEP elements at a time (a kernel's registers are its
    # most at any point), under names of their own: rr and mask assigned in the loop would be carried through
    # it (on sm_90 254 registers a thread). A held chunk's output uses the rr and mask of the first part.
    width = min(HELD_SWEEP, meta["BLOCK_R"])
    swept = output(Scope(), f"{c} * {meta['BLOCK_R']} + {sub} * {width}")
    swept = [re.sub(r"\bBLOCK_R\b", str(width), line) for line in _own_indices(swept, "_c")]
    sweep = [f"for {c} in range(0, {split}):",
             f"    if tl.atomic_xchg({claims} + {row} * {split} + {c}, 2) == 1:",
             f"        for {sub} in range(0, {meta['BLOCK_R'] // width}):"] + indent(swept, 3)
    reload = [f"{value} = tl.load({comb.ptr(buf)} + {row}, volatile=True)" for buf, value in kept]
    # a program that sees every partial in merges them itself, as the last one does, rather than wait for the
    # last one's statistics
    wait = [f"{seen} = tl.atomic_add({sync} + {row}, 0, sem=\"acquire\")", f"{spins} = 0",
            f"while ({seen} < {split}) & ({spins} < SPINS):",
            f"    {seen} = tl.atomic_add({sync} + {row}, 0, sem=\"acquire\")", f"    {spins} += 1",
            f"{mine} = {seen} >= {split}", f"if {mine}:"] + indent(merge) + [
            "else:", f"    tl.store({claims} + {row} * {split} + pid_s, 1)", "    tl.debug_barrier()",
            f"    {old} = tl.atomic_add({state}, 1, sem=\"acq_rel\")",
            f"    if {old} >= {READY}:",  # READY came first: this program writes its chunk, unless the sweep took it
            f"        {mine} = tl.atomic_xchg({claims} + {row} * {split} + pid_s, 0) == 1"] + indent(reload)

    def own() -> list[str]:  # this program's chunk, from the values it holds, at the indices the first part set
        held = Scope()
        held.cache.update(steps.cache)
        return _pointer_first(output(held, "pid_s * BLOCK_R")[2:])

    # the sweep comes after the held chunk's output, where no chunk is held
    lines = [f"t = tl.atomic_add({sync} + {2 * blocks}, 1)"] + gen.top.lines + [
        "tl.debug_barrier()", f"{arrived} = tl.atomic_add({sync} + {row}, 1, sem=\"acq_rel\")",
        f"{mine} = {arrived} == {split - 1}", f"{old} = {arrived} * 0", f"if {mine}:"]
    lines += indent(combine + ["tl.debug_barrier()", f"{old} = tl.atomic_or({state}, {READY}, sem=\"acq_rel\")"])
    lines += ["else:"] + indent(wait) + [f"if {mine}:"] + indent(
        own() + [f"if ({arrived} == {split - 1}) & ({old} > 0):"] + indent(sweep))
    src = kernel_header(name, comb, ["BLOCK_O", "BLOCK_R", "SPINS"]) + indent(lines)
    spins = f"{HELD_SPINS} if {next(iter(comb.ptrs))}.is_cuda else 0"
    launch = Launch(name, (blocks * split,), list(comb.ptrs), {**meta, "SPINS": spins}, p.get("num_warps", 4), 1,
                    p.get("maxnreg", 0))
    temps = {buf: ((comb.O, split), torch.float32) for buf, _ in parts}
    temps.update({buf: ((comb.O,), torch.float32) for buf, _ in kept})
    temps[f"{name}_sync"] = ((2 * blocks + 1,), torch.int32)
    temps[f"{name}_claim"] = ((blocks * split,), torch.int32)
    return KernelCode("\n".join(src), [launch], temps)


TMA_STEPS = 8  # the most K steps of a persistent GEMM whose output tiles go by TMA (_stored_by_tma)


def _stored_by_tma(kernel: Kernel, M: int, N: int, blocks: tuple, steps: int, gen: Gen) -> tuple | None:
    """The (member, buffer) a persistent GEMM of `steps` K steps stores by TMA, or None where it takes a pointer
    store: one output tile of the whole [.., M, N] buffer, rows 16-byte aligned, no tile across two batches, an
    epilogue that loads nothing (a loaded operand's layout conversion takes a 64 KB tile of shared memory, past
    a block's 227 KB at 3 stages) and at most TMA_STEPS K steps. On an H200 (session 57, 128 x 128 x 32 tiles,
    3 stages) level 1's 7_Matmul_with_small_K_dimension_ (K 64: 2 steps) ran 2.97 ms with a pointer store and
    1.97 by TMA with the tile loop flattened (alone: 3.07 by TMA, 2.58 flattened at 2 stages); 11_4D_tensor_
    matrix_multiplication (K 256: 8 steps) 5.19 -> 5.00; 2_Standard_matrix_multiplication_, 16 and 17 (K 4096)
    ran 0.1-0.6% slower by TMA."""
    bm, bn = blocks
    if len(kernel.stores) != 1 or kernel.store_when or gen.evict or gen.positions_last or bn % 16 or \
            steps > TMA_STEPS:
        return None
    operands = {id(a) for a in kernel.nodes[0].args}
    if any(leaf.kind == "tensor" and id(leaf) not in operands for leaf in _leaves(kernel.nodes, kernel.level)):
        return None
    m, buf = next(iter(kernel.stores.items()))
    batches = math.prod(kernel.domain[:-2])
    aligned = N * m.dtype.itemsize % 16 == 0 and (batches == 1 or M % bm == 0)
    return (m, buf) if isinstance(buf, str) and kernel.level[m] == "full" and aligned else None


def _pointer_first(lines: list[str]) -> list[str]:
    """`lines` with each linear index used only as a store's offset written into the store, so that the
    pointer takes the row's offset first: tl.store(p + ro * R + rr, ...). Kept as its own tensor, lin = ro * R
    + rr, it took more registers in a held split (ptxas for sm_90 under the CPU's Triton 3.9: level 1's
    34_InstanceNorm 167 a thread, 128 so)."""
    out = list(lines)
    for line in lines:
        m = re.fullmatch(r"(lin\d+) = (.*)", line)
        uses = [i for i, x in enumerate(out) if m and re.search(rf"\b{m.group(1)}\b", x)]
        stores = [i for i in uses[1:] if re.match(rf"tl\.store\(\w+ \+ {m.group(1)}, ", out[i])]
        if m and stores and len(stores) == len(uses) - 1:
            for i in stores:
                out[i] = out[i].replace(f" + {m.group(1)}, ", f" + {m.group(2)}, ", 1)
            out.remove(line)
    return out


def _blocks(rows: int | str, block: int) -> int | str:
    """The programs covering `rows` rows `block` at a time: a number, or host code where rows is an expression."""
    if isinstance(rows, int):
        return math.ceil(rows / block)
    return rows if block == 1 else f"({rows} + {block - 1}) // {block}"


def small_batch(kernel: Kernel, name: str, p: dict, split: int) -> KernelCode:
    """A shape-general row kernel's form for a call with few rows: each row split over `split` programs and
    combined by a second kernel (_split), the batch a run-time argument. program.py launches it instead of the
    kernel tuned for the traced batch where a call has fewer rows than the GPU has SMs and than that batch."""
    r = math.prod(kernel.domain[d] for d in kernel.rdims)
    q = {**p, "mode": "looped", "BLOCK_O": 1, "BLOCK_R": min(4096, next_pow2(math.ceil(r / split))), "SPLIT": split,
         "GROUP": 0, "LAG": 0, "COOP": 0, "num_warps": 8, "num_stages": 2, "shapes": "dynamic"}
    return _split(fold_sums(kernel) if q.get("fold", 1) else kernel, name, q)


def _row_groups(code: KernelCode, rows: int, group: int) -> KernelCode:
    """`code`'s launches (each taking a row0 argument) run on the host once per group of `group` rows, so the
    rows that one pass reads are still in L2 when the next pass reads them: a bounded working set."""
    fields: dict[str, str] = {}
    lines = [f"for row0 in range(0, {rows}, {group}):"]
    for launch in code.launches:
        args = ", ".join("{" + fields.setdefault(a, f"a{len(fields)}") + "}" for a in launch.args)
        meta = ", ".join(f"{k}={v}" for k, v in launch.meta.items())
        lines.append(f"    {launch.kernel}[{launch.grid}]({args}, row0, {meta}, {launch.options()})")
    return KernelCode(code.source, [], code.temps, host=lines, host_args=fields)


def _gemm(kernel: Kernel, name: str, p: dict) -> KernelCode:
    gen = Gen(kernel, name, p)
    g = kernel.nodes[0]
    a, b = g.args
    split = g.attrs.get("split_k", 1)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batched = len(a.shape) == 3
    bm, bn = gemm_block(p, "BLOCK_M", M), gemm_block(p, "BLOCK_N", N)
    bk = gemm_block(p, "BLOCK_K", math.ceil(K / split))
    k_chunk = math.ceil(math.ceil(K / split) / bk) * bk if split > 1 else K
    even_k = K % bk == 0 and (split == 1 or K % k_chunk == 0)
    sa, sb = a.strides, b.strides
    dyn = _dynamic(kernel, p)
    # tf32x3: the operands split once into TF32 parts (split_operands), where their sizes are constants, unless
    # parts "registers" (Triton's own tf32x3, each tile split again at every K step: gemm.registers_split)
    split3 = p.get("precision") == "tf32x3" and not dyn and p.get("parts", "memory") == "memory"
    # the parts padded with zeros to whole tiles and K steps: their loads take no masks
    mp, np_ = math.ceil(M / bm) * bm, math.ceil(N / bn) * bn
    kp = k_chunk * split if split > 1 else math.ceil(K / bk) * bk
    parts = (a.shape[0] if batched else 1) * mp * kp + (b.shape[0] if batched else 1) * np_ * kp
    big = ".to(tl.int64)" if gen.big or (split3 and parts >= 2**31) else ""
    rows = BATCH_ARG if dyn else M  # M in the kernel: masks and the program order follow it
    # persistent: a program a streaming multiprocessor, walking the tiles of all batches, its parts read by TMA
    persist = split3 and split == 1 and bool(p.get("persistent"))
    tiles = math.ceil(M / bm) * math.ceil(N / bn)
    n_batch = a.shape[0] if batched else 1
    lines = ([f"for t in tl.range(tl.program_id(0), {tiles * n_batch}, PROGRAMS):", f"pid = t % {tiles}"] +
             [f"pid_b = t // {tiles}"] * batched if persist else ["pid = tl.program_id(0)"])
    lines += [f"num_m = tl.cdiv({rows}, BLOCK_M)", f"num_n = tl.cdiv({N}, BLOCK_N)",
             "width = GROUP_M * num_n", "first_m = (pid // width) * GROUP_M",
             "gsize = tl.minimum(num_m - first_m, GROUP_M)", "pid_m = first_m + (pid % width) % gsize",
             "pid_n = (pid % width) // gsize",
             f"rm1 = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){big}",
             f"rn1 = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){big}", f"rk = tl.arange(0, BLOCK_K){big}"]
    if batched and not persist:
        lines.append(f"pid_b = tl.program_id(1){big}")
    k_start = "0"
    if split > 1:
        lines.append("pid_k = tl.program_id(2)")
        k_start = f"pid_k * {k_chunk}"
    ks = f"({k_start} + rk)"
    pre = None
    if split3:  # the parts, [.., M, K] and [.., N, K], take the places of a and b: K contiguous in both
        pre = split_launches(name, a, b, batched, (mp, np_, kp))
        a_ptrs = f"rm1[:, None] * {kp} + {ks}[None, :]" + (f" + pid_b * {mp * kp}" if batched else "")
        b_ptrs = f"rn1[:, None] * {kp} + {ks}[None, :]" + (f" + pid_b * {np_ * kp}" if batched else "")
        a_t, b_t, sa, sb = False, True, (kp, 1), (1, kp)
    else:  # each operand is loaded along its contiguous axis: a K-contiguous B (a Linear weight, w.t()) as an
        # [N, K] tile and an M-contiguous A as [K, M], transposed in registers for the dot
        a_base, b_base = f"{gen.ptr(a.base)} + {a.offset}", f"{gen.ptr(b.base)} + {b.offset}"
        if batched:
            a_base += f" + pid_b * {sa[0]}"
            b_base += f" + pid_b * {sb[0]}"
        a_t = sa[-2] == 1 and sa[-1] != 1
        b_t = sb[-2] == 1 and sb[-1] != 1
        a_ptrs = (f"{a_base} + {ks}[:, None] * {sa[-1]} + rm1[None, :] * {sa[-2]}" if a_t else
                  f"{a_base} + rm1[:, None] * {sa[-2]} + {ks}[None, :] * {sa[-1]}")
        b_ptrs = (f"{b_base} + rn1[:, None] * {sb[-1]} + {ks}[None, :] * {sb[-2]}" if b_t else
                  f"{b_base} + {ks}[:, None] * {sb[-2]} + rn1[None, :] * {sb[-1]}")
    lines += ([] if persist else [f"a_ptrs = {a_ptrs}", f"b_ptrs = {b_ptrs}"]) + [
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", f"for k0 in range(0, {k_chunk}, BLOCK_K):"]
    left = f"{K} - ({k_start} + k0)"
    k_row, k_col = f"(rk[:, None] < {left})", f"(rk[None, :] < {left})"
    m_cond = [] if M % bm == 0 and not dyn else [f"(rm1[None, :] < {rows})" if a_t else f"(rm1[:, None] < {rows})"]
    n_cond = [] if N % bn == 0 else [f"(rn1[:, None] < {N})" if b_t else f"(rn1[None, :] < {N})"]
    a_mask = " & ".join(m_cond + ([] if even_k else [k_row if a_t else k_col]))
    b_mask = " & ".join(n_cond + ([] if even_k else [k_col if b_t else k_row]))
    a_mask, b_mask = (f", mask={m}, other=0.0" if m and not split3 else "" for m in (a_mask, b_mask))
    precision, cast = p.get("precision", "ieee"), dot_cast(a, b, p.get("operands", "input"))
    if persist:  # the parts' tensor descriptors, each over its batches' rows: [batch * rows, K]
        ah, al, bh, bl = (gen.ptr(buf) for buf in operand_parts(name))
        a_row, b_row = (f"{f'pid_b * {rows_p} + ' if batched else ''}pid_{x} * BLOCK_{x.upper()}"
                        for x, rows_p in (("m", mp), ("n", np_)))
        loop = [f"ta = {ah}.load([{a_row}, k0])", f"ta_lo = {al}.load([{a_row}, k0])",
                f"tb = {bh}.load([{b_row}, k0])", f"tb_lo = {bl}.load([{b_row}, k0])"]
        loop += products(("ta", "ta_lo"), ("tb", "tb_lo"))
    elif split3:
        ah, al, bh, bl = (gen.ptr(buf) for buf in operand_parts(name))
        loop = [f"ta = tl.load({ah} + a_ptrs{a_mask})", f"ta_lo = tl.load({al} + a_ptrs{a_mask})",
                f"tb = tl.load({bh} + b_ptrs{b_mask})", f"tb_lo = tl.load({bl} + b_ptrs{b_mask})"]
        loop += products(("ta", "ta_lo"), ("tb", "tb_lo"))
    else:
        loop = [f"ta = tl.load(a_ptrs{a_mask}){cast}", f"tb = tl.load(b_ptrs{b_mask}){cast}",
                f"acc += tl.dot({'tl.trans(ta)' if a_t else 'ta'}, {'tl.trans(tb)' if b_t else 'tb'}, "
                f'input_precision="{precision}")']
    lines += indent(loop + ([] if persist else [f"a_ptrs += BLOCK_K * {sa[-1]}", f"b_ptrs += BLOCK_K * {sb[-2]}"]))
    lines += ["rm = rm1[:, None]", "rn = rn1[None, :]", f"mask = (rm < {rows}) & (rn < {N})"]
    gen.groups = [([d], v) for d, v in zip(range(len(kernel.domain)),
                                           (["pid_k"] if split > 1 else []) + (["pid_b"] if batched else []) + ["rm", "rn"])]
    start = len(gen.top.lines)
    gen.top.lines += lines
    gen.top.cache[g] = "acc"
    gen.kinds[g] = "f"
    out = _stored_by_tma(kernel, M, N, (bm, bn), math.ceil(K / bk), gen) if persist else None
    if out:  # the tile in two halves, through shared memory: a TMA store the next tile's loads go on beside
        m, buf = out
        half, row = "BLOCK_N // 2", f"{f'pid_b * {M} + ' if batched else ''}pid_m * BLOCK_M"
        desc = gen.ptr(descriptor_name(buf))
        gen.body.lines += [f"halves = tl.permute(tl.reshape({gen.value(m)}, (BLOCK_M, 2, {half})), (0, 2, 1))",
                           "h0, h1 = tl.split(halves)", f"{desc}.store([{row}, pid_n * BLOCK_N], h0.to({desc}.dtype))",
                           f"{desc}.store([{row}, pid_n * BLOCK_N + {half}], h1.to({desc}.dtype))"]
        # the loop flattened into the K loop, so that its pipeline loads the next tile's steps during the stores
        gen.top.lines[start] = gen.top.lines[start].replace("PROGRAMS):", "PROGRAMS, flatten=True):")
    else:
        store_lines(gen, list(kernel.stores.items()))
    if persist:  # the tile's lines after the loop's header, its epilogue's stores with them
        gen.top.lines[start + 1:] = indent(gen.top.lines[start + 1:])
    meta = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"] + ["PROGRAMS"] * persist
    src = kernel_header(name, gen, meta, [BATCH_ARG] if dyn else []) + indent(gen.top.lines)
    n_tiles = math.ceil(N / bn)
    grid = ((f"({BATCH_HOST} + {bm - 1}) // {bm}" + (f" * {n_tiles}" if n_tiles > 1 else ""), 1, 1) if dyn else
            (min(tiles * n_batch, SMS), 1, 1) if persist else (tiles, n_batch, split))
    meta_values = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": p.get("GROUP_M", 8),
                   **({"PROGRAMS": grid[0]} if persist else {})}
    args = [descriptor_name(a) if persist and a in operand_parts(name) else a for a in gen.ptrs]
    launch = Launch(name, grid, args + ([BATCH_HOST] if dyn else []), meta_values, p.get("num_warps", 4),
                    p.get("num_stages", 3))
    if pre:
        source, launches, temps = pre
        host = descriptors(name, temps, (bm, bn, bk)) if persist else []
        if out:  # the output's descriptor, over its batches' rows as one [batch * M, N] matrix
            host.append(f"{descriptor_name(out[1])} = TensorDescriptor({out[1]}, [{n_batch * M}, {N}], [{N}, 1], "
                        f"[{bm}, {bn // 2}])")
        return KernelCode(source + "\n\n\n" + "\n".join(src), launches + [launch], temps, host=host,
                          imports=[DESCRIPTOR_IMPORT] if persist else [])
    return KernelCode("\n".join(src), [launch])
