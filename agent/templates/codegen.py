"""Triton source for one scheduled kernel.

Layouts (tile axes -> index variables):
  flat  [BLOCK]          offs over every element of the domain D
  row   [BLOCK_O, BLOCK_R] ro over kept positions, rr over the reduced dims (reduced dims include D's innermost)
  col   [BLOCK_R, BLOCK_I] one kept outer position ro per program, rr over reduced dims, ri over the trailing
                          kept dims (contiguous), so loads stay coalesced when reducing a middle axis
  gemm  [BLOCK_M, BLOCK_N] tl.dot main loop with grouped program order, then the epilogue
Reductions keep their dims (keep_dims=True), so per-row values broadcast against tiles unchanged. A row
that fits one block is read once ("one_pass"); otherwise each reduction stage is a loop over BLOCK_R chunks
("looped"), and "split" spreads a single-stage reduction over SPLIT programs per row plus a combine kernel,
run GROUP rows at a time where the rows' two passes should meet in L2 (kernels.py).
Sizes are concrete (rendered from the analysis), so masks, strides and loop bounds are constants.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

import torch

from agent.templates.ir import Leaf, Node, Value, contiguous_strides
from agent.templates.pointwise_ops import POINTWISE, E, f, kind_of, lit, number
from agent.templates.reductions import INT32_MAX, NEUTRAL, Reductions, integer_identity, integer_type
from agent.templates.schedule import Kernel



@dataclass
class Launch:
    kernel: str
    grid: tuple
    args: list[str]  # host expressions of the pointer arguments, in order
    meta: dict  # constexpr values
    num_warps: int
    num_stages: int
    maxnreg: int = 0  # a cap on the registers a thread (Triton's maxnreg), 0 for none

    def options(self) -> str:
        """The launch's compile options as keyword arguments."""
        cap = f", maxnreg={self.maxnreg}" if self.maxnreg else ""
        return f"num_warps={self.num_warps}, num_stages={self.num_stages}{cap}"


@dataclass
class _Walk:
    """A walking window's carried planes (Gen.window_start): taps of its first axis below `kept` are in the carry,
    those from `shift` on also go into `nexts`, and `end` hands them to the next output."""
    kept: int
    shift: int
    nexts: list[str]
    end: list[str]


def load_cast(dtype: torch.dtype) -> str:
    """What a loaded value of `dtype` is computed in: floats in fp32 whatever the run-time dtype (a suite may cast
    inputs to bf16), integers narrower than 32 bits in int32 as C promotes them (uint8 + int8 is an int16 in
    PyTorch, a uint8 in Triton), others as loaded."""
    if dtype.is_floating_point:
        return ".to(tl.float32)"
    return ".to(tl.int32)" if dtype in (torch.int8, torch.uint8, torch.int16) else ""


@dataclass
class _Axis:
    """One spatial axis of a window op: its taps (tap index, input position, bounds checks) and the window's
    element count (an int, or an expression per output)."""
    taps: list[tuple[int, str, list[str]]]
    size: int | str


@dataclass
class KernelCode:
    source: str
    launches: list[Launch]
    temps: dict = field(default_factory=dict)  # scratch buffers the launches need: name -> (shape, torch dtype);
    # int32 ones are counters and start at zero
    host: list[str] = field(default_factory=list)  # forward lines run instead of `launches` (a loop over time)
    host_args: dict = field(default_factory=dict)  # tensors the host lines read: base -> their {field} name
    prep: list = field(default_factory=list)  # tensors the forward makes before the launches: (name, base it is
    # made from, the expression's rest after the base's local name)
    imports: list = field(default_factory=list)  # the module's import lines its host lines need


SMS = 132  # streaming multiprocessors of the H100/H200 the parameters are sized for
SMEM_BYTES = 227 * 1024  # the shared memory a block of theirs may take
SM_SMEM_BYTES = 228 * 1024  # and the shared memory of one of their SMs, which its resident blocks share
SM_REGISTERS = 65536  # and an SM's 32-bit registers, allocated to a block's threads 8 at a time
SM_THREADS = 2048  # and the threads an SM holds at once
DESCRIPTOR_IMPORT = "from triton.tools.tensor_descriptor import TensorDescriptor"  # the import TMA loads need
DESCRIPTOR_SUFFIX = "_desc"  # a tensor's TMA descriptor is named after it (descriptor_name)


def register_programs(registers: int, threads: int) -> int:
    """The programs of `threads` threads an SM's registers hold at `registers` a thread (allocated 8 at a time)."""
    return SM_REGISTERS // (-(-registers // 8) * 8 * threads)


def descriptor_name(base: str) -> str:
    return base + DESCRIPTOR_SUFFIX


def indent(lines: list[str], depth: int = 1) -> list[str]:
    return ["    " * depth + line for line in lines]


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


HALF = {"torch.float16": "tl.float16", "torch.bfloat16": "tl.bfloat16"}
STEPS = {"round", "floor", "ceil", "trunc", "frac", "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge", "sign",
         "signbit", "heaviside"}  # pointwise functions a value's last bit can move by a whole step (Gen.stepped)


def tf32_parts(name: str) -> list[str]:
    """Lines splitting an fp32 tile `name` into TF32 parts {name}h + {name}l, once for every product that reads
    it (parts "hand"): the high part rounded to TF32's 10 mantissa bits in integer arithmetic, the low part the
    exact rest (TF32 tensor cores read it to its top 10 bits, 2^-22 of the value). An infinity (or a value whose
    rounding overflows) is all low part: only lo * hi reads it, against the other's high part, which is 0 only
    where that value is, so its products are PyTorch's (a high infinity met a low part of 0 or of the other
    sign in hi * lo, and made NaN)."""
    return [f"{name}h = (({name}.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)",
            f'{name}h = tl.where(tl.abs({name}h) == float("inf"), 0.0, {name}h)',
            f"{name}l = {name} - {name}h"]


def split_dot(acc: str, a: str, b: str) -> list[str]:
    """Lines adding a @ b to `acc` at fp32's accuracy from the tiles' TF32 parts (tf32_parts): lo*hi + hi*lo +
    hi*hi chained in a fresh accumulator, then added in fp32 (chained into the running sum instead, a tensor
    core's accumulation drops bits at every step: split_operands)."""
    return [f'pr = tl.dot({a}l, {b}h, input_precision="tf32")', f'pr = tl.dot({a}h, {b}l, pr, input_precision="tf32")',
            f'pr = tl.dot({a}h, {b}h, pr, input_precision="tf32")', f"{acc} += pr"]


def dot_cast(a: Leaf, b: Leaf, operands: str) -> str:
    """The cast each tl.dot operand takes as it is loaded; the accumulator is fp32 either way. 16-bit operands
    (bf16, fp16) stay 16-bit with `operands` "input" (tensor cores; an fp32 buffer between kernels is rounded
    to the dtype, as PyTorch's own intermediate is) or are upcast with "fp32" (exact products: also what the
    Triton interpreter, whose tl.dot reads bfloat16 operands as integers, computes right). fp32 operands stay
    as they are (input_precision decides); a 16-bit operand meeting one of another dtype is upcast."""
    a_half, b_half = HALF.get(str(a.dtype)), HALF.get(str(b.dtype))
    if a_half is None and b_half is None:
        return ""
    if operands == "fp32" or a_half != b_half:
        return ".to(tl.float32)"
    if operands != "input":
        raise ValueError(f"operands must be 'input' or 'fp32', not {operands!r}")
    return f".to({a_half})"


class Scope:
    def __init__(self):
        self.lines: list[str] = []
        self.cache: dict = {}


def narrow_rows(kernel: Kernel) -> set[tuple]:
    """The bf16 inputs (base, offset, strides) that a one-pass row kernel holds as loaded, two values a register
    (Gen.narrow): those reduced by max or min in a kernel whose outputs are per row (cross-entropy, logsumexp).
    On an H200 (session 12) cross-entropy over 4096x32000 bf16 logits went 0.192 -> 0.076 ms at 8 warps (16
    warps: 0.165 -> 0.084); a softmax, whose exps stay live for its store, ran 1.5% slower."""
    if kernel.layout != "row" or kernel.writes_elements:
        return set()
    return {(r.args[0].base, r.args[0].offset, r.args[0].strides) for r in kernel.nodes
            if r.op == "reduce" and r.fn in ("max", "min") and isinstance(r.args[0], Leaf)
            and str(r.args[0].dtype) == "torch.bfloat16"}


def pair_rows(kernel: Kernel) -> set[tuple]:
    """The bf16 rows (base, offset, strides) that a one-pass row kernel with per-element outputs can hold as
    32-bit pairs (the parameter pairs; Gen.pair_load, Gen.restage): read whole, contiguous, an even number of
    elements a row from an even offset. The kernel's per-element values are recomputed from them at each
    reduction stage and at the store, so only the pairs stay live across a reduction. On an H200 (session 12) a
    softmax over 2048x32768 bf16 ran in 0.0719 ms so (16 warps, two blocks an SM), in 0.0888 with its fp32 exps
    held (one block an SM)."""
    if kernel.layout != "row" or kernel.rdims != (len(kernel.domain) - 1,) or kernel.domain[-1] % 2 \
            or not kernel.writes_elements:
        return set()
    strides = contiguous_strides(kernel.domain)
    return {(leaf.base, leaf.offset, leaf.strides) for leaf in _leaves(kernel.nodes, kernel.level)
            if leaf.kind == "tensor" and str(leaf.dtype) == "torch.bfloat16" and tuple(leaf.shape) == kernel.domain
            and tuple(leaf.strides) == strides and leaf.offset % 2 == 0 and not leaf.bounds}


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
        self.big = extent > INT32_MAX or p.get("offsets64", False)
        # full tiles loaded and stored transposed, their rows the last axis: a phased convolution of one K step
        # over a few input channels, whose rows are output positions (implicit_gemm.render_conv says why)
        self.positions_last = False
        self.channel_mask = ""  # a rows tile's mask of its channels alone (implicit_gemm._render_rows; rm: a row)
        self.evict = ""  # an eviction policy for per-element loads and stores (a lagged split's, kernels._lagged)
        self.load_evict = ""  # one for per-element loads alone (a flat kernel's `evict`, kernels._flat)
        self.reread_evict = ""  # one for per-element loads of a smaller tensor, read again along the walk
        self.chunk_start = None  # a row kernel's chunk start where per-element code runs (r0 in a chunk loop)
        self.pivot_values: dict = {}  # the values a Welford pivot's chunk loaded (a held split reuses them)
        self.tile_mask = "mask"  # what a tap's load is masked by besides its checks (window_lanes: the rows')
        self.walk_init: list[str] = []  # lines before a walking plane kernel's loop over its planes (kernels._plane)
        self.walk_back = 0  # how far before its first output a walk starts, in outputs (walk_lead; kernels._plane)
        self.flip = False  # a reversed scan's chunks take their lanes from the end, and scan forward (kernels._loop)
        kept = [d for d in range(len(self.D)) if d not in kernel.rdims]
        if self.layout == "flat":
            self.groups = [(list(range(len(self.D))), "offs")]
        elif self.layout == "plane":  # the leading dims per program, a [BLOCK_H, BLOCK_W] tile of the last two
            rank = len(self.D)
            self.groups = [(list(range(rank - 2)), "ro"), ([rank - 2], "rh"), ([rank - 1], "rw")]
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
        self.tiles: set[str] = set()  # variables holding a tile of indices (see hoist)
        # bf16 rows a one-pass kernel holds as loaded (narrow_rows): their max or min is taken at that
        # width (exact), their other uses widen by bits (_widen), which the compiler does not merge with the
        # max's own upcast, so no fp32 copy of the row stays live across the reduction
        self.narrow = narrow_rows(kernel) if p.get("mode") == "one_pass" else set()
        self.stabilizers: set = set()  # maxes a softmax subtracts, reduced by tl.max (kernels._reduction)
        self.raw: dict[str, str] = {}  # a narrow load's widened code -> the loaded value's name
        # rows held as 32-bit pairs (pair_rows), widened per stage (restage): the stage's number and the pairs
        self.pairs = pair_rows(kernel) if p.get("pairs") and p.get("mode") == "one_pass" else set()
        self.stage = 0
        self.pair_loads: dict[tuple, str] = {}

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
            return "[BLOCK_H, BLOCK_W // VEC, VEC]" if self.p.get("VEC", 1) > 1 else "[BLOCK_H, BLOCK_W]"
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
        if code.lstrip("-").isdigit() or self.layout == "plane" and not self.is_block(code):
            # a single position (a plane of one output): give it the tile's shape so stores are blocks
            code = f"{ {'flat': 'offs', 'row': 'ro', 'col': 'ri', 'plane': 'rh * 0 + rw'}.get(self.layout, 'rm * 0 + rn')} * 0 + {code}"
        elif self.layout == "gemm":  # a GEMM's output of one row or column (N = 1): still a whole tile's offsets
            code += "".join(f" + {axis} * 0" for axis in ("rm", "rn") if not re.search(rf"\b{axis}\b", code))
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
                n = math.prod(shape[i] for i in run)
                idx = self.aligned(cs[run[-1]], n) if self.layout == "gemm" else None
                if idx is None:
                    idx = lin if cs[run[-1]] == 1 else f"({lin} // {cs[run[-1]]})"
                    if live.index(run[0]) > 0:
                        idx = f"({idx} % {n})"
                parts.append(idx if st[run[-1]] == 1 else f"{idx} * {st[run[-1]]}")
            run = [j] if j is not None and st[j] else []
        if leaf.offset:
            parts.append(str(leaf.offset))
        return " + ".join(parts) if parts else "0"

    def aligned(self, c: int, n: int) -> str | None:
        """(linear index // c) % n written over the domain's own coordinates, where both cuts fall on its dims:
        c is a times the stride of some dim k (a dividing that dim's size), and c * n the size of the dims from
        some dim `top` on. It is then the linear index of dims top..k, divided by a. A convolution's epilogue
        so reads a group norm's statistic (rows (batch, group), c = a group's elements) once a channel, not
        through the flat index once an element. None where the cuts do not fall on dims."""
        cs, total = contiguous_strides(self.D), math.prod(self.D)
        k = next((d for d in range(len(self.D)) if c % cs[d] == 0 and (cs[d - 1] if d else total) % c == 0), None)
        top = next((d for d in range(len(self.D)) if c * n == (cs[d - 1] if d else total)), None)
        if k is None or top is None or top > k:
            return None
        a = c // cs[k]
        code = self.offset([(d, cs[d] // cs[k]) for d in range(top, k + 1)])
        return code if a == 1 else f"(({code}) // {a})"

    def is_block(self, code: str) -> bool:
        """Whether an index expression is a tile (not one scalar per program)."""
        names = {"flat": "offs", "row": "ro|rr", "col": "rr|ri", "plane": "rh|rw|rg|lane",
                 "gemm": "rm|rn|rw"}[self.layout]
        names = "|".join([names, r"lin\d+"] + sorted(self.tiles))
        return re.search(rf"\b({names})\b", code) is not None

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
        if level == "full" and not inside and self.chunk_constant(leaf, shape):
            return self.chunk_load(leaf, off)
        step = self.chunk_step(leaf, shape) if level == "full" and not inside else 0
        if step:
            return self.chunk_pair_load(leaf, off, step)
        scope = self.body if level == "full" else self.top
        key = ("load", leaf.base, off, level, inside)
        held = (leaf.base, leaf.offset, leaf.strides) if level == "full" else None  # as pairs or as loaded
        if held in self.pairs:
            return self.pair_load(leaf, key)
        if key not in scope.cache:
            name = self.fresh("x")
            mask = "mask" if level == "full" else "rmask"
            if self.channel_mask and level == "full" and not self.is_block(re.sub(r"\b(rn|rm)\b", "", off)):
                mask = self.channel_mask  # a per-channel value: loaded once a channel, not once an element
            if inside:
                mask = f"{mask} & {inside}" if self.is_block(off + inside) else inside
            # a tile of the rows, loaded as stores store it (store_lines)
            t = _trans if self.positions_last and level == "full" and re.search(r"\brm\b", off) else str
            # one element under a block's branch mask (a buffer's element in one part of a concatenation): Triton
            # masks only a block of addresses, so the element is loaded, then the mask applied
            scalar = inside and not self.is_block(off) and self.is_block(inside)
            masked = f", mask={t(mask)}, other=0" if (self.is_block(off) or inside) and not scalar else ""
            cast = load_cast(leaf.dtype)
            # the tensor the kernel walks takes the kernel's policy; a smaller one read again along it (RoPE's cos
            # and sin, by every head) takes reread_evict
            reread = level == "full" and rereads(leaf, math.prod(self.D))
            walked = level == "full" and not reread
            policy = (self.evict or self.load_evict) if walked else self.reread_evict if reread else ""
            evict = f", eviction_policy=\"{policy}\"" if policy else ""
            load = f"tl.load({t(f'{self.ptr(leaf.base)} + {off}')}{masked}{evict})"
            if scalar:
                load = f"tl.where({t(mask)}, {load}, 0)"
            narrow = held in self.narrow
            scope.lines.append(f"{name} = {t(load)}" + ("" if narrow else cast))
            scope.cache[key] = E(f"_widen({name})", "f") if narrow else E(name, kind_of(leaf.dtype))
            if narrow:
                self.raw[scope.cache[key].code] = name
        return scope.cache[key]

    def pair_load(self, leaf: Leaf, key: tuple) -> E:
        """A row held as 32-bit pairs (self.pairs): loaded once, through an int32 view of its flattened tensor
        (the rows are even; a dim of the tensor may be odd: a group norm's rows span its channels), and widened
        where this stage uses it. Each stage's shift, 16 plus the stage's number times program_id(1) (0 in
        these one-dimensional grids), is one the compiler cannot prove equal to another stage's, so it keeps
        no widened row live across a reduction."""
        if key not in self.pair_loads:
            half = self.R // 2
            name = self.fresh("u")
            if not self.pair_loads:
                self.top.lines.append("rp = tl.arange(0, BLOCK_R // 2)[None, :]")
            words = self.ptr(leaf.base + ".view(-1).view(torch.int32)")
            evict = f", eviction_policy=\"{self.load_evict}\"" if self.load_evict else ""
            self.top.lines += [f"{name} = tl.load({words} + ro * {half} + "
                               f"{leaf.offset // 2} + rp, mask=rmask & (rp < {half}), other=0{evict})"
                               f".to(tl.uint32, bitcast=True)"]
            self.pair_loads[key] = name
        return E(f"_pairs({self.pair_loads[key]}, 16 + {self.stage} * tl.program_id(1))", "f")

    def restage(self, stage: int) -> None:
        """Pairs (self.pairs): the next reduction stage, or the store, recomputes its per-element values from
        the pairs rather than reading them from an earlier stage. Nothing without pairs."""
        if not self.pairs:
            return
        self.stage = stage
        self.take_per_element()

    def take_per_element(self) -> dict:
        """The per-element values (full-level nodes, inlined expressions) cached in the top scope, removed from
        it: what a one-pass kernel computed over its whole row, which a later use must not take for its own."""
        full = {key: v for key, v in self.top.cache.items() if isinstance(key, Node) and self.k.level.get(key) == "full"
                or isinstance(key, tuple) and key[0] == "inline" and key[-1] == "full"}
        for key in full:
            del self.top.cache[key]
        return full

    def chunk_constant(self, leaf: Leaf, shape: tuple) -> bool:
        """Whether a row kernel's leaf, read per element, holds one value over each chunk of BLOCK_R: every dim
        it walks (of `shape`, a reshape of the domain) steps a multiple of BLOCK_R apart in the linear index, and
        rows and chunks start on multiples of BLOCK_R (a group norm's per-channel weight, a channel a plane)."""
        steps = self._chunk_walk(leaf, shape)
        return steps is not None and self.R % self.block_r == 0 and all(s % self.block_r == 0 for s in steps)

    def chunk_step(self, leaf: Leaf, shape: tuple) -> int:
        """Where a row kernel's leaf, read per element, changes value at most once in a chunk: every dim it
        walks steps at least BLOCK_R apart in the linear index, so its value changes only at multiples of the
        smallest such step (returned; 0 where this does not hold). A group norm's per-channel weight over
        planes of 31 x 63 x 63 (KernelBench level 2's 60) was a division and a gather per element."""
        steps = self._chunk_walk(leaf, shape)
        return min(steps) if steps and min(steps) >= self.block_r else 0

    def _chunk_walk(self, leaf: Leaf, shape: tuple) -> list[int] | None:
        """The linear-index steps of the dims (of `shape`, a reshape of the domain) that a leaf read per element
        in a row kernel's chunk loop walks; None outside a chunk loop."""
        if self.layout != "row" or self.chunk_start is None or not getattr(self, "block_r", None) \
                or math.prod(shape) != math.prod(self.D):
            return None
        lead = len(shape) - len(leaf.shape)
        cs = contiguous_strides(shape)
        return [cs[j] for j in range(len(shape)) if j >= lead and leaf.shape[j - lead] == shape[j] and shape[j] > 1
                and leaf.strides[j - lead]]

    def chunk_load(self, leaf: Leaf, off: str, at: str | None = None, mask: str = "rmask") -> E:
        """A chunk-constant leaf (chunk_constant) loaded once per chunk: its offset at the chunk's start, or at
        the row position `at`."""
        lin = self.body.cache.get(("linear", "full"))
        if lin:  # the linear index as its code, so that rr can be set to the chunk's start
            off = re.sub(rf"\b{lin}\b", f"({self.linear_code()})", off)
        off = re.sub(r"\brr\b", f"({at or self.chunk_start})", off)
        if not re.search(r"\bro\b", off):  # the same for every row (a channel's bias, rows a whole number of
            off = f"ro * 0 + {off}"  # channel blocks): a block, as Triton wants under the rows' block mask
        key = ("chunk load", leaf.base, off)
        if key not in self.body.cache:
            name = self.fresh("x")
            cast = load_cast(leaf.dtype)
            self.body.lines.append(f"{name} = tl.load({self.ptr(leaf.base)} + {off}, mask={mask}, other=0){cast}")
            self.body.cache[key] = E(name, kind_of(leaf.dtype))
        return self.body.cache[key]

    def chunk_pair_load(self, leaf: Leaf, off: str, step: int) -> E:
        """A leaf that changes value at most once in a chunk (chunk_step): its values at the chunk's start and
        at the first multiple of `step` after it, each loaded once per chunk, one picked per element."""
        key = ("chunk pair", leaf.base, off)
        if key not in self.body.cache:
            lin = self.linear("full")
            if ("edge", step) not in self.body.cache:  # the chunk's first linear index, and the step after it
                start, edge = self.fresh("start"), self.fresh("edge")
                code = re.sub(r"\brr\b", f"({self.chunk_start})", self.linear_code())
                self.body.lines += [f"{start} = {code}", f"{edge} = ({start} // {step} + 1) * {step}"]
                self.body.cache[("edge", step)] = (start, edge)
            start, edge = self.body.cache[("edge", step)]
            first = self.chunk_load(leaf, off)
            after = self.chunk_load(leaf, off, f"{self.chunk_start} + {edge} - {start}",
                                    f"rmask & ({edge} < {math.prod(self.D)})")
            self.body.cache[key] = E(f"tl.where({lin} >= {edge}, {after.code}, {first.code})", first.kind)
        return self.body.cache[key]

    def linear_code(self) -> str:
        """The full linear index as code over ro and rr (Gen.linear names it)."""
        cs = contiguous_strides(self.D)
        return self.offset([(d, cs[d]) for d in range(len(self.D)) if self.D[d] > 1])

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

    def value(self, m: Node) -> str:
        level = self.k.level[m]
        scope = self.body if level == "full" else self.top
        if m in scope.cache:
            return scope.cache[m]
        if m in self.top.cache:
            return self.top.cache[m]
        if m.op == "view" and m.args[0] not in self.k.level:  # a reshape of a pointwise node of leaves (an output
            e = self.inline(m, m.shape, level)  # of pixel_shuffle: a permuted copy reshaped), recomputed here
            self.kinds[m] = e.kind
            scope.cache[m] = e.code
            return e.code
        if m.op == "view":
            name = self.value(m.args[0])
            self.kinds[m] = self.kinds[m.args[0]]
            return name
        if m.op == "pw" and m.fn == "gather":
            e = self.gather(m, level)
            code = e.code
        elif m.op == "pw":
            e = self.pointwise(m, [self.arg(a, m, level) for a in m.args], level)
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
        if code is None or number(e) is not None:  # a number (a comparison of two) stays one: a bool has no .to()
            scope.cache[m] = e.code
            return e.code
        name = self.fresh("v")
        scope.lines.append(f"{name} = {code}")
        scope.cache[m] = name
        return name

    def pointwise(self, m: Node, args: list, level: str) -> E:
        """m's expression over its emitted args. Per element, a true division by a row's value (softmax's sum)
        multiplies by its reciprocal, taken once per row; but not where a step (a rounding, a comparison) takes the
        quotient, whose last bit can move it a whole step (an fp8 quantizer's x / scale at a tie)."""
        d = m.args[1] if m.fn == "div" and len(m.args) == 2 else None
        if level == "full" and not m.attrs.get("rounding_mode") and isinstance(d, Node) and \
                self.k.level.get(d) == "red" and args[1].kind == "f" and not self.stepped(m):
            key = ("reciprocal", d)
            if key not in self.top.cache:
                self.top.cache[key] = self.fresh("inv")
                self.top.lines.append(f"{self.top.cache[key]} = 1.0 / {args[1].code}")
            return E(f"({f(args[0])} * {self.top.cache[key]})", "f")
        return POINTWISE[m.fn](args, m.attrs)

    def stepped(self, m: Node) -> bool:
        """Whether a step function of the kernel takes m: a rounding (round, floor, ceil, trunc, a cast that rounds
        or makes an integer), a remainder or a comparison."""
        for n in self.k.nodes:
            if n.op == "pw" and any(a is m for a in n.args) and (n.fn in STEPS or n.fn == "cast" and (
                    n.attrs.get("round") or not n.dtype.is_floating_point)):
                return True
        return False

    def inline(self, p: Node, shape: tuple, level: str) -> E:
        """A pointwise node of leaves, recomputed here at the consumer's positions (its leaves attached to the
        consumer's shape), instead of being read back from a buffer."""
        if p.op == "view":  # a reshape: the source at its own shape, addressed through the linear index
            return self.inline(p.args[0], p.args[0].shape, level)
        scope = self.body if level == "full" else self.top
        key = ("inline", p, tuple(shape), level)
        if key not in scope.cache:
            e = self.pointwise(p, [self.arg(a, p, level, shape) for a in p.args], level)
            if number(e) is not None:
                scope.cache[key] = e
                return e
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
        """Each output element reads its window over the input's trailing len(kernel) dims, taps unrolled, and
        takes their max, their average or (conv) their sum weighted by its channel's filter. The input is a leaf
        or a pointwise tree of leaves recomputed at each tap; a tap is bounds-checked only where some output's
        tap falls outside the input (padding, ceil_mode, adaptive windows)."""
        x, a = m.args[0], m.attrs
        lead = len(m.shape) - len(a["kernel"])
        axes = [self.window_axis(m, d) for d in range(lead, len(m.shape))]
        index: list = list(range(lead))  # x's leading dims are the domain's, but for a channel multiplier
        if a.get("multiplier", 1) > 1:
            index[1] = f"({self.dim_index(1)} // {a['multiplier']})"
        if self.p.get("VEC", 1) > 1 and lane_window(m):
            return self.window_lanes(m, axes, index)
        lines = self.body.lines
        acc = self.fresh("acc")
        neutral = NEUTRAL["max"] if m.fn == "max" else "0.0"
        walk = self.window_start(m, [acc], self.tile("full"), neutral)
        pairs = self.p.get("pairs") and pair_window(m)
        for taps in itertools.product(*(axis.taps for axis in axes)):
            if walk and taps[0][0] < walk.kept:  # in the last output's window too: in the carry
                continue
            if pairs:
                xv = self.pair_tap(m, index, taps, neutral)
            else:
                checks = [[]] * lead + [c for _, _, c in taps]
                xv = self.at(x, index + [pos for _, pos, _ in taps], checks, neutral)
                read = isinstance(x, Leaf) and all(n > 1 and st for cs, n, st in zip(checks, x.shape, x.strides)
                                                   if cs)
                if any(checks) and not read:  # a computed tap, or a checked dim the load skips: the neutral value
                    xv = E(f"tl.where({self.all_of([c for cs in checks for c in cs])}, {f(xv)}, {neutral})", "f")
            targets = [acc] + walk.nexts if walk and taps[0][0] >= walk.shift else [acc]  # what the next shares
            if m.fn == "max":
                lines += [f"{t} = tl.maximum({t}, {f(xv)}, propagate_nan=tl.PropagateNan.ALL)" for t in targets]
            elif m.fn == "avg":
                lines += [f"{t} += {f(xv)}" for t in targets]
            else:
                woff = self.tap_weight(m, [t for t, _, _ in taps])
                wmask = ", mask=mask, other=0.0" if self.is_block(woff) else ""
                lines.append(f"{acc} += {f(xv)} * tl.load({self.ptr(m.args[1].base)} + {woff}{wmask}).to(tl.float32)")
        if walk:
            lines += walk.end
        if m.fn == "avg":
            lines.append(f"{acc} = {acc} / ({_divisor(a, axes)})")
        return acc

    def window_start(self, m: Node, accs: list[str], tile: str, neutral: str) -> _Walk | None:
        """Lines starting a window's accumulators at the neutral value, or where it walks (p["walk"], walks) at
        their carries, the planes each shares with the walk's last output, already reduced (kernels._plane), a
        `nxt` each gathering those the next output shares; the walk's names, None where it does not walk."""
        if not (self.p.get("walk") and walks(m, len(self.D))):
            self.body.lines += [f"{acc} = tl.full({tile}, {neutral}, tl.float32)" for acc in accs]
            return None
        k, shift = m.attrs["kernel"][0], walk_step(m)[1]
        carries, nexts = [self.fresh("carry") for _ in accs], [self.fresh("nxt") for _ in accs]
        self.walk_init += [f"{c} = tl.full({tile}, {neutral}, tl.float32)" for c in carries]
        self.body.lines += [f"{acc} = {c}" for acc, c in zip(accs, carries)]
        self.body.lines += [f"{n} = tl.full({tile}, {neutral}, tl.float32)" for n in nexts]
        return _Walk(k - shift, shift, nexts, [f"{c} = {n}" for c, n in zip(carries, nexts)])

    def pair_tap(self, m: Node, index: list, taps: tuple, neutral: str) -> E:
        """A tap of a window at stride 2 along the row (pair_window), taken from a load of the two elements at
        2 * output + 2c (c = floor(offset / 2) for the tap's offset from 2 * output, the element its remainder);
        each pair is loaded once for all the taps in it, and split in registers. A 3-tap window, unpadded or
        padded by 1, loads two pairs a row where it loaded three elements. On an H200 (session 37) KernelBench's
        3-D average pool walking 2-row tiles ran 2.343 ms at 4 warps against 2.432 a tap at a time (at 2 warps
        2.471); by hand, one pair and one element a row ran the same."""
        x, a = m.args[0], m.attrs
        *inner, (t, _, _) = taps
        offset = t * a["dilation"][-1] - a["padding"][-1]
        c = offset // 2
        key = ("pair", x.base, tuple(pos for _, pos, _ in inner), c)
        if key not in self.body.cache:
            o, size, width = self.dim_index(len(m.shape) - 1), m.shape[-1], x.shape[-1]
            pos = f"({o} * 2 {'+' if c > 0 else '-'} {abs(2 * c)})" if c else f"({o} * 2)"
            off = self.tap_offset(x, index + [p for _, p, _ in inner] + [pos])
            elem = f"{pos}[:, :, None] + tl.arange(0, 2)[None, None, :]"
            bounds = ([f"({elem} >= 0)"] if c < 0 else []) + \
                     ([f"({elem} < {width})"] if 2 * (size - 1) + 2 * c + 1 >= width else [])
            ok = " & ".join([f"({self.all_of([ch for _, _, cs in inner for ch in cs])})[:, :, None]"] + bounds)
            pair, lo, hi = self.fresh("xp"), self.fresh("lo"), self.fresh("hi")
            self.body.lines += [f"{pair} = tl.load({self.ptr(x.base)} + ({off})[:, :, None] + tl.arange(0, 2)"
                                f"[None, None, :], mask={ok}, other={neutral}).to(tl.float32)",
                                f"{lo}, {hi} = tl.split({pair})"]
            self.body.cache[key] = (lo, hi)
        return E(self.body.cache[key][offset - 2 * c], "f")

    def tap_weight(self, m: Node, taps: list[int]) -> str:
        """The offset of a depthwise convolution's filter weight at these taps (one per window axis), for the
        output's channel."""
        w = m.args[1]
        return f"{self.dim_index(1)} * {w.strides[0]} + " \
               f"{sum(t * w.strides[2 + j] for j, t in enumerate(taps)) + w.offset}"

    def window_lanes(self, m: Node, axes: list[_Axis], index: list) -> str:
        """`window` where a lane takes VEC outputs in a row (`_plane`: the tile [BLOCK_H, BLOCK_W // VEC, VEC],
        `rg` a lane's first output, `lane` the offsets from it). For each tap of the leading axes the lane loads
        the VEC-wide aligned chunks its outputs' windows span along the row (from the first output's first tap,
        rounded down to a multiple of VEC, to the last output's last), one vector load each, splits them into
        elements and takes each output's taps from those: a load of VEC elements where there was a load a tap.
        A chunk serves outputs left of it, so its load is masked by the rows (`hmask`) and the input's bounds,
        not by the tile's mask. On an H200 (session 20) KernelBench's 1-D max pool (8 taps, dilation 3) ran
        2.088 -> 1.608 ms, its 1-D average pool 1.350 -> 1.029, its 3x7 depthwise convolution 0.448 -> 0.363.
        A walk (p["walk"]) carries each lane output's shared planes as `window` does. Walking, on an H200
        (session 36): the 3-D max pool dilated by 3 1.193 -> 1.169 ms at VEC 4 and 1 warp (1.20-3.63 at other
        widths and warps), the 3-D average pool 2.433 -> 2.59-3.74 at VEC 2 and 4 (slower everywhere)."""
        x, a, vec = m.args[0], m.attrs, self.p["VEC"]
        pad, dil, step, width = a["padding"][-1], a["dilation"][-1], a["stride"][-1], x.shape[-1]
        start = (-pad // vec) * vec  # the first chunk's offset from a lane's first output's first tap, aligned
        first = -pad - start  # the first output's first tap in that chunk
        last = first + step * (vec - 1) + dil * (a["kernel"][-1] - 1) + 1  # one past the last output's last tap
        row = "rw" if step == 1 else f"rg * {step} + lane"  # a chunk's elements, from the lane's first tap
        lines, lead = self.body.lines, len(m.shape) - len(a["kernel"])
        neutral = NEUTRAL["max"] if m.fn == "max" else "0.0"
        part = "[BLOCK_H, BLOCK_W // VEC]"
        accs = [self.fresh("acc") for _ in range(vec)]
        walk = self.window_start(m, accs, part, neutral)  # walking, each lane's outputs carry their shared planes
        outer, self.tile_mask = self.tile_mask, "hmask"
        for taps in itertools.product(*(axis.taps for axis in axes[:-1])):
            if walk and taps[0][0] < walk.kept:  # in the carry
                continue
            elems = []
            for c in range(-(-last // vec)):
                offset = start + c * vec
                pos = f"({row} + {offset})" if offset else f"({row})"
                bounds = ([f"({pos} >= 0)"] if offset < 0 else []) + [f"({pos} < {width})"]
                checks = [[]] * lead + [cs for _, _, cs in taps] + [bounds]
                xv = self.at(x, index + [p for _, p, _ in taps] + [pos], checks, neutral)
                if not isinstance(x, Leaf):  # a computed chunk: the neutral value outside the input
                    xv = E(f"tl.where({self.all_of([c for cs in checks for c in cs])}, {f(xv)}, {neutral})", "f")
                elems += self.lanes(f(xv), vec)
            for t, _, _ in axes[-1].taps:
                if m.fn == "conv":  # one filter tap a program: a scalar
                    weight = self.fresh("wt")
                    woff = self.tap_weight(m, [k for k, _, _ in taps] + [t])
                    lines.append(f"{weight} = tl.load({self.ptr(m.args[1].base)} + {woff}).to(tl.float32)")
                for j, acc in enumerate(accs):
                    e = elems[first + step * j + dil * t]
                    for target in [acc, walk.nexts[j]] if walk and taps[0][0] >= walk.shift else [acc]:
                        lines.append(f"{target} = tl.maximum({target}, {e}, propagate_nan=tl.PropagateNan.ALL)"
                                     if m.fn == "max" else
                                     f"{target} += {e}" if m.fn == "avg" else f"{target} += {e} * {weight}")
        if walk:
            lines += walk.end
        self.tile_mask = outer
        acc = self.fresh("acc")
        lines.append(f"{acc} = {_join_lanes(accs)}")
        if m.fn == "avg":
            lines.append(f"{acc} = {acc} / ({_divisor(a, axes)})")
        return acc

    def lanes(self, code: str, vec: int) -> list[str]:
        """A [BLOCK_H, BLOCK_W // VEC, vec] tile split along its last dim into vec tiles, in order."""
        name = code
        if not code.isidentifier():
            name = self.fresh("ch")
            self.body.lines.append(f"{name} = {code}")
        even, odd = self.fresh("ev"), self.fresh("od")
        whole = name if vec == 2 else f"tl.reshape({name}, [BLOCK_H, BLOCK_W // VEC, {vec // 2}, 2])"
        self.body.lines.append(f"{even}, {odd} = tl.split({whole})")
        if vec == 2:
            return [even, odd]
        out = []
        for e, o in zip(self.lanes(even, vec // 2), self.lanes(odd, vec // 2)):
            out += [e, o]
        return out

    def window_axis(self, m: Node, d: int) -> _Axis:
        """The taps of a window along domain dim d: a pooling or convolution window (stride, padding,
        dilation) or an adaptive one, [floor(o * I / O), ceil((o + 1) * I / O)); and its element count."""
        a = m.attrs
        j = d - (len(m.shape) - len(a["kernel"]))
        size, I, O = a["kernel"][j], m.args[0].shape[d], m.shape[d]
        o = self.dim_index(d)
        if a.get("adaptive", (False,) * len(a["kernel"]))[j]:
            shortest = min(-(-(i + 1) * I // O) - i * I // O for i in range(O))
            big = ".to(tl.int64)" if O * I + O > INT32_MAX else ""
            start = self.hoist("st", f"({o}{big} * {I}) // {O}")
            end = self.hoist("en", f"({o}{big} * {I} + {I + O - 1}) // {O}")
            taps = [(t, f"({start} + {t})", [] if t < shortest else [f"({start} + {t} < {end})"]) for t in range(size)]
            return _Axis(taps, f"({end} - {start})")
        s, p, dil = a["stride"][j], a["padding"][j], a["dilation"][j]
        first, last = -p, (O - 1) * s - p  # where the first and the last output's windows start
        least = first - s * self.walk_back if j == 0 else first  # and the first the kernel computes
        if o == "0":
            start = -p
        elif s == 1 and p == 0:
            start = o
        else:
            start = self.hoist("st", f"{o} * {s} - {p}" if p else f"{o} * {s}")
        taps = []
        for t in range(size):
            lo, hi = least + t * dil, last + t * dil
            if hi < 0 or lo >= I:  # outside the input for every output
                continue
            pos = str(start + t * dil) if isinstance(start, int) else f"({start} + {t * dil})" if t else start
            taps.append((t, pos, ([f"({pos} >= 0)"] if lo < 0 else []) + ([f"({pos} < {I})"] if hi >= I else [])))
        # the average's divisor: the window clipped to the padded input, or (count_include_pad off) to the input
        pad_hi = I + p if a.get("count_include_pad", True) else I
        pad_lo = -p if a.get("count_include_pad", True) else 0
        if last + size <= pad_hi and first >= pad_lo:
            return _Axis(taps, size)
        if isinstance(start, int):
            return _Axis(taps, min(start + size, pad_hi) - max(start, pad_lo))
        hi_code = f"{start} + {size}" if last + size <= pad_hi else f"tl.minimum({start} + {size}, {pad_hi})"
        lo_code = start if first >= pad_lo else f"tl.maximum({start}, {pad_lo})"
        return _Axis(taps, f"({hi_code} - {lo_code})")

    def at(self, v, index: list, checks: list[list[str]], other: str = "0") -> E:
        """`v` (a leaf, or a pointwise tree of leaves this kernel recomputes) at one position per lane: `index`
        has, per dim of v, a domain dim (int d: the lane's index along D's dim d) or an index expression (str),
        and `checks` the bounds checks of each dim's position. A leaf's load is masked by the checks of the dims
        it reads, its masked lanes reading `other`."""
        if isinstance(v, Leaf):
            if v.kind == "const":
                return lit(v.value)
            off = self.tap_offset(v, index)
            read = [c for n, st, cs in zip(v.shape, v.strides, checks) if n > 1 and st for c in cs]
            if v.kind == "iota":
                code = off if (v.value, v.step) == (0, 1) else f"({v.value!r} + {v.step!r} * ({off}))"
                return E(f"({code})", "f" if isinstance(v.value, float) or isinstance(v.step, float) else "i")
            # a tile of addresses is masked by the tile and its checks; one address per program (its positions
            # static or per program) only by its checks
            ok = self.all_of(read) if self.is_block(off) else " & ".join(dict.fromkeys(read))
            key = ("tap", v.base, off, ok, other)
            if key not in self.body.cache:
                name = self.fresh("xv")
                cast = ".to(tl.float32)" if v.dtype.is_floating_point else ""
                mask = f", mask={ok}, other={other}" if ok else ""
                self.body.lines.append(f"{name} = tl.load({self.ptr(v.base)} + {off}{mask}){cast}")
                self.body.cache[key] = E(name, kind_of(v.dtype))
            return self.body.cache[key]
        key = ("tap", v, tuple(index), tuple(map(tuple, checks)))
        if key in self.body.cache:
            return self.body.cache[key]
        if v.op == "view":  # a reshape: the source's indices from the linear position
            src = v.args[0]
            terms = [f"{self.dim_index(i) if isinstance(i, int) else i} * {c}"
                     for i, c, n in zip(index, contiguous_strides(v.shape), v.shape) if n > 1]
            lin = self.hoist("ix", " + ".join(terms) or "0")
            merged = list(dict.fromkeys(c for cs in checks for c in cs))
            e = self.at(src, [f"(({lin} // {c}) % {n})" for c, n in zip(contiguous_strides(src.shape), src.shape)],
                        [merged] * len(src.shape))
        else:
            args = []
            for arg in v.args:
                if isinstance(arg, Value):  # broadcast: right-aligned, size-1 dims read index 0
                    lead = len(v.shape) - len(arg.shape)
                    args.append(self.at(arg, [i if n > 1 else "0" for i, n in zip(index[lead:], arg.shape)],
                                        [cs if n > 1 else [] for cs, n in zip(checks[lead:], arg.shape)]))
                else:
                    args.append(lit(arg) if isinstance(arg, (bool, int, float)) else arg)
            e = POINTWISE[v.fn](args, v.attrs)
            name = self.fresh("v")
            self.body.lines.append(f"{name} = {e.code}")
            e = E(name, e.kind)
        self.body.cache[key] = e
        return e

    def tap_offset(self, leaf: Leaf, index: list) -> str:
        """A leaf's element offset at `index` (see `at`); the part over domain dims is computed once."""
        dom, code = [], []
        for i, n, st in zip(index, leaf.shape, leaf.strides):
            if n == 1 or st == 0 or i == "0":
                continue
            if isinstance(i, int):
                dom.append((i, st))
            else:
                code.append(i if st == 1 else f"{i} * {st}")
        base = self.offset(dom, leaf.offset)
        if dom and not base.isidentifier():
            base = self.hoist("xb", base)
        return " + ".join([base] + code) if base != "0" or not code else " + ".join(code)

    def all_of(self, checks: list[str]) -> str:
        """The tile mask and these bounds checks; checks of one scalar per program select the mask whole."""
        checks = list(dict.fromkeys(checks))
        ok = " & ".join([self.tile_mask] + [c for c in checks if self.is_block(c)])
        scalar = [c for c in checks if not self.is_block(c)]
        return f"tl.where({' & '.join(scalar)}, {ok}, False)" if scalar else ok

    def hoist(self, prefix: str, code: str) -> str:
        """An index expression computed once into a variable of this scope (marked a tile when it is one)."""
        key = ("hoist", code)
        if key not in self.body.cache:
            name = self.fresh(prefix)
            self.body.lines.append(f"{name} = {code}")
            if self.is_block(code):
                self.tiles.add(name)
            self.body.cache[key] = name
        return self.body.cache[key]

    # --- scatters ----------------------------------------------------------------------------------
    def scatter(self, m: Node, buf: str) -> str:
        """The store (fn "set"), or atomic add, max or min (fn "add", "max", "min"), of each of the values at its
        place in the target's buffer: along each target dim, this kernel's index along a domain dim, or an index's
        value (below zero counted from the end, as index_put counts it)."""
        shape = m.attrs["shape"]
        terms = []
        for d, (t, stride) in enumerate(zip(m.attrs["target"], contiguous_strides(shape))):
            if shape[d] == 1:
                continue
            if isinstance(t, int):
                i = self.dim_index(t)
            else:
                i = self.hoist("ix", self.arg(m.args[2 + t[1]], m, "full").code)
                i = f"tl.where({i} < 0, {i} + {shape[d]}, {i})"
            terms.append(f"({i}) * {stride}")
        address = f"{self.ptr(buf)} + {' + '.join(terms) or '0'}"
        value = self.arg(m.args[1], m, "full").code
        value = f"({value} + tl.zeros_like(offs)).to({self.ptr(buf)}.dtype.element_ty)"
        op = {"add": "tl.atomic_add", "max": "tl.atomic_max", "min": "tl.atomic_min"}.get(m.fn, "tl.store")
        return f"{op}({address}, {value}, mask=mask)"

    # --- scans -------------------------------------------------------------------------------------
    def scan(self, m: Node) -> str:
        """A running sum, product, max or min along the axis; over a row in chunks, each chunk's scan joined
        with the carry of the chunks before it."""
        v = self.reduce_input(m)
        rev = m.attrs["reverse"] != self.flip
        if m.fn == "logcumsumexp":
            return self.log_scan(v, rev)
        if m.fn in ("sort", "sort_indices"):
            return self.sort(m, v)
        if m.fn in ("cummax_indices", "cummin_indices"):
            return self.index_scan(m, v)
        neutral, combine = SCANS[m.fn]
        acc_type = "tl.float32"
        code = f(v)
        if not m.dtype.is_floating_point:  # integers at the result's width (an int32's cumsum is int64), exact
            neutral, acc_type = integer_identity(m.fn[3:], m.dtype), integer_type(m.dtype)  # cumsum: sum's
            code = f"{v.code}.to({acc_type})"
        src = f"tl.where(mask, {code}, {neutral})"
        out = self.fresh("s")
        if m.fn in ("cumsum", "cumprod"):
            call = f"tl.{m.fn}({{}}, axis={self.axis}, reverse={rev})"
            join = "{} + {}" if m.fn == "cumsum" else "{} * {}"
        else:
            call, join = f"tl.associative_scan({{}}, {self.axis}, {combine}, reverse={rev})", combine + "({}, {})"
        if self.body is self.top:
            self.body.lines.append(f"{out} = {call.format(src)}")
            return out
        carry, vv = self.fresh("carry"), self.fresh("vv")
        self.top.lines.append(f"{carry} = tl.full({self.tile('red')}, {neutral}, {acc_type})")
        total = (f"tl.sum({vv}, axis={self.axis}, keep_dims=True)" if m.fn == "cumsum"
                 else f"tl.reduce({vv}, {self.axis}, {combine}, keep_dims=True)")
        self.body.lines += [f"{vv} = {src}", f"{out} = {join.format(call.format(vv), carry)}",
                            f"{carry} = {join.format(carry, total)}"]
        return out

    def index_scan(self, m: Node, v: E) -> str:
        """The indices of a running max or min, a scan of (value, index) pairs (_lastmax_combine): over a row in
        chunks, each chunk's scan joined with the pair of the chunks before it."""
        big = m.fn == "cummax_indices"
        combine, neutral = ("_lastmax_combine", '-float("inf")') if big else ("_lastmin_combine", 'float("inf")')
        xv, iv, sv, si = (self.fresh(p) for p in ("xv", "xi", "sv", "si"))
        self.body.lines += [f"{xv} = tl.where(mask, {f(v)}, {neutral})", f"{iv} = {self.reduced_index()}",
                            f"{sv}, {si} = tl.associative_scan(({xv}, {iv}), {self.axis}, {combine})"]
        if self.body is self.top:
            return si
        cv, ci, tv, ti = (self.fresh(p) for p in ("cv", "ci", "tv", "ti"))
        self.top.lines += [f"{cv} = tl.full({self.tile('red')}, {neutral}, tl.float32)",
                           f"{ci} = tl.zeros({self.tile('red')}, tl.int32)"]
        self.body.lines += [f"{tv}, {ti} = tl.reduce(({xv}, {iv}), {self.axis}, {combine}, keep_dims=True)",
                            f"{sv}, {si} = {combine}({cv}, {ci}, {sv}, {si})",
                            f"{cv}, {ci} = {combine}({cv}, {ci}, {tv}, {ti})"]
        return si

    def log_scan(self, v: E, rev: bool) -> str:
        """log(cumsum(exp(x))) as a scan of pairs (running max m, sum of exp(x - m)), the value m + log(sum): no
        exp overflows, and a term far below the running max still adds to a sum of order one (a sum of exps
        lost every term under half an ulp of the running total: at -1e4, all of them)."""
        m, s, out = self.fresh("lm"), self.fresh("ls"), self.fresh("s")
        x = f"tl.where(mask, {f(v)}, -float(\"inf\"))"
        call = f"tl.associative_scan(({{}}, {{}}), {self.axis}, _lse_combine, reverse={rev})"
        if self.body is self.top:
            xv = self.fresh("lx")
            self.body.lines += [f"{xv} = {x}", f"{m}, {s} = {call.format(xv, f'tl.zeros_like({xv}) + 1.0')}",
                                f"{out} = {m} + tl.log({s})"]
            return out
        cm, cs, xv, one, tm, ts = (self.fresh(p) for p in ("cm", "cs", "lx", "one", "tm", "ts"))
        self.top.lines += [f"{cm} = tl.full({self.tile('red')}, -float(\"inf\"), tl.float32)",
                           f"{cs} = tl.zeros({self.tile('red')}, tl.float32)"]
        self.body.lines += [
            f"{xv} = {x}", f"{one} = tl.zeros_like({xv}) + 1.0", f"{m}, {s} = {call.format(xv, one)}",
            f"{tm}, {ts} = tl.reduce(({xv}, {one}), {self.axis}, _lse_combine, keep_dims=True)",
            f"{m}, {s} = _lse_combine({cm}, {cs}, {m}, {s})", f"{out} = {m} + tl.log({s})",
            f"{cm}, {cs} = _lse_combine({cm}, {cs}, {tm}, {ts})"]
        return out

    def sort(self, m: Node, v: E) -> str:
        """A row sorted in one block by tl.sort, of int64s: each element's order-keeping int32 key (its bits, a
        negative's magnitude bits flipped; zeros as +0, NaN as +NaN, above +inf where PyTorch puts it; all
        bits flipped to sort descending) over its index, so that equal values keep their order and the index
        comes out beside its value. Lanes past the row sort last. The values and the indices share one sort."""
        flip = "~" if m.attrs["descending"] else ""
        key = ("sort", m.args[0], flip)
        ints = not m.args[0].dtype.is_floating_point  # an integer of 32 bits or fewer is its own key
        if key not in self.top.cache:
            x, b, k, s = (self.fresh(p) for p in ("sx", "sb", "sk", "ss"))
            self.body.lines += [f"{b} = {v.code}.to(tl.int32)"] if ints else [
                f"{x} = {f(v)}",
                f"{b} = tl.where({x} != {x}, 0x7FC00000, tl.where({x} == 0, 0, {x}.to(tl.int32, bitcast=True)))"]
            order = b if ints else f"tl.where({b} < 0, {b} ^ 0x7FFFFFFF, {b})"
            self.body.lines += [
                f"{k} = tl.where(mask, {flip}{order}, 0x7FFFFFFF)",
                f"{s} = tl.sort(({k}.to(tl.int64) << 32) | (rr + tl.zeros_like({k})).to(tl.int64), dim={self.axis})"]
            self.top.cache[key] = s
        s, out = self.top.cache[key], self.fresh("s")
        if m.fn == "sort_indices":
            self.body.lines.append(f"{out} = {s} & 0xFFFFFFFF")
            return out
        k = self.fresh("sk")
        self.body.lines.append(f"{k} = {flip}({s} >> 32).to(tl.int32)")
        self.body.lines.append(f"{out} = {k}" if ints else
                               f"{out} = tl.where({k} < 0, {k} ^ 0x7FFFFFFF, {k}).to(tl.float32, bitcast=True)")
        return out


SCANS = {  # a scan's neutral element and the combine function (pointwise_ops.HELPERS) that joins two of them
    "cumsum": ("0.0", None), "cumprod": ("1.0", "_mul_combine"), "cummax": ('float("-inf")', "_max_combine"),
    "cummin": ('float("inf")', "_min_combine")}


def _divisor(attrs: dict, axes: list[_Axis]) -> str:
    """An average window's divisor: divisor_override, else the product of its axes' element counts (ints, or
    expressions per output)."""
    sizes = [axis.size for axis in axes]
    if attrs.get("divisor"):
        return str(attrs["divisor"])
    return str(math.prod(sizes)) if all(isinstance(z, int) for z in sizes) else " * ".join(map(str, sizes))


def walks(m: Node, rank: int) -> bool:
    """Whether a plane kernel (of `rank` dims) can walk the planes of a window m down its first window dim, each
    output's window reduced from the planes it adds to the part it shares with an earlier output's (kernels._plane):
    a max or average over the last three dims, not adaptive, whose outputs `apart` apart share one set of planes:
    their windows start `shift` taps apart (walk_step) and shift < k <= 2 shift. Undilated, that is s < k <= 2s
    between neighbours; KernelBench's 3-D max pool (k 3, s 2, dilation 3) shares a plane every third output."""
    a = m.attrs
    if m.op != "window" or m.fn not in ("max", "avg") or len(a["kernel"]) != 3 or len(m.shape) != rank:
        return False
    shift = walk_step(m)[1]
    return shift < a["kernel"][0] <= 2 * shift and not a.get("adaptive", (False,) * 3)[0]


def walk_step(m: Node) -> tuple[int, int]:
    """(apart, shift) down a window's first dim: the nearest outputs whose taps fall on the same input planes are
    `apart` outputs apart, and the later one's window starts `shift` taps after the earlier one's (its tap t is
    the earlier one's t + shift): s * apart = dilation * shift at the least such apart."""
    g = math.gcd(m.attrs["stride"][0], m.attrs["dilation"][0])
    return m.attrs["dilation"][0] // g, m.attrs["stride"][0] // g


def walk_lead(m: Node) -> bool:
    """Whether a walk down m's first dim starts from an output before each program's first (never stored): where
    some first output's shared taps (t < k - shift, the part it would take from the output before it) fall on
    input planes, not only on padding, so the carry cannot start empty."""
    a = m.attrs
    (apart, shift), s, pad, dil = walk_step(m), a["stride"][0], a["padding"][0], a["dilation"][0]
    return any(s * r - pad + dil * t >= 0 for r in range(apart) for t in range(a["kernel"][0] - shift))


def lane_window(m: Node) -> bool:
    """Whether a window's taps along its last dim sit at fixed offsets from its outputs' (not adaptive), at a
    stride of at most 4: Gen.window_lanes can build its outputs from aligned chunks of the row."""
    adaptive = m.attrs.get("adaptive", (False,) * len(m.attrs["kernel"]))[-1]
    return m.attrs["stride"][-1] <= 4 and not adaptive


def pair_window(m: Node) -> bool:
    """Whether a window's taps along its last dim step 2 per output over a tensor's contiguous rows (not
    adaptive, undilated): Gen.pair_tap can take them from pairs of elements at even offsets."""
    if m.op != "window":
        return False
    x, a = m.args[0], m.attrs
    adaptive = a.get("adaptive", (False,) * len(a["kernel"]))[-1]
    return a["stride"][-1] == 2 and a["dilation"][-1] == 1 and not adaptive and isinstance(x, Leaf) \
        and x.kind == "tensor" and x.dtype.is_floating_point and x.strides[-1] == 1


def _join_lanes(parts: list[str]) -> str:
    """Tiles of [BLOCK_H, BLOCK_W // VEC] joined along a new last dim, in order (Gen.lanes undone)."""
    if len(parts) == 1:
        return parts[0]
    joined = f"tl.join({_join_lanes(parts[0::2])}, {_join_lanes(parts[1::2])})"
    return joined if len(parts) == 2 else f"tl.reshape({joined}, [BLOCK_H, BLOCK_W // VEC, {len(parts)}])"


def kernel_header(name: str, gen: Gen, meta: list[str], scalars: list[str] = (), unaligned: bool = False) -> list[str]:
    """The @triton.jit line and signature: the kernel's pointers, run-time integers, then its constexpr
    meta-parameters. With `unaligned` Triton does not specialize the pointers on 16-byte alignment: it then
    gives every load and store one element per lane (see _plane)."""
    ptrs = list(gen.ptrs.values())
    jit = f"@triton.jit(do_not_specialize_on_alignment={ptrs})" if unaligned else "@triton.jit"
    args = ptrs + list(scalars) + [f"{m}: tl.constexpr" for m in meta]
    return [jit, f"def {name}({', '.join(args)}):"]


def store_lines(gen: Gen, stores: list, red_mask: str = "rmask") -> None:
    """Stores each (member, buffer) at its level's positions: the full tile, or one per kept position. A Leaf
    for the buffer is the member's place in another buffer (a piece of a cat), and a member with a condition
    (Kernel.store_when) is stored only where it holds."""
    for m, buf in stores:
        if m.op == "scatter":
            gen.body.lines.append(gen.scatter(m, buf))
            continue
        level = gen.k.level[m]
        value = gen.value(m)  # first: it names the temporaries the address may reuse
        mask = "mask" if level == "full" else red_mask
        if m in gen.k.store_when:
            mask = f"{mask} & {gen.arg(gen.k.store_when[m], m, level).code}"
        if isinstance(buf, Leaf):
            address = f"{gen.ptr(buf.base)} + {gen.leaf_offset(buf, m.shape, level)}"
        else:
            address = f"{gen.ptr(buf)} + {gen.linear(level)}"
        t = _trans if gen.positions_last and level == "full" else str
        evict = f", eviction_policy=\"{gen.evict}\"" if gen.evict and level == "full" else ""
        gen.body.lines.append(f"tl.store({t(address)}, {t(value)}, mask={t(mask)}{evict})")


def _trans(code: str) -> str:
    """A tile's expression transposed (Gen.positions_last)."""
    return f"tl.trans({code})"


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


def rereads(leaf: Leaf, n: int) -> bool:
    """Whether a per-element load of `leaf` in a kernel over n elements reads a smaller tensor again along the
    walk (a broadcast operand): the loads that Gen.reread_evict hints and reread_bytes sizes."""
    return 0 < _extent(leaf) < n


def reread_bytes(kernel: Kernel) -> int:
    """Bytes of the tensors that a kernel's per-element loads read again along its walk (rereads)."""
    n = math.prod(kernel.domain)
    leaves = {(a.base, a.offset, a.strides): a for m in kernel.nodes for a in m.args if isinstance(a, Leaf)}
    return sum(_extent(a) * a.dtype.itemsize for a in leaves.values() if rereads(a, n))


def _extent(leaf: Leaf) -> int:
    if leaf.kind != "tensor":
        return 0
    return abs(leaf.offset) + sum((s - 1) * abs(st) for s, st in zip(leaf.shape, leaf.strides)) + 1
