"""What hand-written attention does to its scores between the product q @ kT and the softmax (attention_match.py
finds those two), as the flash-attention kernel's scale, causal flag and one mask. Walking down from the
softmax's input, in any order and number:

    masked_fill(s, drop, -inf) | where(drop, -inf, s) | where(keep, s, -inf)    a boolean mask
    s + m | m + s | s - m                                                     an additive mask
    s * c | s / c   (c a Python number)                                       the scale
    s * t   (t one number per batch and head; nothing but numbers under it)  folded into q: (q * t) @ kT
    views that keep the last two dims (to and from heads, to and from windows)

The boolean and additive terms become one mask over the finest grouping of the leading dims the scores had
where they were applied ((batch, heads) and (batch / windows, windows, heads): the latter), `mask_batch`,
which flattens row-major into the kernel's batch. An additive term under a scale is scaled with it. A boolean
mask whose values the lowering can know (built from the model's buffers, iotas and constants) and that keeps
exactly j <= i becomes causal=True, cheaper than loading a mask: minGPT's `masked_fill(self.bias[:, :, :T, :T]
== 0, -inf)` over a buffer of tril(ones). A row the masks empty gives 0 (the kernel's answer; F.softmax's is
NaN).

    g1, scale, terms = score_terms(x, chain)                     # or None
    mask = kernel_mask(terms, g1.dtype, ModelState(traced, module), "v36")   # or None
    q, new_nodes = scaled_query(g1.args[0], terms, "v36")        # or None
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from agent.analysis import REAL_LIMIT, _build, _state, attribute_expr
from agent.templates.ir import Leaf, Node, Value

MAX_EVALUATED = 1 << 24  # elements a boolean mask may have for the lowering to compute it and compare


@dataclass
class Term:
    kind: str  # "drop" (boolean, True drops), "keep" (boolean, True keeps), "add", or "qscale" (a tensor scale)
    value: Value
    domain: tuple  # the scores' shape where the term was applied
    factor: float = 1.0  # the scale applied after it (an additive term is multiplied by it)


@dataclass
class KernelMask:
    mask: Value | None  # boolean (True keeps) or additive, broadcast over `batch`
    batch: tuple | None  # the leading dims the mask's own leading dims align with
    causal: bool
    nodes: list = field(default_factory=list)  # new nodes computing the mask, in order


def is_node(value, op: str, fn: str, arity: int | None = None) -> bool:
    return isinstance(value, Node) and value.op == op and value.fn == fn and \
        (arity is None or len(value.args) == arity)


def through_views(value, keep: list):
    """The value under views that keep its last two dims (a reshape to or from heads, a same-shape expand);
    the views passed are appended to `keep`."""
    while isinstance(value, Node) and value.op == "view" and value.fn in ("reshape", "expand") and \
            value.numel == value.args[0].numel and tuple(value.shape[-2:]) == tuple(value.args[0].shape[-2:]):
        keep.append(value)
        value = value.args[0]
    return value


def _number(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def _per_row(v, x: Node) -> bool:
    """Whether v is one number per (batch, head) of the scores x: its last two dims 1, its rank no more."""
    return isinstance(v, Value) and len(v.shape) <= len(x.shape) and tuple(v.shape[-2:]) in ((1, 1), (1,), ()) \
        and v.dtype.is_floating_point


def _step(x: Node, scale: float, positive: bool, below_tensor: bool):
    """(what x was computed from, the scale above it, its term or None) for one step of the walk, else None.
    Under a tensor scale (folded into q) only numbers may scale the scores."""
    a = x.args
    alpha_one = x.attrs.get("alpha", 1) == 1
    if is_node(x, "pw", "mul", 2) and _number(a[1]) and a[1] != 0:
        return a[0], scale * a[1], None
    if is_node(x, "pw", "div", 2) and _number(a[1]) and a[1] != 0 and not x.attrs.get("rounding_mode"):
        return a[0], scale / a[1], None
    if is_node(x, "pw", "mul", 2) and _per_row(a[1], x) and not below_tensor:  # Swin V2's per-head logit scale
        return a[0], scale, Term("qscale", a[1], tuple(x.shape))
    if below_tensor:
        return None
    if is_node(x, "pw", "masked_fill", 3) and a[2] == -math.inf and positive:
        return a[0], scale, Term("drop", a[1], tuple(x.shape))
    if is_node(x, "pw", "where", 3) and positive and isinstance(a[0], Value):
        if a[1] == -math.inf and isinstance(a[2], Value):
            return a[2], scale, Term("drop", a[0], tuple(x.shape))
        if a[2] == -math.inf and isinstance(a[1], Value):
            return a[1], scale, Term("keep", a[0], tuple(x.shape))
    if is_node(x, "pw", "add", 2) and alpha_one and all(isinstance(v, Value) for v in a):
        s, m = (a[0], a[1]) if score_terms(a[0], []) is not None else (a[1], a[0])
        return s, scale, Term("add", m, tuple(x.shape), scale)
    if is_node(x, "pw", "sub", 2) and alpha_one and all(isinstance(v, Value) for v in a) and \
            score_terms(a[0], []) is not None:
        return a[0], scale, Term("add", a[1], tuple(x.shape), -scale)
    return None


def score_terms(x, chain: list) -> tuple[Node, float, list[Term]] | None:
    """(the GEMM q @ kT, the scale, the masks' terms) where x is the scores it computes, scaled and masked; the
    nodes walked go to `chain`. None where x is no such value."""
    scale, terms, seen = 1.0, [], []
    while True:
        x = through_views(x, seen)
        below_tensor = any(t.kind == "qscale" for t in terms)
        step = _step(x, scale, scale > 0, below_tensor) if isinstance(x, Node) else None
        if step is None:
            break
        seen.append(x)
        x, scale, term = step
        terms += [term] if term is not None else []
    if not (is_node(x, "gemm", "mm") and len(x.shape) == 3):
        return None
    chain += seen + [x]
    return x, scale, terms


# --- the kernel's mask -------------------------------------------------------------------------------------
class ModelState:
    """A leaf's base ("self.bias") -> the tensor the model holds there, with its values: the traced model's own,
    or for a model built on the meta device a CPU build's (made once, on first use, within REAL_LIMIT bytes);
    None where there is none."""

    def __init__(self, traced, module):
        self.traced, self.module, self.own, self.real = traced, module, None, None

    @staticmethod
    def _by_base(model) -> dict:
        return {attribute_expr(model, path): t for _, path, t in _state(model)}

    def __call__(self, base: str) -> torch.Tensor | None:
        if self.own is None:
            self.own = self._by_base(self.traced.model)
        t = self.own.get(base)
        if t is None or not t.is_meta:
            return t
        if self.real is None:
            try:
                self.real = self._by_base(_build(self.module, False, REAL_LIMIT)[0])
            except Exception:  # too large, or it does not build on the CPU: the mask stays a mask
                self.real = {}
        return self.real.get(base)


_TORCH = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
          "add": torch.add, "sub": torch.sub, "mul": torch.mul, "where": torch.where,
          "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "logical_and": torch.logical_and,
          "bitwise_and": torch.bitwise_and, "logical_or": torch.logical_or, "bitwise_or": torch.bitwise_or}


def _values(v, state) -> torch.Tensor | None:
    """The values of a pointwise tree over leaves whose values are known (state, iotas, constants), or None."""
    if not isinstance(v, Value):
        return torch.tensor(v)
    if math.prod(v.shape) > MAX_EVALUATED:
        return None
    if isinstance(v, Leaf):
        if v.kind == "const":
            return torch.full(v.shape, v.value, dtype=v.dtype)
        if v.bounds or any(s < 0 for s in v.strides):
            return None
        if v.kind == "iota":
            index = sum((torch.arange(n) * s).view((-1,) + (1,) * (len(v.shape) - d - 1))
                        for d, (n, s) in enumerate(zip(v.shape, v.strides))) + v.offset
            return (v.value + v.step * torch.as_tensor(index)).expand(v.shape).to(v.dtype)
        base = state(v.base)
        try:
            return None if base is None else torch.as_strided(base.detach(), v.shape, v.strides, v.offset)
        except RuntimeError:  # a view the tensor does not hold (the lowering's layout is not its own)
            return None
    if not (isinstance(v, Node) and v.op == "pw" and (v.fn in _TORCH or v.fn == "cast")) or \
            v.attrs.get("alpha", 1) != 1:
        return None
    args = [_values(a, state) for a in v.args]
    if any(a is None for a in args):
        return None
    return args[0].to(v.dtype) if v.fn == "cast" else _TORCH[v.fn](*args).to(v.dtype)


def _causal(term: Term, state) -> bool:
    """Whether a boolean term keeps exactly j <= i (query i, key j) everywhere it applies."""
    keep = _values(term.value, state)
    if keep is None:
        return False
    keep = keep.bool() if term.kind == "keep" else ~keep.bool()
    lq, lk = term.domain[-2:]
    return tuple(keep.shape[-2:]) == (lq, lk) and \
        bool((keep == torch.ones(lq, lk, dtype=torch.bool).tril()).all())


def _common_batch(domains) -> tuple | None:
    """The finest leading dims that each domain's leading dims are groups of ((160, 6) and (32, 5, 6): (32, 5,
    6)), all flattening row-major to the same batch; None where they do not nest."""
    cuts = set()
    for d in domains:
        cuts |= {math.prod(d[j:-2]) for j in range(len(d) - 2)}
    out, inner = [], 1
    for c in sorted(cuts - {1}):
        if c % inner:
            return None
        out.append(c // inner)
        inner = c
    return tuple(reversed(out))


def _regrouped(value: Value, domain: tuple, batch: tuple, name: str) -> tuple[Value, list]:
    """`value` (broadcast over `domain`) with its leading dims split into `batch`'s groups: a leaf re-strided, or
    a reshape view of a node (returned to insert)."""
    pad = len(domain) - len(value.shape)
    shape = (1,) * pad + tuple(value.shape)
    strides = (0,) * pad + tuple(value.strides) if isinstance(value, Leaf) else (0,) * len(shape)
    out_shape, out_strides, k = list(shape[-2:]), list(strides[-2:]), len(batch)
    for j in reversed(range(len(domain) - 2)):
        parts, size = [], 1
        while size < domain[j]:
            k -= 1
            parts.insert(0, batch[k])
            size *= batch[k]
        full = shape[j] > 1
        out_shape[:0] = parts if full else [1] * len(parts)
        out_strides[:0] = [strides[j] * math.prod(parts[i + 1:]) if full else 0 for i in range(len(parts))]
    out_shape = tuple(out_shape)
    if isinstance(value, Leaf):
        return Leaf(name, out_shape, value.dtype, kind=value.kind, base=value.base, strides=tuple(out_strides),
                    offset=value.offset, value=value.value, step=value.step), []
    view = Node(name, out_shape, value.dtype, op="view", fn="reshape", args=[value])
    return view, [view]


def kernel_mask(terms: list[Term], dtype: torch.dtype, state, name: str) -> KernelMask | None:
    """The terms as the kernel's causal flag and one mask (new nodes named `name`_m1, ...), or None where they
    were applied in scores whose leading dims do not nest."""
    terms = [t for t in terms if t.kind != "qscale"]
    if not terms:
        return KernelMask(None, None, False)
    batch = _common_batch({t.domain for t in terms})
    if batch is None:
        return None
    new: list[Node] = []

    def add(fn, args, shape, out_dtype) -> Node:
        node = Node(f"{name}_m{len(new) + 1}", tuple(shape), out_dtype, op="pw", fn=fn, args=list(args))
        new.append(node)
        return node

    causal, keeps, adds = False, [], []
    for t in terms:
        if t.kind in ("keep", "drop") and not causal and _causal(t, state):
            causal = True
            continue
        value = t.value
        if isinstance(value, Leaf) and value.bounds:  # (bounds name dims, which a regrouping renumbers)
            value = add("cast", [value], value.shape, value.dtype)
            value.attrs = {"dtype": value.dtype}
        if t.domain[:-2] != batch:
            value, views = _regrouped(value, t.domain, batch, f"{name}_m{len(new) + 1}")
            new += views
        if t.kind == "add":
            adds.append(value if t.factor == 1 else add("mul", [value, t.factor], value.shape, dtype))
        else:
            keeps.append(value if t.kind == "keep" else add("logical_not", [value], value.shape, torch.bool))
    mask = None
    for group, fn, out_dtype in ((keeps, "logical_and", torch.bool), (adds, "add", dtype)):
        part = group[0] if group else None
        for other in group[1:]:
            part = add(fn, [part, other], torch.broadcast_shapes(part.shape, other.shape), out_dtype)
        if mask is not None and part is not None:  # keep, then add: -inf where dropped
            part = add("where", [mask, part, -math.inf], torch.broadcast_shapes(mask.shape, part.shape), dtype)
        mask = part if part is not None else mask
    if isinstance(mask, Leaf) and (mask.kind != "tensor" or mask.bounds):  # the kernel loads it through strides
        mask = add("cast", [mask], mask.shape, mask.dtype)
        mask.attrs = {"dtype": mask.dtype}
    return KernelMask(mask, batch if mask is not None else None, causal, new)


def scaled_query(q, terms: list[Term], name: str) -> tuple[Value, list] | None:
    """q (flattened batch, L, D) with the scores' tensor scale folded in: (q4 * t) seen flat, where q4 is q
    before its views to the flat batch (leading dims as the scores had them where t applied); new nodes to
    insert. q as it is without a tensor scale; None where q has no such view."""
    scales = [t for t in terms if t.kind == "qscale"]
    if not scales:
        return q, []
    (t,) = scales
    q4 = through_views(q, [])
    if tuple(q4.shape[:-2]) != t.domain[:-2]:
        return None
    product = Node(f"{name}_q1", q4.shape, q4.dtype, op="pw", fn="mul", args=[q4, t.value])
    flat = Node(f"{name}_q2", q.shape, q.dtype, op="view", fn="reshape", args=[product])
    return flat, [product, flat]
