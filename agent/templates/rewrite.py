"""Rewrites of the traced program that compute less, applied between tracing and lowering (issue 18).

    rewritten = rewrite(traced, arch="sm_90")   # a Rewritten (new Traced, rules fired, cost), or None

Rules are data (RULES): a name, a family, the condition it relies on, and a function that matches at one FX
node and returns the node that replaces it (emitted into the graph just before it), or None. The pass
applies them until none fires, then keeps the result only if the cost model (the per-op FLOPs and bytes of
agent/analysis.py at the arch's peaks, each op at its roofline) says it is cheaper. Every rule reads the
shapes the task was traced at. A rule that holds only because of a shape (a dimension of size 1) is
`guarded`: the shapes of the inputs and model state its node is computed from become the program's guards
(ir.Guard), which the candidate checks on every call, running the task's reference (with one warning) where
one breaks; the candidate checks its input shapes the same way. Derived weights (W summed over its rows) are
ops on the parameters inside the graph, so they become kernels and follow weight updates.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from dataclasses import dataclass
from typing import Callable

import torch
from torch.fx import Graph, GraphModule, Node

from agent.analysis import PEAKS, Traced, _describe_ops, _kind
from agent.templates.ir import Guard, placeholder_bases

aten = torch.ops.aten
MAX_PASSES = 8


@dataclass(frozen=True)
class Rule:
    name: str
    family: str  # linearity, size-1, structured, fold
    holds: str  # the condition the rewrite relies on, in words
    apply: Callable[[Node], Node | None]  # the replacement of a node (emitted before it), or None
    guarded: bool = False  # holds only at the traced shapes: the shapes its node comes from become guards


@dataclass
class Rewritten:
    traced: Traced
    rules: list[str]  # names of the rules that fired, in order of first firing
    before_s: float  # the cost model's time of the original graph
    after_s: float  # and of the rewritten one
    guards: list[Guard] = dataclasses.field(default_factory=list)  # shapes the guarded rules rely on

    @property
    def gain(self) -> float:
        return self.before_s / self.after_s if self.after_s else math.inf


# --- helpers ------------------------------------------------------------------------------------------
def _val(node):
    return node.meta.get("val") if isinstance(node, Node) else None


def _meta(a):
    v = _val(a)
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    return a


def emit(target, args: tuple, kwargs: dict | None = None) -> Node:
    """A call of `target` at the graph's insertion point, its meta value computed on the meta device."""
    kwargs = kwargs or {}
    node = _GRAPH[-1].call_function(target, args, kwargs)
    margs = torch.utils._pytree.tree_map(_meta, args)
    mkwargs = {k: ("meta" if k == "device" else v) for k, v in kwargs.items()}
    node.meta["val"] = target(*margs, **mkwargs)
    return node


_GRAPH: list[Graph] = []  # the graph being rewritten (for emits with no node argument)


def full(like: Node, value) -> Node:
    """A tensor of like's shape and dtype, every element `value`."""
    v = _val(like)
    return emit(aten.full.default, (list(v.shape), value), {"dtype": v.dtype, "device": v.device})


def const_value(a):
    """The value of a python scalar or of a `full` node; None for anything else."""
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return a
    if isinstance(a, Node) and a.target is aten.full.default:
        return a.args[1]
    return None


def single_user(node) -> bool:
    return isinstance(node, Node) and len(node.users) == 1


def feeds_output(node: Node) -> bool:
    return any(u.op == "output" for u in node.users)


def reduced_dims(node: Node) -> tuple[list[int], bool] | None:
    """(dims, keepdim) of a sum/mean/amax/amin over explicit dims, or None."""
    if node.target not in (aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default):
        return None
    if node.kwargs.get("dtype") is not None:
        return None
    x = node.args[0]
    rank = _val(x).dim()
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or rank == 0:
        return None
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        return None
    keep = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
    return sorted(d % rank for d in dims), keep


def reshaped(x: Node, like: Node) -> Node:
    """x viewed at like's shape (same elements), or x itself when the shapes agree."""
    shape = list(_val(like).shape)
    return x if list(_val(x).shape) == shape else emit(aten.view.default, (x, shape))


# --- size-1 identities -------------------------------------------------------------------------------
def reduce_over_ones(node: Node) -> Node | None:
    """sum/mean/amax/amin over dims that all have size 1 is its input."""
    found = reduced_dims(node)
    if found is None:
        return None
    x = node.args[0]
    if any(_val(x).shape[d] != 1 for d in found[0]) or _val(x).dtype != _val(node).dtype:
        return None
    return reshaped(x, node)


def max_over_ones(node: Node) -> Node | None:
    """The values of max/min over a dim of size 1 are its input."""
    if node.target is not operator.getitem or node.args[1] != 0:
        return None
    red = node.args[0]
    if red.target not in (aten.max.dim, aten.min.dim):
        return None
    x = red.args[0]
    if _val(x).shape[red.args[1] % _val(x).dim()] != 1:
        return None
    return reshaped(x, node)


# --- algebraic folds ---------------------------------------------------------------------------------
def self_difference(node: Node) -> Node | None:
    """a - a is 0 (for finite a)."""
    if node.target is not aten.sub.Tensor or node.args[0] is not node.args[1] or node.kwargs:
        return None
    if not _val(node).is_floating_point():
        return None
    return full(node, 0.0)


def constant_pointwise(node: Node) -> Node | None:
    """A pointwise op of constants is a constant (not at the output, which must stay a computed value)."""
    if not isinstance(node.target, torch._ops.OpOverload) or torch.Tag.pointwise not in node.target.tags:
        return None
    if feeds_output(node) or node.kwargs:
        return None
    tensors = [a for a in node.args if isinstance(a, Node)]
    if not tensors or any(a.target is not aten.full.default for a in tensors):
        return None
    args = [torch.full((), a.args[1], dtype=_val(a).dtype) if isinstance(a, Node) else a for a in node.args]
    value = node.target(*args)
    return full(node, value.item())


IDENTITIES = {aten.add.Tensor: (0, 0), aten.sub.Tensor: (None, 0), aten.mul.Tensor: (1, 1),
              aten.div.Tensor: (None, 1)}  # op: (left identity, right identity)


def neutral_operand(node: Node) -> Node | None:
    """y + 0, y - 0, y * 1, y / 1 (and 0 + y, 1 * y) are y, where y already has the result's shape and dtype."""
    if node.target not in IDENTITIES or node.kwargs or len(node.args) != 2:
        return None
    left, right = IDENTITIES[node.target]
    a, b = node.args
    for keep, other, ident in ((a, b, right), (b, a, left)):
        if ident is not None and isinstance(keep, Node) and const_value(other) == ident:
            v, w = _val(keep), _val(node)
            if tuple(v.shape) == tuple(w.shape) and v.dtype == w.dtype:
                return keep
    return None


SCALES = (aten.mul.Tensor, aten.div.Tensor)


def scalar_chain(node: Node) -> Node | None:
    """(x * a) * b, (x / a) * b, ... with python scalars a, b: one multiplication by the combined factor."""
    if node.target not in SCALES or not isinstance(node.args[1], (int, float)) or node.kwargs:
        return None
    inner = node.args[0]
    if not isinstance(inner, Node) or inner.target not in SCALES or not single_user(inner) or inner.kwargs:
        return None
    if not isinstance(inner.args[1], (int, float)) or not _val(node).is_floating_point():
        return None
    if _val(inner).dtype != _val(node).dtype or 0 in (inner.args[1], node.args[1]):
        return None
    factor = 1.0
    for n in (inner, node):
        factor = factor * n.args[1] if n.target is aten.mul.Tensor else factor / n.args[1]
    return emit(aten.mul.Tensor, (inner.args[0], factor))


# --- linearity ---------------------------------------------------------------------------------------
def row_sum(node: Node, n: int) -> Node | None:
    """`node` (a 2-D value on a linear chain from a GEMM) summed over its last dim, keepdim, as a GEMV
    against the GEMM's summed weights; None where a step is not linear or a value on it is read elsewhere."""
    t = node.target
    if t is aten.mm.default and _val(node).dim() == 2:
        return gemv(*node.args)
    if t is aten.addmm.default and not node.kwargs:
        bias, x, w = node.args
        rest = plain_row_sum(bias, n)
        return None if rest is None else emit(aten.add.Tensor, (gemv(x, w), rest))
    if t in SCALES and not node.kwargs and constant_along_rows(node.args[1]):
        inner = node.args[0]
        summed = row_sum(inner, n) if single_user(inner) else None
        return None if summed is None else emit(t, (summed, node.args[1]))
    if t in (aten.add.Tensor, aten.sub.Tensor) and not node.kwargs:
        a, b = node.args
        for chain, other, first in ((a, b, True), (b, a, False)):
            if not single_user(chain) or (t is aten.sub.Tensor and not first):
                continue
            summed = row_sum(chain, n)
            if summed is not None:
                rest = plain_row_sum(other, n)
                return None if rest is None else emit(t, (summed, rest))
    if t is aten.neg.default and single_user(node.args[0]):
        summed = row_sum(node.args[0], n)
        return None if summed is None else emit(t, (summed,))
    return None


WIDE_FLOATS = (torch.float32, torch.float64)  # where rewritten sums and averaged weights round no worse


def centered_affine(node: Node) -> Node | None:
    """y - mean(y, dims), where y is z shifted and scaled by values constant along those dims (a batch norm's
    affine map, before a mean over space), is (z - mean(z, dims)) scaled the same: the shifts cancel and the
    scales come out of the mean, so the mean reads z and y is never formed (KernelBench's level 2 15)."""
    if node.target is not aten.sub.Tensor or node.kwargs or not isinstance(node.args[1], Node):
        return None
    y, mean = node.args
    found = reduced_dims(mean) if mean.target is aten.mean.dim else None
    if found is None or not found[1] or mean.args[0] is not y or not _val(node).is_floating_point():
        return None
    dims, scales, z = found[0], [], y
    while (step := _affine_step(z, dims)) is not None:
        inner, other = step
        if z.target in (aten.mul.Tensor, aten.div.Tensor):
            scales.append((z.target, other))
        z = inner
    if z is y:
        return None
    out = emit(aten.sub.Tensor, (z, emit(aten.mean.dim, (z, dims, True))))
    for op, scale in reversed(scales):  # innermost first, as y applied them
        out = emit(op, (out, scale))
    return out


def finer_stats(node: Node) -> Node | None:
    """A sum or mean of x over dims D, or a sum of squared deviations of x from a value constant along D, where
    the program also takes a sum or mean of x over part of D (kept dims): from that finer reduction's slices. The
    sum is their sum; the squared deviations are each slice's own about its mean, summed, plus each slice's
    count times its mean's squared deviation (Chan's combination, exact for any value constant along D). A
    batch norm's statistics beside a mean over space (KernelBench's level 2 15) then read x once, in the
    finer reduction's pass, instead of two more times."""
    found = reduced_dims(node)
    if found is None or not found[1] or node.target not in (aten.sum.dim_IntList, aten.mean.dim):
        return None
    dims, y = found[0], node.args[0]
    if not isinstance(y, Node) or not _val(y).is_floating_point():
        return None
    squares = node.target is aten.sum.dim_IntList and y.target is aten.mul.Tensor and y.args[0] is y.args[1] \
        and isinstance(y.args[0], Node) and y.args[0].target is aten.sub.Tensor and not y.args[0].kwargs
    x, center = y.args[0].args if squares else (y, None)
    if not isinstance(x, Node) or _val(x).shape != _val(y).shape or (squares and not _along(center, y, dims)):
        return None
    finer = _finer(x, dims, node)
    if finer is None:
        return None
    t, inner, rest = finer
    n = math.prod(_val(x).shape[d] for d in inner)
    if t > node:  # t reads only x, so it may run before node, which the emitted nodes read it from
        node.prepend(t)
    means = t if t.target is aten.mean.dim else emit(aten.mul.Tensor, (t, 1.0 / n))
    if not squares:
        if node.target is aten.mean.dim:
            return emit(aten.mean.dim, (means, rest, True))
        summed = emit(aten.sum.dim_IntList, (t, rest, True))
        return summed if t.target is aten.sum.dim_IntList else emit(aten.mul.Tensor, (summed, n))
    with node.graph.inserting_before(means.next):  # right after the slices' means: one pass takes both (Welford)
        dev = emit(aten.sub.Tensor, (x, means))
        within = emit(aten.sum.dim_IntList, (emit(aten.mul.Tensor, (dev, dev)), inner, True))
    apart = emit(aten.sub.Tensor, (means, center))
    between = emit(aten.sum.dim_IntList, (emit(aten.mul.Tensor, (apart, apart)), rest, True))
    inside = emit(aten.sum.dim_IntList, (within, rest, True))
    return emit(aten.add.Tensor, (inside, emit(aten.mul.Tensor, (between, n))))


def _finer(x: Node, dims: list[int], node: Node) -> tuple[Node, list[int], list[int]] | None:
    """(t, its dims, the rest of dims): a sum or mean of x other than node, over part of dims, kept dims."""
    for t in x.users:
        found = reduced_dims(t) if t is not node and t.target in (aten.sum.dim_IntList, aten.mean.dim) else None
        if found and found[1] and set(found[0]) < set(dims):
            return t, found[0], [d for d in dims if d not in found[0]]
    return None


def mean_of_scaled(node: Node) -> Node | None:
    """mean(z * c, dims), or / c, + c, - c, with c the same along dims, is mean(z, dims) scaled or shifted by c
    (kept dims, or a python scalar c): the mean then reads z, which another rule may compute less of."""
    found = reduced_dims(node)
    if found is None or node.target is not aten.mean.dim or not isinstance(node.args[0], Node):
        return None
    (dims, keep), y = found, node.args[0]
    if any(u.target is aten.sub.Tensor and u.args == (y, node) for u in node.users):
        return None  # y - mean(y): centered_affine takes the scale and shift out of both
    step = _affine_step(y, dims)
    if step is None or step[0] is not y.args[0] or not (keep or isinstance(step[1], (int, float))):
        return None  # (the constant second, as traced)
    return emit(y.target, (emit(aten.mean.dim, (step[0], dims, keep)), step[1]))


def mean_of_conv(node: Node) -> Node | None:
    """The mean (or sum) of a convolution's output over spatial dims is linear in its input: per output channel,
    the bias plus each (input channel, tap) weight times the sum of the input over the positions that tap reads
    (the whole input, less the rows it never reaches at the borders). Over all of them the input is summed once
    and the convolution is never computed (KernelBench's level 2 42 and 44); over some (13: the depth of a 3-D
    one) the box sums of each tap along them are input channels of a convolution over the dims left, whose
    weight stacks the taps' slices (13: 32 depths summed into 3 taps, 1/32 of the FLOPs). Ungrouped, in fp32 or
    fp64 only, and a convolution that is not transposed at stride 1 along the reduced dims, so that each tap
    reads one box. Over all dims the box sums and their products with the weights are taken in fp64: they
    cancel where the mean is small against the input (each sample's mean less the batch's: in fp32 2-3.4x the
    original's error). Over some, the box sums are short and the convolution after them rounds as the original
    does. The mean must be the convolution's only reader: where its output is computed anyway, for a norm's
    statistics say, those and a mean from the input round apart, and what is left of their difference (77, a
    batch norm's output averaged) failed the H200's accuracy check even in fp64, for a predicted 1.01x."""
    found = reduced_dims(node)
    conv = _conv_of(node)
    if found is None or node.target not in (aten.sum.dim_IntList, aten.mean.dim) or conv is None or \
            not single_user(conv):
        return None
    x, w, b, stride, padding, dilation, transposed, out_pad, groups = conv.args
    out, reduced = _val(conv), found[0]
    spatial = list(range(2, out.dim()))
    if not set(reduced) <= set(spatial) or groups != 1 or out.dtype not in WIDE_FLOATS or \
            (not transposed and any(stride[d - 2] != 1 for d in reduced)):
        return None  # 16-bit box sums, less their border strips, would round where the outputs' mean does not
    taps = _val(w).shape[2:]
    s = x
    if reduced == spatial:
        for d in reversed(spatial):  # each spatial dim summed into one entry per tap
            s = _tap_sums(s, x, d, out, taps, conv.args, along=d, dtype=torch.float64)
        # transposed: w (C_in, C_out, *taps) against s (N, C_in, 1, *taps); else w (C_out, C_in, *taps), s (N, 1, C_in)
        prod = emit(aten.mul.Tensor, (emit(aten.unsqueeze.default, (s, 2 if transposed else 1)),
                                      emit(aten.unsqueeze.default, (_cast(w, torch.float64), 0))))
        summed = emit(aten.sum.dim_IntList, (prod, [1 if transposed else 2] + [3 + d for d in range(len(taps))]))
    else:
        for d in reversed(reduced):  # the taps' box sums stacked as input channels, the first dim's tap outermost
            s = _tap_sums(s, x, d, out, taps, conv.args, along=1, dtype=out.dtype)
        kept = [d for d in spatial if d not in reduced]
        s = emit(aten.view.default, (s, [out.shape[0], _val(s).shape[1]] + [_val(x).shape[d] for d in kept]))
        slices = []
        for combo in itertools.product(*[range(taps[d - 2]) for d in reduced]):
            sliced = w
            for d, t in sorted(zip(reduced, combo), reverse=True):
                sliced = emit(aten.select.int, (sliced, d, t))
            slices.append(sliced)
        stacked = emit(aten.cat.default, (slices, 0 if transposed else 1)) if len(slices) > 1 else slices[0]
        summed = emit(aten.convolution.default, (s, stacked, None, *[[a[d - 2] for d in kept] for a in (
            stride, padding, dilation)], transposed, [out_pad[d - 2] for d in kept], 1))
        if list(_val(summed).shape) != [out.shape[0], out.shape[1]] + [out.shape[d] for d in kept]:
            return None
        if b is not None:
            b = emit(aten.view.default, (b, [out.shape[1]] + [1] * len(kept)))
    count = math.prod(out.shape[d] for d in reduced)
    if node.target is aten.mean.dim:
        summed = emit(aten.mul.Tensor, (summed, 1.0 / count))
    if b is not None:
        summed = emit(aten.add.Tensor, (summed, b if node.target is aten.mean.dim else emit(aten.mul.Tensor,
                                                                                             (b, count))))
    return reshaped(_cast(summed, out.dtype), node)


def _conv_of(node: Node) -> Node | None:
    """node's first argument where it is a convolution, else None."""
    conv = node.args[0] if node.args else None
    return conv if isinstance(conv, Node) and conv.target is aten.convolution.default else None


def _cast(x: Node, dtype: torch.dtype) -> Node:
    return x if _val(x).dtype == dtype else emit(aten._to_copy.default, (x,), {"dtype": dtype})


def _tap_sums(s: Node, x: Node, d: int, out, taps, args: tuple, along: int, dtype: torch.dtype) -> Node:
    """s summed along dim d over each tap's box (kept, size 1), the taps side by side `along` a dim: d itself
    (one entry a tap), or the channels (a block of channels a tap)."""
    _, _, _, stride, padding, dilation, transposed, _, _ = args
    j, size = d - 2, _val(x).shape[d]
    boxes = [_box(t, stride[j], padding[j], dilation[j], size, out.shape[d], transposed) for t in range(taps[j])]
    total = _sum_as(s, d, dtype)
    sums = {box: _box_sum(s, total, d, *box, _val(x).device) for box in dict.fromkeys(boxes)}
    return emit(aten.cat.default, ([sums[box] for box in boxes], along)) if len(boxes) > 1 else sums[boxes[0]]


def _box(t: int, s: int, pad: int, d: int, size: int, out: int, transposed: bool) -> tuple[int, int]:
    """The input positions [lo, hi) tap t reads along one dim for outputs 0..out-1."""
    if transposed:  # output = input * s - pad + t * d
        return max(0, -((t * d - pad) // s)), min(size, (out - 1 + pad - t * d) // s + 1)
    return max(0, t * d - pad), min(size, t * d - pad + out)  # input = output - pad + t * d (stride 1)


def _box_sum(s: Node, total: Node, dim: int, lo: int, hi: int, device) -> Node:
    """s summed over [lo, hi) along dim (kept): the whole sum less the strips left out at either end, or the
    box itself where they are the larger part."""
    size = _val(s).shape[dim]
    if hi <= lo:
        return emit(aten.full.default, (list(_val(total).shape), 0.0), {"dtype": _val(total).dtype, "device": device})
    if lo + size - hi > hi - lo:
        return _sum_as(emit(aten.slice.Tensor, (s, dim, lo, hi)), dim, _val(total).dtype)
    for a, b in ((0, lo), (hi, size)):
        if b > a:
            strip = emit(aten.slice.Tensor, (s, dim, a, b))
            strip = strip if b - a == 1 else _sum_as(strip, dim, _val(total).dtype)
            total = emit(aten.sub.Tensor, (total, strip))
    return total


def _sum_as(s: Node, dim: int, dtype: torch.dtype) -> Node:
    """s summed along dim (kept) in dtype, the cast read by the sum alone (fused into it, as cost_s counts)."""
    return emit(aten.sum.dim_IntList, (_cast(s, dtype), [dim], True))


AVG_POOLS = (aten.avg_pool2d.default, aten.avg_pool3d.default)  # (a 1-D pool is traced as a 2-D one of a row)


def _plain_pool(node: Node) -> tuple[list[int], list[int]] | None:
    """(kernel, stride) per spatial dim of an average pool with no padding, ceil_mode or divisor, else None."""
    if node.target not in AVG_POOLS or node.kwargs:
        return None
    _, kernel, stride, padding, ceil_mode, _, divisor = list(node.args) + [None] * (7 - len(node.args))
    rank = _val(node).dim() - 2

    def per_dim(v) -> list[int]:
        v = [v] if isinstance(v, int) else list(v)
        return v * rank if len(v) == 1 else v

    kernel = per_dim(kernel)
    stride, padding = per_dim(stride or kernel), per_dim(padding or 0)
    if any(padding) or ceil_mode or divisor is not None or len(kernel) != rank:
        return None
    return kernel, stride


def pool_of_scaled(node: Node) -> Node | None:
    """An average pool (no padding) of z * c, or / c, + c, - c, with c the same at every spatial position, is the
    pool of z scaled or shifted by c: the pool then reads z, which another rule may compute less of."""
    if _plain_pool(node) is None or not isinstance(node.args[0], Node):
        return None
    y = node.args[0]
    step = _affine_step(y, list(range(2, _val(y).dim())))
    if step is None or step[0] is not y.args[0]:
        return None  # (the constant second, as traced)
    return emit(y.target, (emit(node.target, (step[0], *node.args[1:])), step[1]))


def pooled_transposed_conv(node: Node) -> Node | None:
    """An average pool whose windows are a transposed convolution's strides (kernel = stride = the
    convolution's stride s along every dim) is a convolution at stride 1 over the same input. Pool output j
    averages outputs s*j .. s*j+s-1, which input j+q reaches through taps pad + r - s*q (r < s): the weight at
    offset q is the average of those taps, the weight padded and average-pooled over its taps, flipped. The
    transposed convolution's output (s^D times the pool's) is never computed (KernelBench's level 2 50).
    Ungrouped and undilated, in fp32 or fp64."""
    pool, conv = _plain_pool(node), _conv_of(node)
    if pool is None or conv is None:
        return None
    x, w, b, stride, padding, dilation, transposed, _, groups = conv.args
    if not transposed or groups != 1 or set(dilation) != {1} or pool[0] != list(stride) or pool[1] != pool[0] \
            or _val(conv).dtype not in WIDE_FLOATS:
        return None
    taps, sizes, want = _val(w).shape[2:], _val(x).shape[2:], _val(node).shape[2:]
    left = [-p % s for p, s in zip(padding, stride)]  # taps padded before the first, so windows start at pad + r
    count = [-(-(k + a) // s) for k, a, s in zip(taps, left, stride)]  # windows (offsets) along each dim
    # flipped before it is padded and pooled (windows that tile the padded taps flip with them): the kernel
    # pooling it reads the flip, and a vendor convolution is given no negative stride
    pads = [n for k, a, s, m in reversed(list(zip(taps, left, stride, count))) for n in (s * m - a - k, a)]
    dims = list(range(2, len(taps) + 2))
    flipped = emit(aten.constant_pad_nd.default, (emit(aten.flip.default, (w, dims)), pads, 0.0))
    weight = emit(aten.permute.default, (emit(node.target, (flipped, list(stride), list(stride))), [1, 0] + dims))
    least = [(p + a) // s - m + 1 for p, a, s, m in zip(padding, left, stride, count)]  # the least offset q
    # padding enough on both sides that output j of the pool, input j + q, is the convolution's j + pad + least
    pad = [max(0, -q, q + n + m - 1 - i) for q, n, m, i in zip(least, want, count, sizes)]
    out = emit(aten.convolution.default, (x, weight, b, [1] * len(taps), pad, [1] * len(taps), False,
                                          [0] * len(taps), 1))
    for d, (q, a) in enumerate(zip(least, pad)):
        if _val(out).shape[2 + d] != want[d]:
            out = emit(aten.slice.Tensor, (out, 2 + d, a + q, a + q + want[d]))
    return out


def pooled_conv(node: Node) -> Node | None:
    """An average pool (window k, stride s, no padding) of a convolution at stride 1 is one convolution at
    stride s whose weight is the first's averaged over every k-wide shift: output j of the pool averages
    outputs s*j .. s*j+k-1, so input s*j - pad + u meets weight tap t through each shift r = u - t < k. The
    weight padded by k - 1 on both sides and average-pooled at stride 1 is that average. The first
    convolution's output (about s^D times the pool's where k = s) is never computed (KernelBench's level 2 65:
    a 4x4 pool). Ungrouped and undilated, in fp32 or fp64."""
    pool, conv = _plain_pool(node), _conv_of(node)
    if pool is None or conv is None:
        return None
    x, w, b, stride, padding, dilation, transposed, _, groups = conv.args
    (window, pool_stride), rank = pool, len(stride)
    if transposed or groups != 1 or set(stride) != {1} or set(dilation) != {1} or \
            _val(conv).dtype not in WIDE_FLOATS:
        return None
    pads = [n for k in reversed(window) for n in (k - 1, k - 1)]
    weight = emit(node.target, (emit(aten.constant_pad_nd.default, (w, pads, 0.0)), window, [1] * rank))
    out = emit(aten.convolution.default, (x, weight, b, pool_stride, list(padding), [1] * rank, False, [0] * rank,
                                          1))
    return out if _val(out).shape == _val(node).shape else None


def _affine_step(y, dims: list[int]) -> tuple[Node, object] | None:
    """(z, c) where y is z + c, z - c, z * c or z / c (or c + z, c * z), c the same along dims and z of y's shape
    and dtype; None where y is none of these."""
    if not (isinstance(y, Node) and y.target in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor,
                                                 aten.div.Tensor) and not y.kwargs):
        return None
    a, b = y.args
    inner, other = (b, a) if y.target in (aten.add.Tensor, aten.mul.Tensor) and _along(a, y, dims) else (a, b)
    if not (isinstance(inner, Node) and _along(other, y, dims) and _val(inner).shape == _val(y).shape
            and _val(inner).dtype == _val(y).dtype):
        return None
    return inner, other


def _along(a, like: Node, dims: list[int]) -> bool:
    """Whether `a` (a scalar, or a tensor broadcast against like) is the same at every index of `dims`."""
    v = _val(a)
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return True
    if not isinstance(v, torch.Tensor) or not v.is_floating_point():
        return False
    shape = (1,) * (_val(like).dim() - v.dim()) + tuple(v.shape)
    return all(shape[d] == 1 for d in dims)


def gemv(x: Node, w: Node) -> Node:
    """(x @ w).sum(1, keepdim=True) as x times w summed over its columns, summed over each row."""
    summed = emit(aten.sum.dim_IntList, (w, [1]))
    return emit(aten.sum.dim_IntList, (emit(aten.mul.Tensor, (x, summed)), [1], True))


def constant_along_rows(a) -> bool:
    """A scalar, or a tensor of size 1 along the last dim (the same for every element of a row)."""
    v = _val(a)
    return isinstance(a, (int, float)) or (isinstance(v, torch.Tensor) and (v.dim() == 0 or v.shape[-1] == 1))


def plain_row_sum(a, n: int):
    """`a`, broadcast to rows of length n, summed over the row (keepdim), or None."""
    if isinstance(a, (int, float)):
        return a * n
    v = _val(a)
    if not isinstance(v, torch.Tensor) or not v.is_floating_point():
        return None
    if v.dim() == 0 or v.shape[-1] == 1:
        return emit(aten.mul.Tensor, (a, n))
    if v.shape[-1] == n:
        return emit(aten.sum.dim_IntList, (a, [-1], True))
    return None


def sum_of_gemm(node: Node) -> Node | None:
    """sum or mean over the output columns of a linear map of a GEMM (x @ W.T + b, scaled, shifted) is a GEMV
    against the summed weights: x @ W.sum(0) + b.sum()."""
    found = reduced_dims(node)
    if found is None or node.target not in (aten.sum.dim_IntList, aten.mean.dim):
        return None
    dims, keep = found
    x = node.args[0]
    v = _val(x)
    if v.dim() != 2 or dims != [1] or not v.is_floating_point() or not single_user(x):
        return None
    summed = row_sum(x, v.shape[1])
    if summed is None:
        return None
    if node.target is aten.mean.dim:
        summed = emit(aten.mul.Tensor, (summed, 1.0 / v.shape[1]))
    return reshaped(summed, node) if not keep else summed


# --- structured matrices -----------------------------------------------------------------------------
def diagonal_matmul(node: Node) -> Node | None:
    """diag(a) @ B is a[:, None] * B, and B @ diag(a) is B * a."""
    if node.target is not aten.mm.default:
        return None
    a, b = node.args
    for i, m in enumerate((a, b)):
        if isinstance(m, Node) and m.target is aten.diag_embed.default and len(m.args) == 1 \
                and _val(m.args[0]).dim() == 1:
            d = m.args[0]
            if i == 0:
                return emit(aten.mul.Tensor, (emit(aten.unsqueeze.default, (d, 1)), b))
            return emit(aten.mul.Tensor, (a, d))
    return None


# --- scans -------------------------------------------------------------------------------------------------
def exclusive_scan(node: Node) -> Node | None:
    """cat([zeros, cumsum(x[:n-1])]) along the scan's dim (an exclusive running sum) is cumsum(x) - x: each
    element stays in its own place, with no store shifted off its 16-byte vectors and no zero column of its
    own (KernelBench's 92 on an H200: 2.154 -> 2.049 ms as one pass over each row, its floor 2.029)."""
    if node.target is not aten.cat.default or len(node.args[0]) != 2:
        return None
    (zero, scan), v = node.args[0], _val(node)
    dim = (node.args[1] if len(node.args) > 1 else 0) % v.dim()
    zeros = isinstance(zero, Node) and _val(zero).shape[dim] == 1 and (
        zero.target in (aten.zeros_like.default, aten.zeros.default)
        or (zero.target is aten.full.default and zero.args[1] == 0))
    if not (zeros and v.is_floating_point() and isinstance(scan, Node) and scan.target is aten.cumsum.default
            and scan.args[1] % v.dim() == dim and scan.kwargs.get("dtype") is None):
        return None
    x = scan.args[0]
    if not (isinstance(x, Node) and x.target is aten.slice.Tensor and 4 <= len(x.args) <= 5):
        return None
    whole, sdim, start, end, *step = x.args
    w = _val(whole) if isinstance(whole, Node) else None
    if w is None or tuple(w.shape) != tuple(v.shape) or w.dtype != v.dtype or sdim % v.dim() != dim \
            or start != 0 or end not in (w.shape[dim] - 1, -1) or step not in ([], [1]):
        return None
    return emit(aten.sub.Tensor, (emit(aten.cumsum.default, (whole, dim)), whole))


RULES = [
    Rule("reduce_over_ones", "size-1", "the reduced dims have size 1 at the traced shapes", reduce_over_ones, True),
    Rule("max_over_ones", "size-1", "the reduced dim has size 1 at the traced shapes", max_over_ones, True),
    Rule("self_difference", "fold", "the value is finite", self_difference),
    Rule("constant_pointwise", "fold", "exact", constant_pointwise),
    Rule("neutral_operand", "fold", "exact", neutral_operand),
    Rule("scalar_chain", "fold", "within rounding (factors combined)", scalar_chain),
    Rule("sum_of_gemm", "linearity", "within rounding (sums reordered)", sum_of_gemm),
    Rule("centered_affine", "linearity", "within rounding (shifts cancelled, scales applied after the mean)",
         centered_affine),
    Rule("finer_stats", "linearity", "within rounding (sums regrouped by the finer reduction's slices)",
         finer_stats),
    Rule("mean_of_scaled", "linearity", "within rounding (the scale or shift applied after the mean)",
         mean_of_scaled),
    Rule("mean_of_conv", "linearity", "within rounding (the input summed before the weights apply)", mean_of_conv),
    Rule("pool_of_scaled", "linearity", "within rounding (the scale or shift applied after the pool)",
         pool_of_scaled),
    Rule("pooled_transposed_conv", "linearity", "within rounding (the weight averaged before the products)",
         pooled_transposed_conv),
    Rule("pooled_conv", "linearity", "within rounding (the weight averaged before the products)", pooled_conv),
    Rule("diagonal_matmul", "structured", "exact", diagonal_matmul),
    Rule("exclusive_scan", "structured", "within rounding (each sum less its last term)", exclusive_scan),
]


# --- the pass and the cost model -----------------------------------------------------------------------
def cost_s(gm: GraphModule, arch: str = "sm_90") -> float:
    """Seconds the graph's ops take at the arch's peaks, each op at its own roofline; a pointwise op read only
    by a reduction (through views, and through pointwise ops so read: a cast, then a product, then its sum) is
    fused into it (its result is neither written nor read back), and so is a scan read only by a pointwise
    op."""
    peak_flops, peak_bw = PEAKS.get(arch, PEAKS["sm_90"])
    saved: dict[str, float] = {}

    def fused(producer: Node, reader: Node) -> None:  # the producer's result neither written nor read back
        nbytes = _val(producer).numel() * _val(producer).element_size()
        for n in (producer, reader):
            saved[n.name] = saved.get(n.name, 0) + nbytes

    for node in gm.graph.nodes:
        if node.op != "call_function" or _kind(node.target) != "pointwise":
            continue
        reader = _register_reader(node)
        if reader is not None:
            fused(node, reader)
        for scan in node.all_input_nodes:  # a scan read only by a pointwise op: one kernel writes the latter
            if scan.op == "call_function" and _kind(scan.target) == "scan" and single_user(scan):
                fused(scan, node)
    return sum(max(o.flops / peak_flops, (o.bytes - saved.get(o.name, 0)) / peak_bw) for o in _describe_ops(gm)
               if o.kind not in ("view", "factory"))


def _register_reader(node: Node) -> Node | None:
    """The op that reads a pointwise op's result in registers, not memory: its one reader (past views) where
    that is a reduction, or a pointwise op itself so read."""
    reader = node
    while single_user(reader):
        reader = next(iter(reader.users))
        kind = _kind(reader.target) if reader.op == "call_function" else "other"
        if kind == "reduction" or kind == "pointwise" and _register_reader(reader) is not None:
            return reader
        if kind != "view":
            return None
    return None


def apply_rules(gm: GraphModule, rules: list[Rule] = RULES) -> tuple[list[str], dict[str, list[str]]]:
    """Applies the rules to gm in place until none fires. Returns the names of those that fired and, per
    placeholder a guarded rule's node was computed from, the names of those rules."""
    fired: list[str] = []
    guarded: dict[str, list[str]] = {}
    _GRAPH.append(gm.graph)
    try:
        for _ in range(MAX_PASSES):
            changed = False
            for node in list(gm.graph.nodes):
                if node.op != "call_function" or not node.users:
                    continue
                for rule in rules:
                    with gm.graph.inserting_before(node):
                        new = rule.apply(node)
                    if new is None or not same_kind(new, node) or (feeds_output(node) and not computed(new)):
                        continue
                    if rule.guarded:
                        for name in placeholders_of(node):
                            guarded.setdefault(name, [])
                            if rule.name not in guarded[name]:
                                guarded[name].append(rule.name)
                    node.replace_all_uses_with(new)
                    if rule.name not in fired:
                        fired.append(rule.name)
                    changed = True
                    break
            gm.graph.eliminate_dead_code()
            if not changed:
                break
    finally:
        _GRAPH.pop()
    gm.recompile()
    return fired, guarded


def placeholders_of(node: Node) -> list[str]:
    """The names of the placeholders (inputs and model state) a node is computed from."""
    seen, stack, out = set(), [node], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            out.append(n.name)
        stack.extend(n.all_input_nodes)
    return sorted(out)


def computed(node: Node) -> bool:
    """Whether a node computes its value or views one that does (the forward's outputs must: not an input, a
    constant, or a view of one)."""
    if node.op != "call_function" or _kind(node.target) == "factory":
        return False
    return _kind(node.target) != "view" or (isinstance(node.args[0], Node) and computed(node.args[0]))


def same_kind(new: Node, old: Node) -> bool:
    """Whether a replacement has the shape and dtype of the node it replaces."""
    a, b = _val(new), _val(old)
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and tuple(a.shape) == tuple(b.shape) \
        and a.dtype == b.dtype


def rewrite(traced: Traced, arch: str = "sm_90", rules: list[Rule] = RULES) -> Rewritten | None:
    """The traced program rewritten by `rules`, when one fired and the cost model says it is cheaper."""
    import copy
    gm = GraphModule(traced.gm, copy.deepcopy(traced.gm.graph))
    fired, guarded = apply_rules(gm, rules)
    if not fired:
        return None
    before, after = cost_s(traced.gm, arch), cost_s(gm, arch)
    if after >= before:
        return None
    return Rewritten(dataclasses.replace(traced, gm=gm), fired, before, after, guards(traced, guarded, rules))


def guards(traced: Traced, guarded: dict[str, list[str]], rules: list[Rule]) -> list[Guard]:
    """A guard per placeholder a guarded rule relied on: its host expression, traced shape and the rules."""
    bases, holds = placeholder_bases(traced), {r.name: r.holds for r in rules}
    shapes = {n.name: tuple(_val(n).shape) for n in traced.gm.graph.nodes if n.op == "placeholder"}
    return [Guard(bases[name], shapes[name], "; ".join(f"the rewrite {r} holds only where {holds[r]}" for r in names))
            for name, names in guarded.items()]
