"""Triton source for one scheduled kernel.

Layouts (tile axes -> index variables):
  flat  [BLOCK]          offs over every element of the domain D
  row   [BLOCK_O, BLOCK_R] ro over kept positions, rr over the reduced dims (reduced dims include D's innermost)
  col   [BLOCK_R, BLOCK_I] one kept outer position ro per program, rr over reduced dims, ri over the trailing
                          kept dims (contiguous), so loads stay coalesced when reducing a middle axis
  gemm  [BLOCK_M, BLOCK_N] tl.dot main loop with grouped program order, then the epilogue
Reductions keep their dims (keep_dims=True), so per-row values broadcast against tiles unchanged. A row
that fits one block is read once ("one_pass"); otherwise each reduction stage is a loop over BLOCK_R chunks
("looped"), and "split" spreads a single-stage reduction of few rows over SPLIT programs plus a combine kernel.
Sizes are concrete (rendered from the analysis), so masks, strides and loop bounds are constants.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from agent.templates.ir import Leaf, Node, contiguous_strides
from agent.templates.pointwise_ops import POINTWISE, E, f, kind_of, lit
from agent.templates.reductions import INT32_MAX, NEUTRAL, Reductions
from agent.templates.schedule import Kernel



@dataclass
class Launch:
    kernel: str
    grid: tuple
    args: list[str]  # host expressions of the pointer arguments, in order
    meta: dict  # constexpr values
    num_warps: int
    num_stages: int


@dataclass
class KernelCode:
    source: str
    launches: list[Launch]
    temps: dict = field(default_factory=dict)  # scratch buffers the launches need: name -> (shape, torch dtype)


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class Scope:
    def __init__(self):
        self.lines: list[str] = []
        self.cache: dict = {}


class Gen(Reductions):
    """Emits one kernel. `p` holds the layout's parameters (see agent/templates/params.py)."""

    def __init__(self, kernel: Kernel, name: str, p: dict):
        self.k, self.name, self.p = kernel, name, p
        self.D = kernel.domain
        self.layout = "flat" if kernel.layout == "plane" and p.get("layout") == "flat" else kernel.layout
        self.ptrs: dict[str, str] = {}
        self.kinds: dict = {}
        self.count = 0
        extent = max([math.prod(self.D)] + [_extent(a) for a in _leaves(kernel.nodes, kernel.level)])
        self.big = extent > INT32_MAX
        kept = [d for d in range(len(self.D)) if d not in kernel.rdims]
        if self.layout == "flat":
            self.groups = [(list(range(len(self.D))), "offs")]
        elif self.layout == "plane":  # (N, C) per program, a [BLOCK_H, BLOCK_W] tile of the output plane
            self.groups = [([0, 1], "ro"), ([2], "rh"), ([3], "rw")]
        elif self.layout == "row":
            self.groups = [(kept, "ro"), (list(kernel.rdims), "rr")]
        elif self.layout == "col":
            last = max(kernel.rdims)
            self.groups = [([d for d in kept if d < last], "ro"), (list(kernel.rdims), "rr"),
                           ([d for d in kept if d > last], "ri")]
        else:  # gemm: (batch?, M, N)
            dims = list(range(len(self.D)))
            self.groups = [([d], v) for d, v in zip(dims, (["pid_b"] if len(dims) == 3 else []) + ["rm", "rn"])]
        self.O = math.prod(self.D[d] for d in self.groups[0][0]) if self.layout in ("row", "col") else 1
        self.R = math.prod(self.D[d] for d in kernel.rdims) if kernel.rdims else 1
        self.I = math.prod(self.D[d] for d in self.groups[2][0]) if self.layout == "col" else 1
        self.axis = 1 if self.layout == "row" else 0
        self.top = Scope()
        self.body = self.top

    # --- names and pointers ------------------------------------------------------------------------
    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def ptr(self, base: str) -> str:
        if base not in self.ptrs:
            self.ptrs[base] = f"p{len(self.ptrs)}"
        return self.ptrs[base]

    def tile(self, level: str) -> str:
        if self.layout == "flat":
            return "[BLOCK]"
        if self.layout == "plane":
            return "[BLOCK_H, BLOCK_W]"
        if self.layout == "row":
            return "[BLOCK_O, BLOCK_R]" if level == "full" else "[BLOCK_O, 1]"
        if self.layout == "col":
            return "[BLOCK_R, BLOCK_I]" if level == "full" else "[1, BLOCK_I]"
        return "[BLOCK_M, BLOCK_N]"

    # --- addressing --------------------------------------------------------------------------------
    def offset(self, terms: list[tuple[int, int]], offset: int = 0) -> str:
        """sum(index_d * stride_d) over D dims, merging dims of a group that one stride walks contiguously."""
        parts = []
        by_dim = dict(terms)
        for dims, var in self.groups:
            live = [d for d in dims if self.D[d] > 1]
            runs: list[list[int]] = []
            for d in live:
                if d not in by_dim or by_dim[d] == 0:
                    continue
                if runs and runs[-1][-1] == live[live.index(d) - 1] and by_dim[runs[-1][-1]] == by_dim[d] * self.D[d]:
                    runs[-1].append(d)
                else:
                    runs.append([d])
            for run in runs:
                after = live[live.index(run[-1]) + 1:]
                inner = math.prod(self.D[d] for d in after)
                size = math.prod(self.D[d] for d in run)
                idx = var if inner == 1 else f"({var} // {inner})"
                if live.index(run[0]) > 0:
                    idx = f"({idx} % {size})"
                stride = by_dim[run[-1]]
                parts.append(idx if stride == 1 else f"{idx} * {stride}")
        if offset:
            parts.append(str(offset))
        return " + ".join(parts) if parts else "0"

    def dim_index(self, d: int) -> str:
        return self.offset([(d, 1)]) if self.D[d] > 1 else "0"

    def linear(self, level: str) -> str:
        shape = self.D if level == "full" else self.k.keep_shape
        cs = contiguous_strides(shape)
        code = self.offset([(d, cs[d]) for d in range(len(shape)) if shape[d] > 1])
        if code.lstrip("-").isdigit():  # a single position: give it the tile's shape so stores are blocks
            code = f"{ {'flat': 'offs', 'row': 'ro', 'col': 'ri', 'plane': 'rh * 0 + rw'}.get(self.layout, 'rm * 0 + rn')} * 0 + {code}"
        if code.isidentifier():
            return code
        scope = self.body if level == "full" else self.top
        key = ("linear", level)
        if key not in scope.cache:
            name = self.fresh("lin")
            scope.lines.append(f"{name} = {code}")
            scope.cache[key] = name
        return scope.cache[key]

    def leaf_offset(self, leaf: Leaf, shape: tuple, level: str) -> str:
        rank = len(shape)
        lead = rank - len(leaf.shape)
        st = [leaf.strides[j - lead] if j >= lead and leaf.shape[j - lead] == shape[j] and shape[j] > 1 else 0
              for j in range(rank)]
        if level == "full" and tuple(shape) == self.D:
            return self.offset([(j, s) for j, s in enumerate(st) if s], leaf.offset)
        if level == "red":
            keep = self.k.keep_shape
            if tuple(shape) == keep:
                return self.offset([(j, s) for j, s in enumerate(st) if s], leaf.offset)
            kept = [d for d in range(len(self.D)) if d not in self.k.rdims]
            if tuple(shape) == tuple(self.D[d] for d in kept):
                return self.offset([(kept[j], s) for j, s in enumerate(st) if s], leaf.offset)
        # `shape` is a reshape of the domain (or of its reduced form): address through the linear index
        lin = self.linear(level)
        cs = contiguous_strides(shape)
        live = [j for j in range(rank) if shape[j] > 1]
        parts, run = [], []
        for j in live + [None]:
            if j is not None and st[j] and run and run[-1] == live[live.index(j) - 1] and st[run[-1]] == st[j] * shape[j]:
                run.append(j)
                continue
            if run:
                idx = lin if cs[run[-1]] == 1 else f"({lin} // {cs[run[-1]]})"
                if live.index(run[0]) > 0:
                    idx = f"({idx} % {math.prod(shape[i] for i in run)})"
                parts.append(idx if st[run[-1]] == 1 else f"{idx} * {st[run[-1]]}")
            run = [j] if j is not None and st[j] else []
        if leaf.offset:
            parts.append(str(leaf.offset))
        return " + ".join(parts) if parts else "0"

    def is_block(self, code: str) -> bool:
        """Whether an index expression is a tile (not one scalar per program)."""
        names = {"flat": "offs", "row": "ro|rr", "col": "rr|ri", "plane": "rh|rw", "gemm": "rm|rn"}[self.layout]
        return re.search(rf"\b({names}|lin\d+)\b", code) is not None

    def per_element(self, code: str) -> bool:
        """Whether an index expression varies along the reduced axis (uses rr or a full linear index)."""
        names = {"rr"} | {v for k, v in self.body.cache.items() if k == ("linear", "full")}
        return any(re.search(rf"\b{n}\b", code) for n in names)

    def load(self, leaf: Leaf, shape: tuple, level: str) -> E:
        if leaf.kind == "const":
            return lit(leaf.value)
        off = self.leaf_offset(leaf, shape, level)
        if leaf.kind == "iota":
            code = off if (leaf.value, leaf.step) == (0, 1) else f"({leaf.value!r} + {leaf.step!r} * ({off}))"
            return E(f"({code})", "f" if isinstance(leaf.value, float) or isinstance(leaf.step, float) else "i")
        inside = self.bounds_check(leaf, shape, level)
        if level == "full" and self.layout in ("row", "col") and not self.per_element(off + inside):
            level = "red"  # constant along the reduced axis: load once per row, outside any chunk loop
        scope = self.body if level == "full" else self.top
        key = ("load", leaf.base, off, level, inside)
        if key not in scope.cache:
            name = self.fresh("x")
            mask = "mask" if level == "full" else "rmask"
            if inside:
                mask = f"{mask} & {inside}" if self.is_block(off + inside) else inside
            mask = f", mask={mask}, other=0" if self.is_block(off) or inside else ""
            # floats compute in fp32 whatever the run-time dtype (a suite may cast inputs to bf16)
            cast = ".to(tl.float32)" if leaf.dtype.is_floating_point else ""
            scope.lines.append(f"{name} = tl.load({self.ptr(leaf.base)} + {off}{mask}){cast}")
            scope.cache[key] = E(name, kind_of(leaf.dtype))
        return scope.cache[key]

    # --- values ------------------------------------------------------------------------------------
    def arg(self, a, consumer: Node, level: str, shape: tuple | None = None):
        if a is None:
            return None
        shape = consumer.shape if shape is None else shape
        if isinstance(a, Leaf):
            return self.load(a, shape, level)
        if isinstance(a, Node) and a not in self.k.level:
            return self.inline(a, shape, level)
        if isinstance(a, Node):
            return E(self.value(a), self.kinds[a])
        if isinstance(a, (list, tuple)):
            return a
        return lit(a) if isinstance(a, (bool, int, float)) else a

    def bounds_check(self, leaf: Leaf, shape: tuple, level: str) -> str:
        """The condition that a leaf with `bounds` is read inside them ("" for a leaf without)."""
        checks = []
        for d, lo, hi in leaf.bounds:
            unit = tuple(1 if j == d else 0 for j in range(len(leaf.shape)))
            index = self.leaf_offset(Leaf("", leaf.shape, leaf.dtype, strides=unit), shape, level)
            checks += ([f"({index} >= {lo})"] if lo > 0 else []) + ([f"({index} < {hi})"] if hi < leaf.shape[d] else [])
        return " & ".join(checks)

    def gather(self, m: Node, level: str) -> E:
        """An indexed load: the source's address over the output dims it walks, plus each index value (negative
        ones wrap) times the stride of the source dim it addresses."""
        src, dims = m.args[0], m.attrs["src_dims"]
        walk = Leaf(src.name, m.shape, src.dtype, base=src.base, offset=src.offset,
                    strides=tuple(src.strides[d] if d >= 0 and src.shape[d] > 1 else 0 for d in dims))
        terms = [self.leaf_offset(walk, m.shape, level)]
        for index, d in zip(m.args[1:], m.attrs["index_dims"]):
            i = self.arg(index, m, level).code
            terms.append(f"tl.where({i} < 0, {i} + {src.shape[d]}, {i}).to(tl.int64) * {src.strides[d]}")
        off = " + ".join(t for t in terms if t != "0")
        mask = f", mask={'mask' if level == 'full' else 'rmask'}, other=0" if self.is_block(off) else ""
        cast = ".to(tl.float32)" if src.dtype.is_floating_point else ""
        return E(f"tl.load({self.ptr(src.base)} + {off}{mask}){cast}", kind_of(src.dtype))

    def value(self, m: Node) -> str:
        level = self.k.level[m]
        scope = self.body if level == "full" else self.top
        if m in scope.cache:
            return scope.cache[m]
        if m in self.top.cache:
            return self.top.cache[m]
        if m.op == "view":
            name = self.value(m.args[0])
            self.kinds[m] = self.kinds[m.args[0]]
            return name
        if m.op == "pw" and m.fn == "gather":
            e = self.gather(m, level)
            code = e.code
        elif m.op == "pw":
            args = [self.arg(a, m, level) for a in m.args]
            e = POINTWISE[m.fn](args, m.attrs)
            code = e.code
        elif m.op == "window":
            e = E(self.window(m), "f")
            code = None
        elif m.op == "scan":
            e = E(self.scan(m), "f" if m.dtype.is_floating_point else "i")
            code = None
        else:
            raise AssertionError(f"{m.name} ({m.op}) is computed by its pass, not on demand")
        self.kinds[m] = e.kind
        if code is None:
            scope.cache[m] = e.code
            return e.code
        name = self.fresh("v")
        scope.lines.append(f"{name} = {code}")
        scope.cache[m] = name
        return name

    def inline(self, p: Node, shape: tuple, level: str) -> E:
        """A pointwise node of leaves, recomputed here at the consumer's positions (its leaves attached to the
        consumer's shape), instead of being read back from a buffer."""
        if p.op == "view":  # a reshape: the source at its own shape, addressed through the linear index
            return self.inline(p.args[0], p.args[0].shape, level)
        scope = self.body if level == "full" else self.top
        key = ("inline", p, tuple(shape), level)
        if key not in scope.cache:
            e = POINTWISE[p.fn]([self.arg(a, p, level, shape) for a in p.args], p.attrs)
            name = self.fresh("v")
            scope.lines.append(f"{name} = {e.code}")
            scope.cache[key] = E(name, e.kind)
        return scope.cache[key]

    def reduce_input(self, r: Node) -> E:
        x = r.args[0]
        if isinstance(x, Leaf):
            return self.load(x, self.D, "full")
        if x not in self.k.level:
            return self.inline(x, self.D, "full")
        return E(self.value(x), self.kinds[x])

    # --- window ops (pooling, depthwise convolution) -----------------------------------------------
    def window(self, m: Node) -> str:
        """Each output element reads its KH x KW window (taps unrolled; bounds checks only where a tap can
        fall in the padding)."""
        x = m.args[0]
        lines = self.body.lines
        a = m.attrs
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = a["kernel"], a["stride"], a["padding"], a["dilation"]
        H, W = x.shape[2], x.shape[3]
        n, c, oh, ow = (self.dim_index(d) for d in range(4))
        mult = a.get("multiplier", 1)
        if mult == 1:
            base = self.offset([(d, x.strides[d]) for d in (0, 1) if x.strides[d] and self.D[d] > 1], x.offset)
        else:
            base = f"{n} * {x.strides[0]} + ({c} // {mult}) * {x.strides[1]} + {x.offset}"

        def start(idx: str, stride: int, pad: int):
            if idx == "0":
                return -pad
            name = self.fresh("st")
            lines.append(f"{name} = {idx} * {stride} - {pad}")
            return name

        def clip(lo, hi, fn):
            return (min if fn == "min" else max)(lo, hi) if isinstance(lo, int) and isinstance(hi, int) \
                else f"tl.{'minimum' if fn == 'min' else 'maximum'}({lo}, {hi})"

        hs, ws = start(oh, sh, ph), start(ow, sw, pw)
        acc = self.fresh("acc")
        neutral = NEUTRAL["max"] if m.fn == "max" else "0.0"
        lines.append(f"{acc} = tl.full({self.tile('full')}, {neutral}, tl.float32)")
        ptr = self.ptr(x.base)
        for i in range(kh):
            ih = hs + i * dh if isinstance(hs, int) else f"({hs} + {i * dh})"
            if isinstance(ih, int) and not 0 <= ih < H:
                continue
            ch = [] if isinstance(ih, int) else [f"({ih} >= 0)", f"({ih} < {H})"]
            for j in range(kw):
                iw = ws + j * dw if isinstance(ws, int) else f"({ws} + {j * dw})"
                if isinstance(iw, int) and not 0 <= iw < W:
                    continue
                cw = [] if isinstance(iw, int) else [f"({iw} >= 0)", f"({iw} < {W})"]
                ok = " & ".join(["mask"] + ch + cw)
                xv = self.fresh("xv")
                lines.append(f"{xv} = tl.load({ptr} + {base} + {ih} * {x.strides[2]} + {iw} * {x.strides[3]}, "
                             f"mask={ok}, other={neutral}).to(tl.float32)")
                if m.fn == "max":
                    lines.append(f"{acc} = tl.maximum({acc}, {xv})")
                elif m.fn == "avg":
                    lines.append(f"{acc} += {xv}")
                else:
                    w = m.args[1]
                    woff = f"{c} * {w.strides[0]} + {i * w.strides[2] + j * w.strides[3] + w.offset}"
                    wmask = ", mask=mask, other=0.0" if self.is_block(woff) else ""
                    lines.append(f"{acc} += {xv} * tl.load({self.ptr(w.base)} + {woff}{wmask}).to(tl.float32)")
        if m.fn == "avg":
            if a.get("divisor"):
                div = str(a["divisor"])
            elif a.get("count_include_pad", True):
                div = f"(({clip(f'{hs} + {kh}' if not isinstance(hs, int) else hs + kh, H + ph, 'min')} - {hs}) * " \
                      f"({clip(f'{ws} + {kw}' if not isinstance(ws, int) else ws + kw, W + pw, 'min')} - {ws}))"
            else:
                div = f"(({clip(f'{hs} + {kh}' if not isinstance(hs, int) else hs + kh, H, 'min')} - " \
                      f"{clip(hs, 0, 'max')}) * ({clip(f'{ws} + {kw}' if not isinstance(ws, int) else ws + kw, W, 'min')}" \
                      f" - {clip(ws, 0, 'max')}))"
            lines.append(f"{acc} = {acc} / {div}")
        return acc

    # --- scans -------------------------------------------------------------------------------------
    def scan(self, m: Node) -> str:
        v = self.reduce_input(m)
        neutral = "1.0" if m.fn == "cumprod" else "0.0"
        src = f"tl.where(mask, {f(v) if m.dtype.is_floating_point else v.code}, {neutral})"
        rev = m.attrs["reverse"]
        out = self.fresh("s")
        fn = "tl.cumprod" if m.fn == "cumprod" else "tl.cumsum"
        if self.body is self.top:
            self.body.lines.append(f"{out} = {fn}({src}, axis={self.axis}, reverse={rev})")
            return out
        carry, vv = self.fresh("carry"), self.fresh("vv")
        self.top.lines.append(f"{carry} = tl.full({self.tile('red')}, {neutral}, tl.float32)")
        total = (f"tl.reduce({vv}, {self.axis}, _mul_combine, keep_dims=True)" if m.fn == "cumprod"
                 else f"tl.sum({vv}, axis={self.axis}, keep_dims=True)")
        op = "*" if m.fn == "cumprod" else "+"
        self.body.lines += [f"{vv} = {src}", f"{out} = {fn}({vv}, axis={self.axis}, reverse={rev}) {op} {carry}",
                            f"{carry} = {carry} {op} {total}"]
        return out


def _leaves(nodes: list, members: dict) -> list[Leaf]:
    """Every leaf the kernel reads, through the pointwise nodes it recomputes inline."""
    out, stack, seen = [], list(nodes), set()
    while stack:
        n = stack.pop()
        for a in n.args:
            if isinstance(a, Leaf):
                out.append(a)
            elif isinstance(a, Node) and a not in members and id(a) not in seen:
                seen.add(id(a))
                stack.append(a)
    return out


def _extent(leaf: Leaf) -> int:
    if leaf.kind != "tensor":
        return 0
    return abs(leaf.offset) + sum((s - 1) * abs(st) for s, st in zip(leaf.shape, leaf.strides)) + 1
