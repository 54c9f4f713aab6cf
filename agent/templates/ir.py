"""The templates' intermediate form: a traced task as leaves (tensors read from memory, iotas, constants)
and nodes (pointwise, reduce, scan, view, gemm, window, rnn, attention), each with a concrete shape.

    program = lower(analysis)        # raises Unsupported with a one-sentence reason

Views of leaves never run on the host: a leaf carries its base tensor plus the strides and element offset
of the view (flip = negative stride), and kernels address the base directly. High-level ops (softmax,
layer/group/batch norm, var, norms, logsumexp, losses) are decomposed at trace time into reductions and
pointwise ops (decomps.py), so one code generator covers them all.
"""
from __future__ import annotations

import copy
import math
import operator
import re
from dataclasses import dataclass, field

import torch

from agent.analysis import TaskAnalysis, trace
from agent.templates.decomps import DECOMPOSITIONS, SORT_MOST
from agent.templates.pointwise_ops import BITCAST, FLOAT8, POINTWISE, SHIFTS, WRAPS

aten = torch.ops.aten


class Unsupported(Exception):
    """The templates cannot build this task; the message says why, in one sentence."""


@dataclass(eq=False)
class Value:
    name: str
    shape: tuple
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, {list(self.shape)})"


@dataclass(eq=False, repr=False)
class Leaf(Value):
    kind: str = "tensor"  # "tensor" (read from a base tensor), "iota" (start + step * index), "const"
    base: str = ""  # host expression of the base tensor: "x", "self.linear.weight", or a buffer name
    strides: tuple = ()
    offset: int = 0  # element offset into the base
    value: float | int | bool | None = None  # const value; iota start
    step: float | int = 1  # iota step
    bounds: tuple = ()  # ((dim, lo, hi), ...): read only where lo <= index < hi (a piece of a cat or a pad)


@dataclass(eq=False, repr=False)
class Node(Value):
    op: str = "pw"  # pw, reduce, scan, view, gemm, window
    fn: str = ""  # pointwise function, reduction (sum/max/min/prod/argmax/argmin), scan (cumsum/cumprod), ...
    args: list = field(default_factory=list)  # Values and python scalars
    attrs: dict = field(default_factory=dict)

    @property
    def inputs(self) -> list[Value]:
        return [a for a in self.args if isinstance(a, Value)]


@dataclass(frozen=True)
class Guard:
    """A shape the candidate holds only at: a call where `base` has another shape runs the task's reference
    instead (agent/templates/program.py renders the check and the warned fallback)."""
    base: str  # host expression: a forward argument ("x") or model state ("self.linear.weight")
    shape: tuple
    why: str  # what relies on it, in words: "the shape it was generated for", a rewrite rule and its condition


@dataclass
class Program:
    nodes: list[Node]  # topological order
    outputs: list[Value]
    out_tree: object  # pytree spec of the forward's return value
    arg_names: list[str]  # forward signature
    bases: dict[str, Leaf]  # host base name -> a plain leaf over the whole base tensor
    float_base: str | None  # a floating input whose dtype outputs take at run time
    rewrites: list[str] = field(default_factory=list)  # rules of agent/templates/rewrite.py that built it
    rewrite_refused: str = ""  # why a rewrite the cost model preferred was not built, in one sentence
    rewrite_cost: tuple | None = None  # (before_s, after_s): the cost model's times of the original and this
    guards: list[Guard] = field(default_factory=list)  # shapes of model state a rewrite relies on
    complex_bases: frozenset = frozenset()  # complex model state, read through a real view (complex_ops.py)


def contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def restride(src: Leaf, shape: tuple, strides: tuple, offset: int) -> tuple[tuple, int]:
    """Strides and offset, relative to src's base, of a view (shape, strides, offset) taken of src as if src
    were laid out contiguously (how the trace and the buffers lay it out). Handles flipped (negative) strides."""
    if src.kind == "const":
        return (0,) * len(shape), 0
    if src.bounds:
        return None
    if src.offset == 0 and src.strides == contiguous_strides(src.shape):
        return tuple(strides), offset

    def position(index) -> int:
        p = offset + sum(i * s for i, s in zip(index, strides))
        off = src.offset
        for size, stride in reversed(list(zip(src.shape, src.strides))):
            off += (p % size) * stride
            p //= size
        return off

    origin = position([0] * len(shape))
    out = tuple(position([1 if j == d else 0 for j in range(len(shape))]) - origin if shape[d] > 1 else 0
                for d in range(len(shape)))
    samples = [[n - 1 for n in shape]] + [[(7 * k + 3 * d) % max(n, 1) for d, n in enumerate(shape)] for k in range(1, 6)]
    for index in samples:  # a view of a view need not be a strided view (a reshape of a broadcast)
        if position(index) != origin + sum(i * st for i, st in zip(index, out)):
            return None
    return out, origin


def broadcast_strides(shape: tuple, target: tuple) -> tuple:
    """Strides that broadcast a contiguous `shape` to `target` (0 along broadcast dims)."""
    cs = contiguous_strides(shape)
    lead = len(target) - len(shape)
    return tuple(cs[j - lead] if j >= lead and shape[j - lead] == target[j] and target[j] > 1 else 0
                 for j in range(len(target)))


def shift(leaf: Leaf, name: str, shape: tuple, lo: tuple) -> Leaf:
    """`leaf` (broadcast right-aligned) placed at offset `lo` in a tensor of `shape`: position i reads
    leaf[i - lo]; a tensor leaf gets `bounds` where it does not cover `shape`, so it is never read outside."""
    lead = len(shape) - len(leaf.shape)
    if leaf.kind == "const":
        return Leaf(name, tuple(shape), leaf.dtype, kind="const", value=leaf.value, strides=(0,) * len(shape))
    strides = (0,) * lead + tuple(st if n > 1 else 0 for n, st in zip(leaf.shape, leaf.strides))
    bounds = tuple((j + lead, b_lo + lo[j + lead], b_hi + lo[j + lead]) for j, b_lo, b_hi in leaf.bounds)
    if leaf.kind == "tensor":
        bounds += tuple((j + lead, lo[j + lead], lo[j + lead] + n) for j, n in enumerate(leaf.shape)
                        if n > 1 and (lo[j + lead] or n != shape[j + lead]))
    return Leaf(name, tuple(shape), leaf.dtype, kind=leaf.kind, base=leaf.base, strides=strides,
                offset=leaf.offset - sum(a * b for a, b in zip(lo, strides)), value=leaf.value, step=leaf.step,
                bounds=bounds)


def lower(analysis: TaskAnalysis) -> Program:
    """The task's IR, traced at the analysis's shapes with the template decompositions, then rewritten to
    compute less where a rule of rewrite.py holds at those shapes and the cost model prefers it (cached). An
    analysis from `original(analysis)` lowers to the program as traced, with no rewrite."""
    from agent.templates.rewrite import rewrite
    cached = analysis.__dict__.get("_templates_program")
    if cached is not None:
        if isinstance(cached, Unsupported):
            raise cached
        return cached
    try:
        try:
            traced = trace(analysis.module, meta=not analysis.small, decompositions=DECOMPOSITIONS,
                           dtype=analysis.dtype)
        except Exception as e:
            refused = re.search(r"NotImplementedError: ([^()]+)\)", str(e))  # a decomposition's (decomps.py)
            if refused:
                raise Unsupported(f"{refused.group(1)[0].upper()}{refused.group(1)[1:]}.") from None
            raise Unsupported(f"The task could not be traced for the templates ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''}).") from None
        program, refused = None, ""
        try:  # the graph rewritten to compute less (rewrite.py), when the cost model prefers it and it builds
            found = None if is_original(analysis) else rewrite(traced, analysis.arch)
            if found is not None:
                program = _Builder(found.traced, analysis.module).build()
                program.rewrites = list(found.rules)
                program.rewrite_cost = (found.before_s, found.after_s)
                program.guards = list(found.guards)
        except Exception as e:  # the original graph is lowered instead; the candidates' notes say why
            first = str(e).splitlines()[0][:150] if str(e) else ""
            refused = f"the rewritten program was not used ({type(e).__name__}: {first})"
        if program is None:
            program = _Builder(traced, analysis.module).build()
            program.rewrite_refused = refused
    except Unsupported as e:
        analysis.__dict__["_templates_program"] = e
        raise
    analysis.__dict__["_templates_program"] = program
    return program


def original(analysis: TaskAnalysis) -> TaskAnalysis:
    """The same analysis, but one that lowers to the program as traced (no rewrite), so the search can offer the
    rewritten program and the original side by side (cached on `analysis`)."""
    view = analysis.__dict__.get("_templates_original")
    if view is None:
        view = copy.copy(analysis)
        for key in [k for k in view.__dict__ if k.startswith("_templates")]:  # the rewritten program's caches
            view.__dict__.pop(key)
        view.__dict__["_templates_rewrite"] = False
        analysis.__dict__["_templates_original"] = view
    return view


def is_original(analysis: TaskAnalysis) -> bool:
    """Whether an analysis comes from `original` (lowers with no rewrite)."""
    return analysis.__dict__.get("_templates_rewrite") is False


def placeholder_bases(traced) -> dict[str, str]:
    """The host expression each placeholder of a traced graph is read from: the forward argument ("x") or the
    model state ("self.linear.weight"), by placeholder name."""
    placeholders = [n for n in traced.gm.graph.nodes if n.op == "placeholder"]
    return {ph.name: (traced.access(name) if role != "input" else name)
            for (role, name), ph in zip(traced.roles, placeholders)}


def _val(node):
    return node.meta.get("val")


def _base_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    return getattr(target, "__name__", str(target)).split(".")[0]


def _in_place(base: str) -> bool:
    """add_, __irshift__; not __rshift__."""
    return base.startswith("__i") or base.endswith("_") and not base.startswith("__") and base != "_"


def _functional(base: str) -> str:
    """The out-of-place form of an in-place op: add_ -> add, __irshift__ -> __rshift__."""
    return "__" + base[3:] if base.startswith("__i") else base.rstrip("_")


ORDER_VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "alias", "flatten"}
STRIDED_VIEWS = {"permute", "t", "transpose", "select", "slice", "as_strided", "diagonal", "unfold"}
SPLIT_VIEWS = {"unbind", "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "chunk",
               "unsafe_chunk", "tensor_split"}  # one view per piece
VIEWS = ORDER_VIEWS | STRIDED_VIEWS | SPLIT_VIEWS | {"getitem"}  # ops whose result shares its input's memory
IDENTITY = {"detach", "alias", "clone", "lift_fresh_copy", "contiguous", "lift_fresh"}
VALUE_SIZED = {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "bincount", "histogram"}
SCAN_FNS = ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp")  # running ops; a sort is a "scan" node too
CONSTANT_MOST = 16  # the most elements of a tensor constant made in the forward that the kernels inline
EMPTY = {"empty", "empty_like", "new_empty", "empty_strided", "empty_permuted"}  # unspecified contents: zeros
EMPTY_REDUCTIONS = {"sum": 0, "mean": math.nan, "prod": 1}  # over no elements (amax has none: PyTorch raises)
RANDOM = {"bernoulli", "rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "normal", "uniform",
          "native_dropout", "multinomial", "randperm", "exponential", "geometric", "cauchy", "log_normal",
          "rrelu_with_noise"}
GATHERS = {"index_select", "embedding", "gather", "index", "_unsafe_index"}
REDUCE = {"sum": "sum", "amax": "max", "amin": "min", "prod": "prod", "argmax": "argmax", "argmin": "argmin"}
POOLS = {"max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d",
         "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d"}


def _viewed(into):
    """The node of the tensor that `into` views, through views and aliases."""
    while into.op == "call_function" and _base_name(into.target) in VIEWS | {"detach", "alias", "lift_fresh"}:
        into = into.args[0]
    return into


def _copied(into) -> bool:
    """Whether the tensor that `into` views is one the forward made, a clone of an input among them, rather than
    an input or the module's own."""
    return _viewed(into).op == "call_function"


def _downstream(root) -> set:
    """The nodes that read `root`'s value, directly or through others."""
    seen, stack = set(), [root]
    while stack:
        for user in stack.pop().users:
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return seen


def _state_reaches_output(into) -> bool:
    """Whether the value of the module state that `into` views (_viewed) reaches an output by any path. Where
    none does (an instance norm's running statistics in training mode) the outputs are the same whatever the
    state holds, and its update is bookkeeping the kernels leave out, as a batch norm's."""
    return any(n.op == "output" for n in _downstream(_viewed(into)))


def _fresh_write(node, chain: list | None, order: dict) -> bool:
    """Whether an in-place copy `node` into module state writes through slices and selects (`chain`: fixed
    bounds) a value computed without that state (a static cache's slots for this call's keys), and nothing
    reads the state before it: every call then writes the same region with its own values, so what the outputs
    read of the state, the region written or the rest never written, does not depend on the calls before."""
    if _base_name(node.target) != "copy_" or not chain:
        return False
    root = _viewed(chain[0])
    stack = [root]
    while stack:
        for u in stack.pop().users:
            if u.op == "call_function" and _base_name(u.target) in VIEWS:
                stack.append(u)
            elif u is not node and order[u] < order[node]:  # read before the write: the last call's values
                return False
    return node.args[1] is not root and node.args[1] not in _downstream(root)


def _read_after(node, order: dict) -> bool:
    """Whether the tensor an in-place `node` updates is read after it: the op's own result, or the tensor it
    writes into, by an op that does not update it in place too (a chain of updates is followed to its end)."""
    written, stack = node.args[0], [node]
    while stack:
        m = stack.pop()
        for user in list(m.users) + ([u for u in written.users if order[u] > order[node]] if m is node else []):
            if user.op == "call_function" and _in_place(_base_name(user.target)) and user.args[0] in (m, written):
                stack.append(user)
            elif user is not node:
                return True
    return False


def _read_around(node, into, order: dict) -> bool:
    """Whether `into`, a view that `node` writes in place, views a tensor read after `node` other than through
    `into`: the write would have to reach it too (a circular pad's edges copied into slices of the padded
    tensor, the convolution then reading the whole). A write into a tensor no one reads around it is a new
    value of `into`. `order`: each node's place in the graph."""
    root, piece = into, {}  # piece: a split on the way up -> the index of the piece `into` lies in
    while root.op == "call_function" and _base_name(root.target) in VIEWS:
        if _base_name(root.target) == "getitem":
            piece[root.args[0]] = root.args[1]
        root = root.args[0]
    if root is into:
        return False
    stack, seen = [root], set()
    while stack:
        m = stack.pop()
        if m is into or m in seen:
            continue
        seen.add(m)
        for u in m.users:
            if m in piece and u.args[1] != piece[m]:  # another piece of the split: it shares no element
                continue
            if u.op == "call_function" and _base_name(u.target) in VIEWS:
                stack.append(u)
            elif order[u] > order[node]:
                return True
    return False


def _slices_up(into) -> list | None:
    """The slices and selects from `into` up to the tensor they view, `into` first; None where `into` is no view
    or another kind of view is on the way."""
    chain = []
    while isinstance(into, torch.fx.Node) and into.op == "call_function" and _base_name(into.target) in VIEWS:
        if _base_name(into.target) not in ("slice", "select"):
            return None
        chain.append(into)
        into = into.args[0]
    return chain or None


def _stale_view(node, chain: list, order: dict) -> bool:
    """Whether a write by `node` through `chain` (_slices_up) leaves a stale view read after it: one made before
    the write, off the chain, so that its value is the tensor's before the write. The tensor itself, the chain's
    slices and views made after the write are read at their new values (_Builder.write_back)."""
    root = chain[-1].args[0]
    stack, seen = [root], set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        for u in m.users:
            if u.op == "call_function" and _base_name(u.target) in VIEWS and order[u] < order[node]:
                stack.append(u)
            elif order[u] > order[node] and not (m is root or m in chain):
                return True
    return False


class _Builder:
    def __init__(self, traced, module=None):
        self.t, self.module = traced, module  # the task module: attention masks may read the model's values
        self.env: dict = {}
        self.nodes: list[Node] = []
        self.bases: dict[str, Leaf] = {}
        self.count = 0
        self.rebuilt: dict[tuple, Value] = {}  # sink's and shifted's trees, each (value, view) rebuilt once

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def add(self, op, fn, args, shape, out_dtype, attrs: dict | None = None, **more) -> Node:
        node = Node(self.fresh("v"), tuple(shape), out_dtype, op=op, fn=fn, args=list(args),
                    attrs={**(attrs or {}), **more})
        self.nodes.append(node)
        return node

    def build(self) -> Program:
        gm = self.t.gm
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        float_base = None
        # module buffers and tensor attributes may be updated in place (BatchNorm's batch counter, an RNN's
        # hidden state); the candidate returns the forward's outputs and leaves such bookkeeping out, inputs
        # and parameters are never mutated. Model state is read from `self` (self.network[0].weight).
        self.buffers = {self.t.access(name) for role, name in self.t.roles if role in ("buffer", "attribute")}
        complex_bases = set()
        for (role, name), ph in zip(self.t.roles, placeholders):
            v = _val(ph)
            base = self.t.access(name) if role != "input" else name
            # an input is made contiguous by the candidate (program.py), whatever strides get_inputs() or the
            # evaluator's copies give it (a transposed or sliced input was read with its own strides: wrong)
            strides = contiguous_strides(v.shape) if role == "input" else tuple(v.stride())
            leaf = Leaf(base, tuple(v.shape), v.dtype, kind="tensor", base=base, strides=strides)
            if v.is_complex():  # its pairs of reals (complex_ops.py)
                if role == "input":
                    raise Unsupported(f"The forward takes a complex input ({name}), which the templates do not "
                                      "build.")
                complex_bases.add(base)
                leaf = Leaf(base, tuple(v.shape) + (2,), v.dtype.to_real(), kind="tensor", base=base,
                            strides=tuple(2 * s for s in v.stride()) + (1,))
            self.bases[base] = leaf
            self.env[ph] = leaf
            if role == "input" and v.is_floating_point() and float_base is None:
                float_base = base
        self.order = {n: i for i, n in enumerate(gm.graph.nodes)}  # for writes in place (_read_around)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        self.wide_outputs = all(_val(a).dtype not in (torch.bfloat16, torch.float16)
                                for a in torch.utils._pytree.tree_leaves(out.args[0])
                                if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor))
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                self.env[node] = self.constant(getattr(gm, node.target))
            elif node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "output":
                flat = torch.utils._pytree.tree_leaves(node.args[0])
                if any(complex_ops.is_complex(a) for a in flat):
                    raise Unsupported("The forward returns a complex tensor, which the templates do not build.")
                spec = self.t.out_spec
                outputs = [a if not isinstance(a, torch.fx.Node) else None if self.env[a] is None else self.arg(a)
                           for a in flat]  # None: refused below
        for i, o in enumerate(outputs):  # an input or a view of one (a transposed copy): copied into its output
            if isinstance(o, Leaf):
                outputs[i] = self.add("pw", "cast", [o], o.shape, o.dtype, dtype=o.dtype)
            elif o is None:  # the indices of an adaptive max pool (pool)
                raise Unsupported("The forward returns an adaptive max pool's indices, which the templates do not "
                                  "compute.")
            elif not isinstance(o, Node):
                raise Unsupported("The forward returns a value that is not a tensor, which the templates do not "
                                  "build.")
            if outputs[i].dtype == torch.float64:
                raise Unsupported(f"The forward returns float64 (output {i}); the templates compute in float32, "
                                  f"short of the accuracy float64 outputs are judged to.")
        from agent.templates.attention_match import fuse_attention  # (they build on this module's IR)
        from agent.templates.attention_mask import ModelState
        self.nodes = fuse_attention(self.nodes, outputs, ModelState(self.t, self.module))
        live, order = set(outputs), []
        for node in reversed(self.nodes):
            if node in live:
                order.append(node)
                live.update(a for a in node.inputs if isinstance(a, Node))
        return Program(order[::-1], outputs, spec, list(self.t.arg_names), self.bases, float_base,
                       complex_bases=frozenset(complex_bases))

    def constant(self, tensor) -> Leaf:
        """A tensor the graph holds: a tensor the model keeps (in a list attribute, say) is read from `self`
        like a buffer; any other is a scalar whose value the kernels inline."""
        path = self.t.attribute_path(tensor)
        if path is not None:
            base = self.t.access(path)
            leaf = Leaf(base, tuple(tensor.shape), tensor.dtype, kind="tensor", base=base,
                        strides=tuple(tensor.stride()))
            self.bases[base] = leaf
            return leaf
        if tensor.is_meta:
            raise Unsupported("The forward uses a tensor made on the meta device, whose values are unknown.")
        if tensor.numel() > CONSTANT_MOST:
            raise Unsupported(f"The forward makes a tensor constant of {tensor.numel()} elements that the model does "
                              f"not hold; the kernels inline at most {CONSTANT_MOST}.")
        if tensor.numel() > 1:  # each element inlined: a cat of scalars, a select on the flat index
            flat = tensor.reshape(-1)
            pieces = [self.constant(flat[i:i + 1]) for i in range(flat.numel())]
            return self.reshaped(self.cat("cat", [pieces, 0], {}, torch.empty(flat.shape, dtype=tensor.dtype,
                                                                               device="meta")), tuple(tensor.shape))
        return Leaf(self.fresh("c"), tuple(tensor.shape), tensor.dtype, kind="const", value=tensor.item(),
                    strides=(0,) * tensor.dim())

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            if isinstance(self.env[a], _Later):
                self.env[a] = self.env[a].build()
            if self.env[a] is None:  # the indices of an adaptive max pool (pool)
                raise Unsupported("The forward uses an adaptive max pool's indices, which the templates do not "
                                  "compute.")
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def call(self, node):
        target, base = node.target, _base_name(node.target)
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        v = _val(node)
        if base == "getitem":
            return args[0][args[1]]
        if complex_ops.is_complex(node) or any(complex_ops.is_complex(a) for a in node.args):
            return complex_ops.call(self, node, base, args, kwargs, v)
        if _in_place(base):
            if isinstance(args[0], Leaf) and args[0].kind == "tensor" and args[0].base not in self.buffers \
                    and not _copied(node.args[0]):
                raise Unsupported(f"The forward modifies a tensor in place ({target}) that it did not create.")
            into = node.args[0]
            chain = _slices_up(into)  # a write through slices is a new value of the tensor (write_back)
            stale = _stale_view(node, chain, self.order) if chain else \
                isinstance(into, torch.fx.Node) and _read_around(node, into, self.order)
            if stale:
                raise Unsupported(f"The forward writes in place through a view ({target} into "
                                  f"{_base_name(into.target)}), which the templates do not build.")
            state = isinstance(args[0], Leaf) and args[0].kind == "tensor" and not _copied(node.args[0]) \
                and not _fresh_write(node, chain, self.order)
            if base == "copy_" and state and _state_reaches_output(into):  # state for the next call
                raise Unsupported(f"The forward overwrites the module's state ({args[0].base}) on every call, so "
                                  "its result depends on how many calls came before it.")
            if state and _read_after(node, self.order):  # a running statistic the forward uses once updated
                raise Unsupported(f"The forward updates the module's state ({args[0].base}) in place and reads the "
                                  "new value, so its result depends on how many calls came before it.")
            if base == "copy_":  # into a tensor the forward made (a fill's): the source, broadcast and cast
                result = self.copy(args, v)
            else:
                result = self.call_op(_functional(base), target, args, kwargs, v)
            self.env[node.args[0]] = result  # later readers of the mutated tensor see the new value
            if chain:
                self.write_back(chain, result)
            return result
        if base == "copy":  # copy_'s value (a fill by a tensor's)
            return self.copy(args, v)
        return self.call_op(base, target, args, kwargs, v)

    def rounding(self, x: Value, v) -> dict:
        """A cast's attrs where it rounds or wraps: to float8 always, an integer to a narrower one always (a float
        out of an integer's range is undefined: left as is); a float32 value made bf16 or fp16 in a program whose
        outputs are all float32 or wider (an fp8 or bf16 emulation) is rounded there, as PyTorch rounds it, since
        the outputs are judged to fp32's precision. Elsewhere values stay float32 until stored: a bf16 program
        computes its chains of ops in fp32, more accurately than PyTorch, which rounds after each op."""
        if str(v.dtype)[6:] in FLOAT8 and x.dtype.is_floating_point:  # always: fp8's steps are no rounding error
            return {"round": str(v.dtype)[6:]}
        if str(v.dtype)[6:] in WRAPS and not x.dtype.is_floating_point and x.dtype != torch.bool:
            src, dst = torch.iinfo(x.dtype), torch.iinfo(v.dtype)
            if src.min < dst.min or src.max > dst.max:  # an integer made narrower keeps its low bits, as PyTorch's
                return {"wrap": str(v.dtype)[6:]}
        if v.dtype in (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
            raise Unsupported(f"The forward casts to {v.dtype}, whose rounding the kernels do not compute.")
        narrow = v.dtype in (torch.bfloat16, torch.float16) and x.dtype in (torch.float32, torch.float64)
        return {"round": str(v.dtype)[6:]} if narrow and self.wide_outputs else {}

    def copy(self, args, v) -> Node:
        """copy(into, source): the source broadcast to `into`'s shape and cast to its dtype."""
        return self.add("pw", "cast", [args[1]], v.shape, v.dtype, dtype=v.dtype)

    def write_back(self, chain: list, value: Value) -> None:
        """A write of `value` through slices and selects of a tensor (_slices_up) as new values of the views above
        it and of the tensor: going up, each parent's current value with the written range along the view's dim
        replaced, a cat of three pieces (a circular pad copies its edges into slices of the padded tensor this
        way), or for a slice of step k a where on the index along that dim (strided_write)."""
        root = chain[-1].args[0]
        current = {root: self.env[root]}
        for sl in reversed(chain):
            current[sl] = self.view(sl.target, _base_name(sl.target), [current[sl.args[0]],
                                                                        *self.arg(list(sl.args[1:]))], {}, _val(sl))
        for sl in chain:
            parent = current[sl.args[0]]
            d = sl.args[1] % len(parent.shape)
            size = parent.shape[d]
            start = sl.args[2] if len(sl.args) > 2 and sl.args[2] is not None else 0
            if _base_name(sl.target) == "select":  # the value is the index's slice of length 1
                value = self.reshaped(value, parent.shape[:d] + (1,) + parent.shape[d + 1:])
            length = value.shape[d]
            start = min(max(start + size if start < 0 else start, 0), size)  # as Python's slices clamp it
            step = sl.args[4] if len(sl.args) > 4 else 1
            if step != 1:
                value = self.strided_write(parent, value, d, start, step)
            else:
                pieces = [self.narrowed(parent, d, 0, start), value,
                          self.narrowed(parent, d, start + length, size - start - length)]
                value = self.cat("cat", [pieces, d], {}, _val(sl.args[0]))
            self.env[sl.args[0]] = value

    def strided_write(self, parent: Value, value: Value, d: int, start: int, step: int) -> Node:
        """`parent` with its elements start, start + step, ... along dim d replaced by `value`'s: where the index
        along d is one of them, value's element (index - start) // step of that dim, read by an indexed load."""
        shape, length = tuple(parent.shape), value.shape[d]
        at = self.add("pw", "sub", [self.index_along(0, (shape[d],)), start], (shape[d],), torch.int64)
        slot = self.add("pw", "div", [at, step], (shape[d],), torch.int64, attrs={"rounding_mode": "floor"})
        slot = self.add("pw", "clamp", [slot, 0, length - 1], (shape[d],), torch.int64)
        spread = self.gather("index_select", [value, d, slot], torch.empty(shape, dtype=value.dtype, device="meta"))
        index = self.index_along(d, shape)
        rest = self.add("pw", "remainder", [index, step], shape, torch.int64)
        hit = self.add("pw", "logical_and", [
            self.add("pw", "eq", [rest, start % step], shape, torch.bool),
            self.add("pw", "logical_and", [self.add("pw", "ge", [index, start], shape, torch.bool),
                                           self.add("pw", "lt", [index, start + step * length], shape, torch.bool)],
                     shape, torch.bool)], shape, torch.bool)
        return self.add("pw", "where", [hit, spread, parent], shape, parent.dtype)

    def sort(self, args, kwargs, v) -> tuple:
        """Values and indices of a sort along a dim, each a "scan" node over the row (codegen.sort); a dim other
        than the last is moved last and back, as tl.sort sorts along a tile's last axis."""
        x = args[0]
        dim = (args[1] if len(args) > 1 else kwargs.get("dim", -1)) % max(len(x.shape), 1)
        descending = bool(args[2] if len(args) > 2 else kwargs.get("descending", False))
        if x.dtype in (torch.int64, torch.uint64, torch.uint32, torch.bool):
            raise Unsupported(f"A sort of {str(x.dtype)[6:]} values is not built (its 32-bit key holds int32 values "
                              "at most).")
        if x.shape[dim] > SORT_MOST:
            raise Unsupported(f"A sort is built along rows of at most {SORT_MOST} elements; this one has "
                              f"{x.shape[dim]}.")
        last = len(x.shape) - 1
        order = [d for d in range(len(x.shape)) if d != dim] + [dim]
        x = self.permuted(x, order)
        out = (self.add("scan", "sort", [x], x.shape, v[0].dtype, dims=(last,), reverse=False, descending=descending),
               self.add("scan", "sort_indices", [x], x.shape, torch.int64, dims=(last,), reverse=False,
                        descending=descending))
        return tuple(self.permuted(o, [order.index(d) for d in range(len(order))]) for o in out)

    def diag_embed(self, args, v) -> Value:
        """x's last dim on the diagonal of two new last dims, zero elsewhere (offset and dims at their defaults):
        x broadcast along the last dim, kept where the last two indices are equal."""
        x, rank, shape = args[0], len(v.shape), tuple(v.shape)
        offset = args[1] if len(args) > 1 else 0
        dims = [d % rank for d in (args[2] if len(args) > 2 else -2, args[3] if len(args) > 3 else -1)]
        if offset != 0 or dims != [rank - 2, rank - 1]:
            raise Unsupported("A diag_embed is built with its default offset and dims.")
        column = self.expanded(self.viewed(aten.unsqueeze.default, "unsqueeze", x, -1), shape)
        same = self.add("pw", "eq", [self.index_along(rank - 1, shape), self.index_along(rank - 2, shape)], shape,
                        torch.bool)
        return self.add("pw", "where", [same, column, False if v.dtype == torch.bool else 0], shape, v.dtype)

    def scatter(self, base, args, kwargs, v) -> Node:
        """scatter, scatter_add, scatter_reduce, index_add and index_put as a "scatter" node: the target, copied,
        with each element of the values stored at (fn "set"), added to (fn "add") or maxed or mined into (fn "max",
        "min") the place its indices name; in float32 where the target is 16-bit and the values accumulate. The
        node's args are the target, then the values and the indices, each seen over the domain the values span;
        attrs["target"] gives for each target dim the domain dim it is, or ("i", k) for the k-th index's value."""
        x, rank = args[0], len(args[0].shape)
        if base in ("index_put", "_unsafe_index_put"):
            indices, values = list(args[1]), args[2]
            fn = "add" if (args[3] if len(args) > 3 else kwargs.get("accumulate", False)) else "set"
            mask = indices[0] if len(indices) == 1 and isinstance(indices[0], Value) else None
            if mask is not None and mask.dtype == torch.bool and fn == "set" and (
                    not isinstance(values, Value) or values.numel == 1):  # x[mask] = v: a where, x's shape
                lead = tuple(mask.shape) + (1,) * (rank - len(mask.shape))
                value = values if not isinstance(values, Value) else self.reshaped(values, (1,) * rank)
                return self.add("pw", "where", [self.reshaped(mask, lead), value, x], v.shape, v.dtype)
            a = next(d for d, i in enumerate(indices) if i is not None)  # the indexed dims: a to b
            b = len(indices) - next(d for d, i in enumerate(reversed(indices)) if i is not None)
            if any(i is None or i.dtype == torch.bool for i in indices[a:b]):
                raise Unsupported("An index_put is built for integer indices of adjacent dims, not masks.")
            lead = tuple(torch.broadcast_shapes(*[i.shape for i in indices[a:b]]))
            domain = tuple(x.shape[:a]) + lead + tuple(x.shape[b:])
            around = ((1,) * a, (1,) * (rank - b))
            index = [self.expanded(self.reshaped(self.expanded(i, lead), around[0] + lead + around[1]), domain)
                     for i in indices[a:b]]
            target = tuple(d if d < a else ("i", d - a) if d < b else len(lead) + d - (b - a) for d in range(rank))
            src = self.expanded(values, domain)
        else:
            dim = args[1] % max(rank, 1)
            target = tuple(("i", 0) if d == dim else d for d in range(rank))
            if base == "index_add":
                src, fn = args[3], "add"
                domain = tuple(src.shape)
                alpha = args[4] if len(args) > 4 else kwargs.get("alpha", 1)
                src = src if alpha == 1 else self.add("pw", "mul", [src, alpha], domain, src.dtype)
                along = tuple(n if d == dim else 1 for d, n in enumerate(domain))
                index = [self.expanded(self.reshaped(args[2], along), domain)]
            else:
                reduce = args[4] if len(args) > 4 else kwargs.get("reduce")
                fns = {None: "add" if base == "scatter_add" else "set", "sum": "add", "add": "add", "amax": "max",
                       "amin": "min"}
                if reduce not in fns or not (args[5] if len(args) > 5 else kwargs.get("include_self", True)) or \
                        reduce in ("amax", "amin") and not x.dtype.is_floating_point:
                    raise Unsupported(f"A scatter reducing by {reduce!r} is built only as a sum or, over floats, a "
                                      "mean, a max or a min.")
                domain, fn = tuple(args[2].shape), fns[reduce]
                src = args[3] if len(args) > 3 else kwargs.get("src", kwargs.get("value"))
                for d, n in enumerate(domain):  # the source's elements at the index's positions
                    if isinstance(src, Value) and src.shape[d] != n:
                        src = self.narrowed(src, d, 0, n)
                index = [args[2]]
        if fn != "set" and v.dtype in (torch.bfloat16, torch.float16):  # accumulated in float32, then rounded
            wide = [self.add("pw", "cast", [t], t.shape, torch.float32, dtype=torch.float32) if isinstance(t, Value)
                    else t for t in (x, src)]
            out = self.add("scatter", fn, [*wide, *index], v.shape, torch.float32, target=target, domain=domain)
            return self.add("pw", "cast", [out], v.shape, v.dtype, dtype=v.dtype)
        return self.add("scatter", fn, [x, src, *index], v.shape, v.dtype, target=target, domain=domain)

    def expanded(self, value: Value, shape: tuple) -> Value:
        """value broadcast to shape, dims aligned on the right as expand aligns them."""
        if tuple(value.shape) == tuple(shape):
            return value
        return self.viewed(aten.expand.default, "expand", value, list(shape))

    def permuted(self, value: Value, order: list) -> Value:
        """value with its dims in `order` (permute)."""
        if order == sorted(order):
            return value
        return self.viewed(aten.permute.default, "permute", value, order)

    def narrowed(self, value: Value, d: int, start: int, length: int) -> Value:
        """value[start:start + length] along dim d."""
        return self.viewed(aten.slice.Tensor, "slice", value, d, start, start + length)

    def viewed(self, target, base: str, value: Value, *args) -> Value:
        """value seen through the view op `target` called with args (view), its result's shape replayed on a meta
        tensor."""
        return self.view(target, base, [value, *args], {},
                         target(torch.empty(value.shape, dtype=value.dtype, device="meta"), *args))

    def filled(self, v, value) -> Leaf:
        """A constant of v's shape and dtype: `value` at every element, inlined where it is read."""
        return Leaf(self.fresh("c"), tuple(v.shape), v.dtype, kind="const", value=value, strides=(0,) * len(v.shape))

    def call_op(self, base, target, args, kwargs, v):
        if base in ("_to_copy", "convert_element_type") and isinstance(args[0], (bool, int, float)):
            cast = float if v.dtype.is_floating_point else bool if v.dtype == torch.bool else int
            return cast(args[0])  # a number cast, as vmap's traces have them
        if base in IDENTITY or (base == "_to_copy" and kwargs.get("dtype", args[0].dtype) == args[0].dtype):
            return args[0]
        if base in ("scalar_tensor", "full", "zeros", "ones", "zeros_like", "ones_like", "full_like", "zero"):
            value = {"zeros": 0, "zeros_like": 0, "zero": 0, "ones": 1, "ones_like": 1}.get(base)
            if value is None:
                value = args[0] if base == "scalar_tensor" else args[1]
            if v.dtype == torch.bool:  # a boolean 1 is True: `~1` would be -2, never false
                value = bool(value)
            return self.filled(v, value)
        if base == "arange":
            nums = [a for a in args if isinstance(a, (int, float))]
            start, step = (nums[0], nums[2] if len(nums) > 2 else 1) if len(nums) >= 2 else (0, 1)
            return Leaf(self.fresh("i"), tuple(v.shape), v.dtype, kind="iota", value=start, step=step,
                        strides=(1,))
        if base == "view" and isinstance(args[1], torch.dtype):  # Tensor.view(dtype): the bits read as another type
            source, bits = args[0].dtype, {t: t.itemsize for t in BITCAST}
            if source not in bits or v.dtype not in bits or bits[source] != bits[v.dtype]:
                raise Unsupported(f"A view of {source} as {v.dtype} is built only between the integer and 16- and "
                                  f"32-bit float types of one width.")
            return self.add("pw", "bitcast", [args[0]], v.shape, v.dtype, attrs={"source": source, "dtype": v.dtype})
        if base in ORDER_VIEWS | STRIDED_VIEWS | SPLIT_VIEWS or base == "flip":
            return self.view(target, base, args, kwargs, v)
        if base in EMPTY:
            return self.filled(v, False if v.dtype == torch.bool else 0)
        if base in RANDOM:
            raise Unsupported(f"The forward draws random numbers ({target}, e.g. dropout in training mode), so the "
                              f"reference is not deterministic.")
        if base in ("tril", "triu"):
            return self.triangle(base, args, v)
        if base in ("cat", "stack"):
            return self.cat(base, args, kwargs, v)
        if base == "constant_pad_nd":
            return self.pad(args, v)
        if base in GATHERS:
            return self.gather(base, args, v)
        if base == "convert_element_type":  # prims' cast, which torch's decompositions of 16-bit ops leave
            return self.add("pw", "cast", [args[0]], v.shape, v.dtype, dtype=v.dtype, **self.rounding(args[0], v))
        if base in SHIFTS:  # PyTorch's shifts past the width are defined: the lowering needs the width
            bits = torch.iinfo(v.dtype).bits if not v.dtype.is_floating_point and v.dtype != torch.bool else 0
            if not bits:
                raise Unsupported(f"A shift ({target}) is built for integers only.")
            return self.add("pw", base, args, v.shape, v.dtype, attrs={"bits": bits, "signed": v.dtype.is_signed})
        if base == "_to_copy":
            return self.add("pw", "cast", args, v.shape, v.dtype, attrs={**kwargs, **self.rounding(args[0], v)})
        if base in POINTWISE:
            return self.add("pw", base, args, v.shape, v.dtype, attrs=kwargs)
        if base in REDUCE or base in ("mean", "max", "min"):
            return self.reduce(base, args, kwargs, v)
        if base in SCAN_FNS:
            x, dims = args[0], (args[1] % max(len(args[0].shape), 1),)
            if base not in ("cumsum", "cumprod") and not x.dtype.is_floating_point:
                raise Unsupported(f"A running {base[3:]} of integers is not built.")
            if base in ("cummax", "cummin"):  # (values, indices), each a scan
                return (self.add("scan", base, [x], v[0].shape, v[0].dtype, dims=dims, reverse=False),
                        self.add("scan", base + "_indices", [x], v[1].shape, torch.int64, dims=dims, reverse=False))
            return self.add("scan", base, [x], v.shape, v.dtype, dims=dims, reverse=False)
        if base == "sort":
            return self.sort(args, kwargs, v)
        if base == "diag_embed":
            return self.diag_embed(args, v)
        if base in ("scatter", "scatter_add", "scatter_reduce", "index_add", "index_put", "_unsafe_index_put"):
            return self.scatter(base, args, kwargs, v)
        if base in ("mm", "bmm"):
            return self.matmul(args[0], args[1], v)
        if base == "addmm":
            bias, a, b = args[:3]
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            out = self.matmul(a, b, v)
            if alpha != 1:
                out = self.add("pw", "mul", [out, alpha], v.shape, v.dtype)
            if beta != 0:
                scaled = bias if beta == 1 else self.add("pw", "mul", [bias, beta], bias.shape, bias.dtype)
                # a Linear's own bias, like a convolution's (vendor_bias: a vendor addmm adds it, rounding once)
                own = alpha == 1 and beta == 1 and isinstance(bias, Leaf) and len(bias.shape) == 1
                out = self.add("pw", "add", [out, scaled], v.shape, v.dtype, **({"vendor_bias": True} if own else {}))
            return out
        if base == "convolution":
            return self.convolution(args, v)
        if base in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
            return self.recurrent(base, args, v)
        if base == "attention":  # agent/attention_ops.py: softmax(q k^T * scale + mask) v as one node
            operands = [self.in_memory(a) for a in args[:4]]
            return self.add("attention", "flash", operands, v.shape, v.dtype, causal=bool(args[4]),
                            scale=float(args[5]), safe=True)  # SDPA's softmax is safe: a row seeing no key is 0
        if base == "_scaled_dot_product_flash_attention_for_cpu":
            raise Unsupported("The attention applies dropout, which draws random numbers, so the reference is not "
                              "deterministic.")
        if base in POOLS:
            return self.pool(target, base, args, kwargs, v)
        if base in VALUE_SIZED:  # traced on real tensors, its size is this input's: another's would differ
            raise Unsupported(f"The forward makes a tensor whose size depends on its input's values ({target}), "
                              "which a kernel of fixed shapes cannot compute.")
        raise Unsupported(f"No template lowers {target}.")

    def view(self, target, base, args, kwargs, v) -> Value:
        """A view of args[0]. Its layout is taken relative to the source laid out contiguously (the view is
        replayed on a contiguous meta tensor of the source's shape): the traced strides are relative to the
        storage, which a clone the IR drops, or a strided source, would make wrong. Ops that split a tensor
        (unbind, split, chunk) give a tuple of views."""
        src = args[0]
        if base in SPLIT_VIEWS:
            pieces = target(torch.empty(src.shape, dtype=src.dtype, device="meta"), *args[1:], **kwargs)
            return tuple(self.view(aten.as_strided.default, "as_strided", [src, p.shape, p.stride(),
                                                                           p.storage_offset()], {}, p)
                         for p in pieces)
        if base == "flip":
            dims = tuple(d % len(src.shape) for d in args[1])
            cs = contiguous_strides(src.shape)
            layout = (tuple(-s if i in dims else s for i, s in enumerate(cs)),
                      sum((src.shape[d] - 1) * cs[d] for d in dims))
        else:
            replayed = target(torch.empty(src.shape, dtype=src.dtype, device="meta"), *args[1:], **kwargs)
            layout = (tuple(replayed.stride()), replayed.storage_offset())
        sunk = self.sink(src, tuple(v.shape), *layout)
        if sunk is not None:
            return sunk
        if isinstance(src, Leaf):  # a view no strides express: copy the leaf, then view the copy
            src = self.add("pw", "cast", [src], src.shape, src.dtype, attrs={"dtype": src.dtype})
        if base == "flip":
            if src.op == "scan" and src.attrs["dims"] == dims and src.fn in SCAN_FNS:
                # flip(scan(y)) along the scan axis is the reversed scan of flip(y); flipping leaves is free
                flipped = self.sink(src.args[0], tuple(v.shape), *layout)
                if flipped is not None:
                    return self.add("scan", src.fn, [flipped], v.shape, v.dtype, dims=dims,
                                    reverse=not src.attrs["reverse"])
            return self.add("view", "flip", [src], v.shape, v.dtype, dims=dims)
        if base in ORDER_VIEWS:
            return self.add("view", "expand" if base == "expand" else "reshape", [src], v.shape, v.dtype)
        return self.add("view", "strided", [src], v.shape, v.dtype, strides=layout[0], offset=layout[1])

    def sink(self, value, shape: tuple, strides: tuple, offset: int) -> Value | None:
        """`value` seen through a view (shape, strides, offset relative to value's contiguous layout): a leaf
        re-strided, or a pointwise tree of leaves rebuilt over views of its leaves (so a pointwise value
        needs no buffer to be reshaped, broadcast or flipped). None when no strides express it."""
        if isinstance(value, Leaf):
            layout = restride(value, shape, strides, offset)
            if layout is None:
                return None
            return Leaf(self.fresh(value.name + "_"), tuple(shape), value.dtype, kind=value.kind, base=value.base,
                        strides=layout[0], offset=layout[1], value=value.value, step=value.step)
        if not (isinstance(value, Node) and value.op == "pw") or value.fn == "gather":
            return None
        key = ("sink", id(value), tuple(shape), tuple(strides), offset)  # a value two args share, rebuilt once:
        if key in self.rebuilt:  # a recurrence's values each feed two later ones, so a tree grows as 2^steps
            return self.rebuilt[key]
        args = []
        for a in value.args:
            if isinstance(a, Value):
                if a.shape != value.shape:
                    a = self.sink(a, value.shape, broadcast_strides(a.shape, value.shape), 0)
                a = a if a is None else self.sink(a, shape, strides, offset)
                if a is None:
                    return None
            args.append(a)
        self.rebuilt[key] = self.add("pw", value.fn, args, shape, value.dtype, attrs=value.attrs)
        return self.rebuilt[key]

    def index_along(self, d: int, shape: tuple) -> Leaf:
        """The index along dim d at each position of `shape` (an iota broadcast over the other dims)."""
        return Leaf(self.fresh("i"), tuple(shape), torch.int64, kind="iota", value=0, step=1,
                    strides=tuple(1 if j == d else 0 for j in range(len(shape))))

    def reshaped(self, value: Value, shape: tuple) -> Value:
        """`value` reshaped to `shape` (same element count)."""
        if tuple(value.shape) == tuple(shape):
            return value
        sunk = self.sink(value, tuple(shape), contiguous_strides(shape), 0)
        return sunk if sunk is not None else self.add("view", "reshape", [value], shape, value.dtype)

    def triangle(self, base, args, v) -> Value:
        """tril/triu: keep x where col - row <= k (tril) or >= k (triu), else 0: iota comparisons and a where."""
        x, k = args[0], args[1] if len(args) > 1 else 0
        shape, rank = tuple(v.shape), len(v.shape)
        diff = self.add("pw", "sub", [self.index_along(rank - 1, shape), self.index_along(rank - 2, shape)], shape,
                        torch.int64)
        keep = self.add("pw", "le" if base == "tril" else "ge", [diff, k], shape, torch.bool)
        return self.add("pw", "where", [keep, x, False if v.dtype == torch.bool else 0], shape, v.dtype)

    def shifted(self, value: Value, shape: tuple, lo: tuple) -> Value:
        """`value` placed at offset `lo` in a tensor of `shape` (same rank): element i reads value[i - lo], and
        positions outside value are left unspecified (its loads are masked there: leaves carry `bounds`). A
        pointwise tree of leaves is rebuilt over shifted leaves; any other value becomes a "shift" view."""
        if isinstance(value, Leaf):
            return shift(value, self.fresh(value.name + "_"), shape, lo)
        key = ("shifted", id(value), tuple(shape), tuple(lo))
        if key not in self.rebuilt and isinstance(value, Node) and value.op == "pw" and value.fn != "gather":
            args = [self.shifted(a, shape, lo) if isinstance(a, Value) else a for a in value.args]
            self.rebuilt[key] = self.add("pw", value.fn, args, shape, value.dtype, attrs=value.attrs)
        elif key not in self.rebuilt:
            self.rebuilt[key] = self.add("view", "shift", [value], shape, value.dtype, lo=tuple(lo))
        return self.rebuilt[key]

    def cat(self, base, args, kwargs, v) -> Value:
        """cat/stack along a dim: each piece shifted to its place, then a where chain on the index along dim."""
        pieces, dim = list(args[0]), args[1] if len(args) > 1 else kwargs.get("dim", 0)
        shape = tuple(v.shape)
        d = dim % len(shape)
        if base == "stack":
            pieces = [self.reshaped(p, shape[:d] + (1,) + shape[d + 1:]) for p in pieces]
        pieces = [p for p in pieces if p.numel > 0 and len(p.shape) == len(shape)]  # cat skips empty 1-D pieces
        if len(pieces) == 1:
            return pieces[0]
        ends = [sum(p.shape[d] for p in pieces[:i + 1]) for i in range(len(pieces))]
        index = self.index_along(d, shape)
        out = None
        for i in reversed(range(len(pieces))):
            lo = tuple(ends[i] - pieces[i].shape[d] if j == d else 0 for j in range(len(shape)))
            part = self.shifted(pieces[i], shape, lo)
            if out is None:
                out = part
                continue
            before = self.add("pw", "lt", [index, ends[i]], shape, torch.bool)
            out = self.add("pw", "where", [before, part, out], shape, v.dtype)
        out.attrs["cat"] = True  # the chain's top: its pieces may be written into their place (schedule.py)
        return out

    def pad(self, args, v) -> Value:
        """constant_pad_nd: the input shifted by its leading pads (negative pads crop) and `value` outside."""
        x, pads, value = args[0], list(args[1]), args[2] if len(args) > 2 else 0
        shape, rank = tuple(v.shape), len(v.shape)
        lo = [0] * rank
        for i in range(len(pads) // 2):
            lo[rank - 1 - i] = pads[2 * i]
        inside = None
        for d in range(rank):
            checks = ([("ge", lo[d])] if lo[d] > 0 else []) + \
                     ([("lt", lo[d] + x.shape[d])] if lo[d] + x.shape[d] < shape[d] else [])
            for op, at in checks:
                cond = self.add("pw", op, [self.index_along(d, shape), at], shape, torch.bool)
                inside = cond if inside is None else self.add("pw", "logical_and", [inside, cond], shape, torch.bool)
        part = self.shifted(x, shape, tuple(lo))
        if inside is None:  # only crops: a plain view
            return self.add("pw", "cast", [part], shape, v.dtype, attrs={"dtype": v.dtype})
        return self.add("pw", "where", [inside, part, value], shape, v.dtype)

    def gather(self, base, args, v) -> Value:
        """Indexed loads (index_select, embedding, gather, index with tensor indices): a "gather" node whose
        args are the source and the index values (shaped to broadcast against the output); attrs src_dims (per
        output dim, the source dim it walks, or -1) and index_dims (the source dim each index addresses)."""
        shape = tuple(v.shape)
        if base == "embedding":
            src, idx = args[0], args[1]
            src_dims, index_dims = (-1,) * len(idx.shape) + (1,), (0,)
            indices = [self.reshaped(idx, tuple(idx.shape) + (1,))]
        elif base in ("index", "_unsafe_index"):
            src, given = args[0], list(args[1])
            at = [j for j, t in enumerate(given) if t is not None]
            if any(given[j].dtype == torch.bool for j in at):
                raise Unsupported("Indexing with a boolean mask gives a data-dependent shape, which the templates "
                                  "do not build.")
            nb = len(shape) - (len(src.shape) - len(at))
            rest = [j for j in range(len(src.shape)) if j not in at]
            adjacent = at == list(range(at[0], at[-1] + 1))
            before = [j for j in rest if j < at[0]] if adjacent else []
            after = [j for j in rest if j not in before]
            src_dims = tuple(before) + (-1,) * nb + tuple(after)
            index_dims = tuple(at)
            indices = [self.reshaped(given[j], (1,) * len(before) + (1,) * (nb - len(given[j].shape)) +
                                     tuple(given[j].shape) + (1,) * len(after)) for j in at]
        else:
            src, d, idx = args[0], args[1] % max(len(args[0].shape), 1), args[2]
            src_dims = tuple(j if j != d else -1 for j in range(len(shape)))
            index_dims = (d,)
            indices = [idx if base == "gather" else
                       self.reshaped(idx, tuple(idx.numel if j == d else 1 for j in range(len(shape))))]
        if isinstance(src, Leaf) and src.kind != "tensor":  # an iota or a constant: computed into a buffer first
            src = self.add("pw", "cast", [src], src.shape, src.dtype, dtype=src.dtype)
        return self.add("pw", "gather", [src] + indices, shape, v.dtype, src_dims=src_dims, index_dims=index_dims)

    def matmul(self, a, b, v) -> Value:
        """A GEMM node; a product with one output row or column becomes a multiply and a reduction, and one with
        a constant operand (an LSTM cell's zero state times its weight) the other's sums over K times it."""
        m, n = a.shape[-2], b.shape[-1]
        for const, other, k in ((a, b, -2), (b, a, -1)):
            if isinstance(const, Leaf) and const.kind == "const":
                if const.value == 0:
                    return self.filled(v, 0)
                keep = tuple(1 if j == len(other.shape) + k else d for j, d in enumerate(other.shape))
                sums = self.add("reduce", "sum", [other], keep, v.dtype, dims=(len(other.shape) + k,), keepdim=True)
                return self.add("pw", "mul", [sums, const.value], v.shape, v.dtype)
        if not (isinstance(a, Leaf) and isinstance(b, Leaf) and (n == 1 or m == 1)):
            return self.add("gemm", "mm", [a, b], v.shape, v.dtype)
        batch = a.shape[:-2]
        if n == 1:  # (.., M, K) x (.., K, 1): multiply each row by b laid along K, sum over K
            bt = Leaf(self.fresh(b.name + "_"), batch + (1, b.shape[-2]), b.dtype, kind=b.kind, base=b.base,
                      strides=b.strides[:-2] + (0, b.strides[-2]), offset=b.offset)
            prod = self.add("pw", "mul", [a, bt], a.shape, v.dtype)
            return self.add("reduce", "sum", [prod], v.shape, v.dtype, dims=(len(a.shape) - 1,), keepdim=True)
        at = Leaf(self.fresh(a.name + "_"), batch + (a.shape[-1], 1), a.dtype, kind=a.kind, base=a.base,
                  strides=a.strides[:-2] + (a.strides[-1], 0), offset=a.offset)
        prod = self.add("pw", "mul", [at, b], b.shape, v.dtype)
        return self.add("reduce", "sum", [prod], v.shape, v.dtype, dims=(len(b.shape) - 2,), keepdim=True)

    def reduce(self, base, args, kwargs, v) -> Value:
        x, scalar = args[0], not args[0].shape
        if scalar:  # a 0-dim tensor's dim 0 (or -1, or all of them) is its one element
            x = self.reshaped(x, (1,))
        rank = len(x.shape)
        if base in ("max", "min") and len(args) == 1:  # full max/min
            return self.add("reduce", base, [x], v[0].shape if isinstance(v, tuple) else v.shape, x.dtype,
                            dims=tuple(range(rank)), keepdim=False)
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False)) and not scalar
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(rank))
        dims = tuple(sorted({d % max(rank, 1) for d in ([dims] if isinstance(dims, int) else dims)}))
        if any(x.shape[d] == 0 for d in dims) and base in EMPTY_REDUCTIONS:  # no elements: PyTorch's identity
            return self.filled(v, EMPTY_REDUCTIONS[base])
        if base in ("max", "min"):  # max.dim -> (values, indices)
            vals = self.add("reduce", base, [x], v[0].shape, x.dtype, dims=dims, keepdim=keepdim)
            idx = self.add("reduce", "arg" + base, [x], v[1].shape, torch.int64, dims=dims, keepdim=keepdim)
            return (vals, idx)
        if base == "mean":
            total = self.add("reduce", "sum", [x], v.shape, v.dtype, dims=dims, keepdim=keepdim)
            count = math.prod(x.shape[d] for d in dims)
            return self.add("pw", "mul", [total, 1.0 / count], v.shape, v.dtype)
        return self.add("reduce", REDUCE[base], [x], v.shape, v.dtype, dims=dims, keepdim=keepdim)

    def convolution(self, args, v) -> Value:
        """A depthwise 2-D convolution of a task input is a window op; every other convolution (1-, 2- or 3-D,
        grouped, strided, padded, dilated, transposed) is an implicit GEMM node (fn "conv") over its output
        positions and channels. A bias becomes an epilogue add marked `vendor_bias` (part of the reference's
        convolution op, so it does not count as work beyond it, and a vendor convolution adds it)."""
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
        depthwise = not transposed and len(x.shape) == 4 and groups == x.shape[1] and w.shape[1] == 1
        if depthwise and isinstance(x, Leaf) and isinstance(w, Leaf):
            out = self.add("window", "conv", [x, w], v.shape, v.dtype, kernel=tuple(w.shape[2:]),
                           stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation),
                           multiplier=w.shape[0] // groups)
        else:
            out = self.add("gemm", "conv", [x, w], v.shape, v.dtype, stride=tuple(stride), padding=tuple(padding),
                           dilation=tuple(dilation), transposed=bool(transposed),
                           output_padding=tuple(output_padding), groups=int(groups))
        if bias is not None:
            if not isinstance(bias, Leaf):
                raise Unsupported("The convolution's bias is a computed value; the templates read it from memory.")
            rank = len(v.shape)
            b = Leaf(self.fresh(bias.name + "_"), (1, bias.shape[0]) + (1,) * (rank - 2), bias.dtype, base=bias.base,
                     strides=(0, bias.strides[0]) + (0,) * (rank - 2), offset=bias.offset)
            out = self.add("pw", "add", [out, b], v.shape, v.dtype, vendor_bias=True)
        return out

    def recurrent(self, mode: str, args, v) -> tuple:
        """A stack of recurrent layers (agent/recurrent_ops.py keeps it one op): an "rnn" node for the output
        sequence and an "rnn_state" node per final state (h_n, and c_n for an LSTM)."""
        x, hx, weights, has_biases, layers, dropout, train, bidirectional, batch_first = args[:9]
        if dropout and train and layers > 1:
            raise Unsupported("The recurrent layers apply dropout in training mode, which is random, so the "
                              "reference is not deterministic.")
        if len(weights) != layers * (2 if bidirectional else 1) * (4 if has_biases else 2):
            raise Unsupported("The LSTM projects its hidden state (proj_size), which the recurrent kernel does not "
                              "compute.")
        h0, c0 = (hx[0], hx[1]) if mode == "lstm" else (hx, None)
        out = self.add("rnn", mode, [x, h0, c0, *weights], v[0].shape, v[0].dtype, layers=int(layers),
                       bidirectional=bool(bidirectional), batch_first=bool(batch_first), has_biases=bool(has_biases))
        finals = tuple(self.add("rnn_state", name, [out], s.shape, s.dtype) for name, s in zip("hc", v[1:]))
        return (out, *finals)

    def in_memory(self, value):
        """`value` as a kernel that reads it through strides can take it: a constant, an iota or a piece of a
        cat or pad (a leaf with bounds) becomes a computed value, which gets a buffer."""
        if isinstance(value, Leaf) and (value.kind != "tensor" or value.bounds):
            return self.add("pw", "cast", [value], value.shape, value.dtype, attrs={"dtype": value.dtype})
        return value

    def pool(self, target, base, args, kwargs, v) -> Value:
        """Max, average and adaptive pooling over the trailing 2 or 3 dims of any value (1-D pooling arrives as
        2-D over an unsqueezed axis; the leading dims, batch and channels or channels alone, are kept): a window
        node, or a reduction when an adaptive pool's output is one element per plane. Max pooling returns
        (values, indices), the indices built only where read (pool_indices; an adaptive pool's are None)."""
        a = _bound(target, args, kwargs)
        x, rank = a["self"], 3 if base.endswith("3d") else 2
        fn = "max" if "max" in base else "avg"
        val = v[0] if isinstance(v, (tuple, list)) else v
        shape, dtype = tuple(val.shape), val.dtype
        ins, outs = x.shape[-rank:], shape[-rank:]
        dims = tuple(range(len(shape) - rank, len(shape)))
        if "adaptive" in base and all(o == 1 for o in outs):
            out = self.add("reduce", "sum" if fn == "avg" else "max", [x], shape, dtype, dims=dims, keepdim=True)
            if fn == "avg":
                out = self.add("pw", "mul", [out, 1.0 / math.prod(ins)], shape, dtype)
        elif "adaptive" in base:  # windows [floor(o * I / O), ceil((o + 1) * I / O)) along dims O does not divide
            even = tuple(i % o == 0 for i, o in zip(ins, outs))
            kernel = tuple(i // o if e else max(-(-(j + 1) * i // o) - j * i // o for j in range(o))
                           for i, o, e in zip(ins, outs, even))
            stride = tuple(i // o if e else 1 for i, o, e in zip(ins, outs, even))
            out = self.add("window", fn, [x], shape, dtype, kernel=kernel, stride=stride, padding=(0,) * rank,
                           dilation=(1,) * rank, adaptive=tuple(not e for e in even))
        else:
            kernel = _per_dim(a["kernel_size"], rank)
            stride = _per_dim(a["stride"], rank) or kernel
            out = self.add("window", fn, [x], shape, dtype, kernel=kernel, stride=stride,
                           padding=_per_dim(a["padding"], rank), dilation=_per_dim(a.get("dilation", 1), rank),
                           count_include_pad=a.get("count_include_pad", True), divisor=a.get("divisor_override"))
        if fn == "max" and "adaptive" not in base:
            return out, _Later(lambda: self.pool_indices(x, out.attrs, shape))
        return (out, None) if fn == "max" else out

    def pool_indices(self, x: Value, a: dict, shape: tuple) -> Node:
        """A max pool's indices, flat within each input plane as PyTorch gives them: the argmax of each window
        (its taps along a last dim of a strided view of the input padded with -inf), turned back into that tap's
        place in the input. A tie goes to the first tap, as in PyTorch; a NaN is not taken as a window's max
        there (argmax skips it), where PyTorch takes it."""
        rank = len(a["kernel"])
        lead, ins, outs = tuple(x.shape[:-rank]), tuple(x.shape[-rank:]), shape[-rank:]
        if math.prod(ins) > 1 << 24:
            raise Unsupported("A max pool's indices are built for planes of at most 2**24 elements.")
        low = a["padding"]
        high = [max(0, (o - 1) * s + (k - 1) * d + 1 - i - p)
                for o, s, k, d, i, p in zip(outs, a["stride"], a["kernel"], a["dilation"], ins, low)]
        pads = [p for j in reversed(range(rank)) for p in (low[j], high[j])]
        meta = torch.empty(lead + tuple(i + p + q for i, p, q in zip(ins, low, high)), dtype=x.dtype, device="meta")
        padded = self.pad([x, pads, -float("inf")], meta)
        cs = contiguous_strides(meta.shape)
        size = lead + outs + a["kernel"]
        stride = cs[:len(lead)] + tuple(s * c for s, c in zip(a["stride"], cs[len(lead):])) + \
            tuple(d * c for d, c in zip(a["dilation"], cs[len(lead):]))
        windows = self.viewed(aten.as_strided.default, "as_strided", padded, list(size), list(stride), 0)
        taps = self.reshaped(windows, lead + outs + (math.prod(a["kernel"]),))
        rest = self.add("pw", "cast", [self.add("reduce", "argmax", [taps], shape, torch.int64, dims=(len(shape),),
                                                keepdim=False)], shape, torch.float32, attrs={"dtype": torch.float32})
        place = None
        for j in reversed(range(rank)):  # the tap along each window dim, the last fastest, then its input position
            up = self.add("pw", "div", [rest, a["kernel"][j]], shape, torch.float32, attrs={"rounding_mode": "floor"})
            tap = self.add("pw", "sub", [rest, self.add("pw", "mul", [up, a["kernel"][j]], shape, torch.float32)],
                           shape, torch.float32)
            at = self.add("pw", "mul", [self.index_along(len(lead) + j, shape), a["stride"][j]], shape, torch.int64)
            at = self.add("pw", "add", [at, self.add("pw", "mul", [tap, a["dilation"][j]], shape, torch.float32)],
                          shape, torch.float32)
            at = self.add("pw", "sub", [at, low[j]], shape, torch.float32)
            term = self.add("pw", "mul", [at, math.prod(ins[j + 1:])], shape, torch.float32)
            place = term if place is None else self.add("pw", "add", [place, term], shape, torch.float32)
            rest = up
        return self.add("pw", "cast", [place], shape, torch.int64, attrs={"dtype": torch.int64})


class _Later:
    """A value built where it is first read (a max pool's indices: most forwards never read them)."""

    def __init__(self, build):
        self.build = build


def _bound(target, args, kwargs) -> dict:
    """An ATen call's arguments by name, defaults filled in from its schema."""
    out = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args):
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        else:
            out[arg.name] = arg.default_value if arg.has_default_value() else None
    return out


def _per_dim(value, rank: int) -> tuple:
    """A pooling size argument (an int, or a list of one or `rank` ints; empty for a default) per dim."""
    value = (value,) if isinstance(value, int) else tuple(value)
    return value * rank if len(value) == 1 else value


from agent.templates import complex_ops  # noqa: E402 (it builds on this module's IR)
