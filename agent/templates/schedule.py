"""Grouping a Program's nodes into kernels.

A tile kernel has a domain D (a shape) and reduced dims (none for a flat, pointwise-only kernel). Each node
in it is either "full" (numel(D) elements in D's linear order) or "red" (one element per position of D with
the reduced dims removed). Nodes join the current kernel while they fit these levels; anything else starts
a new kernel, and values crossing kernels are stored to a buffer and read back as leaves over it (so any
view or broadcast of them is just strides). Pointwise nodes of leaves alone are never scheduled: every
kernel that reads one recomputes it at its own positions (broadcasting included), so a chain of broadcast
operands costs no buffer; one that is returned is stored by a kernel over its shape that computes it at every
element anyway (`reader`), else by a flat kernel of its own. A GEMM kernel takes a pointwise epilogue over its
output, and a convolution's kernel whose tiles hold every output channel (`channels`) a reduction over them
too; a "torch_gemm" kernel is a vendor GEMM run on the host, its epilogue a Triton kernel reading its buffer.
A piece of a cat that a kernel of its own computes, read by nothing else, is stored straight into its place in
the cat's buffer (cat_in_place): the cat's kernel then stores only its other positions. An output that is a
reshape of a computed value's whole buffer, read by nothing else (an einsum's GEMM output as the 4-D result),
takes that buffer as its own, and the forward returns a view of it, not a copy (`views`; off under dynamic shapes).

    kernels, buffers = schedule(program, split_k=1)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from agent.templates.ir import Leaf, Node, Program, Unsupported, Value, contiguous_strides, restride, shift


@dataclass(eq=False)
class Kernel:
    kind: str  # "tile", "gemm", "torch_gemm", "rnn" (a recurrent layer, stepped over time by the host), "attention",
    # "scatter" (a flat kernel over a scatter's values, storing each at its indices' place in the target's buffer)
    domain: tuple
    rdims: tuple = ()
    nodes: list = field(default_factory=list)  # copies of the program's nodes, args resolved to leaves/members
    level: dict = field(default_factory=dict)  # member node -> "full" | "red"
    stores: dict = field(default_factory=dict)  # member node -> buffer name, or a Leaf: its place in another buffer
    scan_reverse: bool | None = None
    store_when: dict = field(default_factory=dict)  # member node -> a bool value: stored only where it holds
    box: tuple | None = None  # (start, shape): the only part of the domain a flat kernel stores (cat_in_place)

    @property
    def layout(self) -> str:
        if self.kind in ("gemm", "torch_gemm", "rnn", "attention", "scatter"):
            return {"gemm": "gemm", "torch_gemm": "torch", "rnn": "rnn", "attention": "attention",
                    "scatter": "flat"}[self.kind]
        if not self.rdims:
            return "plane" if self.has_window and len(self.domain) >= 3 else "flat"
        inner = [k for k in range(len(self.domain)) if self.domain[k] > 1]
        return "row" if not inner or inner[-1] in self.rdims or max(self.rdims) > inner[-1] else "col"

    @property
    def red_numel(self) -> int:
        return math.prod(self.domain) // max(1, math.prod(self.domain[k] for k in self.rdims))

    @property
    def keep_shape(self) -> tuple:
        return tuple(1 if k in self.rdims else s for k, s in enumerate(self.domain))

    @property
    def writes_elements(self) -> bool:
        """Whether the kernel stores a per-element output (a member at level "full"), not only per-row values."""
        return any(self.level[m] == "full" for m in self.stores)

    @property
    def has_window(self) -> bool:
        return any(n.op == "window" for n in self.nodes)

    def depends_on_scan(self, node) -> bool:
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if n.op == "scan":
                return True
            for a in n.inputs:
                if isinstance(a, Node) and a not in seen:
                    seen.add(a)
                    stack.append(a)
        return False


def squeezed(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


def _pad(shape, rank) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


def view_strides(node: Node) -> tuple[tuple, int]:
    """The strides/offset of a view node relative to its source laid out contiguously."""
    src = node.args[0]
    if node.fn == "reshape":
        return contiguous_strides(node.shape), 0
    if node.fn == "expand":
        cs = _pad(contiguous_strides(src.shape), len(node.shape))
        padded = _pad(src.shape, len(node.shape))
        return tuple(0 if padded[j] != node.shape[j] or padded[j] == 1 else cs[j] for j in range(len(node.shape))), 0
    if node.fn == "flip":
        cs = contiguous_strides(src.shape)
        dims = node.attrs["dims"]
        return (tuple(-s if j in dims else s for j, s in enumerate(cs)),
                sum((src.shape[d] - 1) * cs[d] for d in dims))
    return node.attrs["strides"], node.attrs["offset"]


class _Scheduler:
    def __init__(self, program: Program, split_k: int, torch_gemm: bool, channels: int = 0, views: bool = True):
        self.p = program
        self.views = views  # an output that reshapes a buffer whole is returned as a view of it (reshaped)
        self.split_k = split_k
        self.torch_gemm = torch_gemm
        self.channels = channels  # the most output channels a convolution's tile holds whole (channel_reduction)
        self.kernels: list[Kernel] = []
        self.home: dict = {}  # program node -> (kernel, member copy)
        self.leaves: dict = {}  # program node -> Leaf over its buffer
        self.buffers: dict = {}  # program node -> buffer name
        self.inline: set = set()  # pointwise nodes of leaves only: recomputed wherever they are read
        self.uses: dict = {}  # program node -> how many nodes read it
        for n in program.nodes:
            for a in n.inputs:
                self.uses[a] = self.uses.get(a, 0) + 1
        self.count = 0

    def run(self) -> tuple[list[Kernel], dict]:
        for n in self.p.nodes:
            self.place(n)
        final: dict[int, Kernel] = {}  # pointwise outputs share one flat kernel per element count
        for out in self.p.outputs:
            if out in self.home:
                self.store(out)
            elif out in self.inline and (k := self.reader(out)) is not None:  # stored where it is computed
                self.join(k, self.member(out, k), out, "full")
                self.store(out)
            elif out in self.inline:
                k = final.get(out.numel)
                if k is None:
                    k = final[out.numel] = Kernel("tile", out.shape)
                    self.kernels.append(k)
                self.join(k, self.member(out, k), out, "full")
                self.store(out)
            elif self.views and (src := self.reshaped(out)) is not None:  # the buffer it reshapes is its own
                self.buffers[out] = self.buffers[src]
            else:  # a view computed as a leaf: copy it out with its own kernel
                leaf = self.leaves[out]
                k = Kernel("tile", out.shape)
                copy = Node(out.name + "_copy", out.shape, out.dtype, op="pw", fn="cast", args=[leaf],
                            attrs={"dtype": out.dtype})
                self.join(k, copy, out, "full", new=True)
                self.store(out)
        for n in list(self.buffers):
            if isinstance(n, Node) and n.attrs.get("cat"):
                self.cat_in_place(n)
        return self.kernels, self.buffers

    def reader(self, out: Node) -> Kernel | None:
        """A tile kernel over `out`'s shape that computes `out` (pointwise of leaves) at each of its elements: it
        stores `out` too, where a flat kernel of its own would read its leaves again. A decoder layer's residual
        add and RMSNorm, h = x + residual returned beside the norm of h, read x and residual twice so: 6 tensors'
        bytes against 4."""
        for k in self.kernels:
            if k.kind != "tile" or tuple(k.domain) != tuple(out.shape) or k.box or k.store_when or k.has_window:
                continue
            stack = [a for m in k.nodes if k.level[m] == "full" or m.op == "reduce" for a in m.args]
            while stack:
                a = stack.pop()
                if a is out:
                    return k
                if isinstance(a, Node) and a.op == "pw" and a in self.inline:
                    stack += a.args
        return None

    def reshaped(self, out: Node) -> Node | None:
        """The stored node whose whole buffer output `out`, a chain of views each read once, reads in its own
        order (a reshape of it), or None. On an H200, level 1's 11_4D_tensor_matrix_multiplication copied its
        GEMM's 3.2 GB output into the 4-D result in about 1.5 ms of its 6.7."""
        src, leaf = out, self.leaves[out]
        while isinstance(src, Node) and src.op == "view":
            src = src.args[0]
            if self.uses.get(src) != 1:
                return None
        if src in self.p.outputs or self.buffers.get(src) != leaf.base or src.dtype != out.dtype:
            return None
        order = [(n, s) for n, s in zip(out.shape, leaf.strides) if n > 1]  # a dim of one has any stride
        whole = [(n, s) for n, s in zip(out.shape, contiguous_strides(out.shape)) if n > 1]
        return src if leaf.kind == "tensor" and not leaf.bounds and leaf.offset == 0 and src.numel == out.numel \
            and order == whole else None

    def cat_in_place(self, cat: Node) -> None:
        """The pieces of a cat that a kernel of their own computes, read by the cat alone, are stored by that
        kernel straight into their place in the cat's buffer; the cat's kernel stores only the rest. On an H200
        the exclusive cumsum (the cat of a zero column and a scan) took 4.2 ms as a scan then a copy."""
        kc, top = self.home[cat]
        if kc.kind != "tile" or kc.rdims or kc.stores.get(top) != self.buffers[cat]:
            return
        chain, stack = [], [cat]  # the where chain (its members in the cat's kernel) and its pieces
        while stack:
            w = stack.pop()
            chain.append(w)
            stack += [a for a in w.args[1:] if isinstance(a, Node) and a.op == "pw" and a.fn == "where"]
        members = {id(self.home[w][1]) for w in chain if w in self.home and self.home[w][0] is kc}
        if len(members) != len(chain):
            return
        outside, placed = None, []  # placed: (dim, start, stop) of each piece written in place
        for w in chain:
            for sv in w.args[1:]:
                if not (isinstance(sv, Node) and sv.op == "view" and sv.fn == "shift" and sv in self.leaves):
                    continue
                v = sv.args[0]
                home = self.home.get(v)
                if home is None or home[0] is kc or home[0].kind != "tile" or home[0].level[home[1]] != "full" or \
                        tuple(v.shape) != home[0].domain or home[0].stores.get(home[1]) != self.buffers.get(v) or \
                        self.uses.get(v) != 1 or self.uses.get(sv) != 1 or v in self.p.outputs:
                    continue
                lo = sv.attrs["lo"]
                cs = contiguous_strides(cat.shape)
                home[0].stores[home[1]] = Leaf(v.name + "_in", v.shape, v.dtype, base=self.buffers[cat], strides=cs,
                                               offset=sum(a * b for a, b in zip(lo, cs)))
                del self.buffers[v]
                member = self.home[w][1]  # reads the piece no more: 0 there, never stored
                member.args = [Leaf(sv.name + "_0", sv.shape, sv.dtype, kind="const", value=0)
                               if a is self.leaves[sv] else a for a in member.args]
                for d, (start, n) in enumerate(zip(lo, v.shape)):
                    if n == cat.shape[d]:
                        continue
                    placed.append((d, start, start + n))
                    index = Leaf(f"{sv.name}_i{d}", cat.shape, torch.int64, kind="iota", value=0, step=1,
                                 strides=tuple(1 if j == d else 0 for j in range(len(cat.shape))))
                    out = _pw("logical_or", _pw("lt", index, start), _pw("ge", index, start + n))
                    outside = out if outside is None else _pw("logical_and", outside, out)
        if outside is not None:
            kc.store_when[top] = outside
            kc.box = _rest(cat.shape, placed)


    # --- values across kernels ---------------------------------------------------------------------
    def store(self, node: Node) -> str:
        kernel, member = self.home[node]
        if node not in self.buffers:
            self.buffers[node] = f"buf_{node.name}"
        kernel.stores[member] = self.buffers[node]
        return self.buffers[node]

    def leaf(self, value: Value) -> Leaf:
        """`value` read from memory: a leaf as is, a computed node from its buffer."""
        if isinstance(value, Leaf):
            return value
        if value in self.leaves:
            return self.leaves[value]
        if value in self.inline and value not in self.home and value.op != "view":  # computed once, ahead of all
            k = Kernel("tile", value.shape)
            self.kernels.insert(0, k)
            self.join(k, self.member(value, k), value, "full")
        if value.op == "view":  # read the source's buffer through the view's strides
            leaf = self.view_leaf(value, value.name + "_m")
        else:
            leaf = Leaf(value.name + "_m", value.shape, value.dtype, base=self.store(value),
                        strides=contiguous_strides(value.shape))
        self.leaves[value] = leaf
        return leaf

    def view_leaf(self, n: Node, name: str) -> Leaf:
        """A view node read from memory: its source's leaf seen through the view (a "shift" view places it at
        an offset, its loads masked outside it). A view that no strides express over the source's leaf (a
        reshape of a transpose) reads a contiguous copy of the source instead."""
        src = self.leaf(n.args[0])
        if n.fn == "shift":
            return shift(src, name, n.shape, n.attrs["lo"])
        layout = restride(src, n.shape, *view_strides(n))
        if layout is None:
            src = self.copy(n.args[0], src)
            layout = restride(src, n.shape, *view_strides(n))
        return Leaf(name, n.shape, n.dtype, base=src.base, strides=layout[0], offset=layout[1], kind=src.kind,
                    value=src.value, step=src.step)

    def copy(self, value: Value, leaf: Leaf) -> Leaf:
        """`value`, read through `leaf`, copied by a flat kernel of its own into a contiguous buffer."""
        node = Node(value.name + "_c", value.shape, value.dtype, op="pw", fn="cast", args=[leaf],
                    attrs={"dtype": value.dtype})
        self.join(Kernel("tile", value.shape), node, node, "full", new=True)
        return Leaf(node.name + "_m", node.shape, node.dtype, base=self.store(node),
                    strides=contiguous_strides(node.shape))

    def resolve(self, value, kernel: Kernel, consumer: Node | None = None):
        """An argument as seen from inside `kernel`: a member, a leaf, or a python scalar."""
        if not isinstance(value, Value):
            return value
        if isinstance(value, Node) and value in self.home and self.home[value][0] is kernel:
            return self.home[value][1]
        if value in self.inline and value not in self.home and (value.op != "view" or consumer is None or
                                                                value.numel == consumer.numel):
            return value
        return self.leaf(value)

    def join(self, kernel: Kernel, member: Node, original: Node, level: str, new: bool = False) -> None:
        if new:
            self.kernels.append(kernel)
        kernel.nodes.append(member)
        kernel.level[member] = level
        self.home[original] = (kernel, member)

    def member(self, node: Node, kernel: Kernel, **changes) -> Node:
        attrs = dict(node.attrs)
        attrs.update(changes.pop("attrs", {}))
        args = [self.resolve(a, kernel, node if node.op == "pw" else None) for a in node.args]
        if node.fn == "gather":  # an indexed load reads its source from memory
            args[0] = self.leaf(node.args[0])
        return Node(node.name, changes.pop("shape", node.shape), node.dtype, op=node.op, fn=node.fn, args=args,
                    attrs=attrs)

    # --- placement ---------------------------------------------------------------------------------
    def current(self) -> Kernel | None:
        return self.kernels[-1] if self.kernels else None

    def inside(self, value, kernel) -> bool:
        return isinstance(value, Node) and value in self.home and self.home[value][0] is kernel

    def inlinable(self, a, consumer: Node) -> bool:
        """A pointwise value of leaves, or a reshape of one, read at the consumer's element count."""
        return isinstance(a, Leaf) or a in self.inline and (a.op != "view" or a.numel == consumer.numel)

    def vendor_bias(self, n: Node) -> bool:
        """Folds a Linear's own bias (an add marked vendor_bias) into the vendor GEMM computing its product, as
        torch.addmm's bias: cuBLAS adds it in its epilogue and rounds once, where PyTorch does (an add after a
        rounded product was off at 54 of 8.4M elements of a bf16 Linear + batch norm). A convolution's bias stays
        in the Triton epilogue: PyTorch adds it in a pass of its own over the output (fp32 conv + ReLU + HardSwish
        on an H200: 1.31 ms with the bias handed to the convolution, 0.91 ms without). True where it folded; the
        product then has no buffer of its own."""
        if not (self.torch_gemm and n.op == "pw" and n.attrs.get("vendor_bias")):
            return False
        g, bias = n.args
        home = self.home.get(g)
        if home is None or home[0].kind != "torch_gemm" or self.uses.get(g) != 1 or g in self.p.outputs or \
                g in self.leaves or not isinstance(bias, Leaf) or bias.kind != "tensor" or bias.offset != 0:
            return False
        base = self.p.bases.get(bias.base)  # the whole parameter, handed to the vendor op as it is
        if base is None or base.shape != (math.prod(bias.shape),) or sorted(set(bias.strides)) not in ([1], [0, 1]) \
                or g.fn == "conv" or len(g.shape) != 2:
            return False
        home[1].attrs["bias"] = bias.base
        self.home[n] = self.home.pop(g)
        self.buffers[n] = self.buffers.pop(g)
        return True

    def place(self, n: Node) -> None:
        if self.vendor_bias(n):
            return
        # indexed and masked loads (gathers, pieces of a cat or a pad) are computed once, never recomputed inline
        plain = n.fn != "gather" and not any(isinstance(a, Leaf) and a.bounds for a in n.args)
        if n.op == "pw" and plain and all(self.inlinable(a, n) for a in n.inputs) or \
                n.op == "view" and n.fn == "reshape" and n.args[0] in self.inline:
            self.inline.add(n)
            return
        if n.fn == "gather":
            self.leaf(n.args[0])  # its source in memory, before this kernel (the check below)
        k = self.current()
        if k is not None and any(a in self.leaves and self.leaves[a].base in k.stores.values() for a in n.inputs):
            k = None  # never read, in a kernel, a buffer that the same kernel writes
        if n.op == "view":
            src = n.args[0]
            level = self.view_level(k, n) if k is not None and self.inside(src, k) else None
            if level is None:
                self.leaves[n] = self.view_leaf(n, n.name + "_v")
            else:
                self.join(k, self.member(n, k), n, level)
            return
        if n.op == "gemm":  # a matrix product (fn "mm") or an implicit-GEMM convolution (fn "conv")
            args = [self.leaf(a) for a in n.args]
            if self.torch_gemm:  # a vendor GEMM or convolution on the host; the epilogue reads its buffer
                k = Kernel("torch_gemm", n.shape)
                self.join(k, Node(n.name, n.shape, n.dtype, op="gemm", fn=n.fn, args=args, attrs=dict(n.attrs)),
                          n, "full", new=True)
                self.store(n)
                return
            if self.split_k > 1 and n.fn == "mm":
                k = Kernel("gemm", (self.split_k,) + n.shape)
                part = Node(n.name + "_part", k.domain, n.dtype, op="gemm", fn="mm", args=args,
                            attrs={"split_k": self.split_k})
                k.nodes.append(part)
                k.level[part] = "full"
                self.kernels.append(k)
                self.home[part] = (k, part)
                self.buffers[part] = f"buf_{part.name}"
                k.stores[part] = self.buffers[part]
                tile = Kernel("tile", k.domain, rdims=(0,))
                red = Node(n.name, n.shape, n.dtype, op="reduce", fn="sum", args=[self.leaf(part)],
                           attrs={"dims": (0,), "keepdim": False})
                self.join(tile, red, n, "red", new=True)
                return
            k = Kernel("gemm", n.shape)
            self.join(k, Node(n.name, n.shape, n.dtype, op="gemm", fn=n.fn, args=args, attrs=dict(n.attrs)), n,
                      "full", new=True)
            return
        if n.op in ("rnn", "attention"):  # a recurrent layer (its final states in buffers of its own), attention
            k = Kernel(n.op, n.shape)
            args = [self.leaf(a) if isinstance(a, Value) else a for a in n.args]
            self.join(k, Node(n.name, n.shape, n.dtype, op="rnn", fn=n.fn, args=args, attrs=dict(n.attrs)), n,
                      "full", new=True)
            self.store(n)
            return
        if n.op == "rnn_state":  # h_n or c_n: read from the recurrent kernel's state buffer
            self.leaves[n] = Leaf(n.name + "_s", n.shape, n.dtype, base=f"{self.store(n.args[0])}_{n.fn}",
                                  strides=contiguous_strides(n.shape))
            return
        if n.op == "scatter":  # the target copied into a buffer, then each value stored or added at its place
            init = Node(n.name + "_init", n.shape, n.dtype, op="pw", fn="cast", args=[self.leaf(n.args[0])],
                        attrs={"dtype": n.dtype})
            self.join(Kernel("tile", n.shape), init, init, "full", new=True)
            self.buffers[n] = self.store(init)
            k = Kernel("scatter", tuple(n.attrs["domain"]))
            member = Node(n.name, k.domain, n.dtype, op="scatter", fn=n.fn, args=[None] + [
                self.resolve(a, k, None) for a in n.args[1:]], attrs={**n.attrs, "shape": tuple(n.shape)})
            self.join(k, member, n, "full", new=True)
            self.store(n)
            return
        if n.op == "window":
            k = Kernel("tile", n.shape)
            self.join(k, self.member(n, k), n, "full", new=True)
            return
        if n.op in ("reduce", "scan"):
            self.place_reduction(n, k)
            return
        level = self.pointwise_level(k, n) if k is not None else None
        if level is None:
            k = Kernel("tile", n.shape)
            self.join(k, self.member(n, k), n, "full", new=True)
        else:
            self.join(k, self.member(n, k), n, level)

    def place_reduction(self, n: Node, k: Kernel | None) -> None:
        x, dims = n.args[0], tuple(n.attrs["dims"])
        level = "red" if n.op == "reduce" else "full"
        if self.channel_reduction(n, k):
            k.rdims = dims
            return self.join_reduction(k, n, level)
        if k is not None and k.kind == "tile":
            full_input = (not self.inside(x, k) and x.numel == math.prod(k.domain)) or \
                         (self.inside(x, k) and k.level[self.home[x][1]] == "full")
            scan_ok = n.op == "reduce" or (k.scan_reverse in (None, n.attrs["reverse"]) and
                                           (k.rdims == dims or not k.rdims))
            after_scan = self.inside(x, k) and k.depends_on_scan(self.home[x][1])
            if full_input and scan_ok and not after_scan:
                if not k.rdims and x.shape == k.domain or not k.rdims and not k.has_window and \
                        x.numel == math.prod(k.domain):
                    k.domain, k.rdims = tuple(x.shape), dims
                    return self.join_reduction(k, n, level)
                if k.rdims == dims and tuple(x.shape) == k.domain:
                    return self.join_reduction(k, n, level)
                if n.op == "reduce" and k.rdims and set(k.rdims) < set(dims) and tuple(x.shape) == k.domain \
                        and n.fn in ("sum", "max", "min", "prod"):
                    inner = Node(n.name + "_in", k.keep_shape, n.dtype, op="reduce", fn=n.fn, args=[x],
                                 attrs={"dims": k.rdims, "keepdim": True})
                    self.join_reduction(k, inner, "red")
                    outer = Node(n.name, n.shape, n.dtype, op="reduce", fn=n.fn, args=[inner],
                                 attrs={"dims": dims, "keepdim": n.attrs["keepdim"]})
                    self.place_reduction(outer, None)
                    self.home[n] = self.home[outer]
                    return
        k = Kernel("tile", tuple(x.shape), rdims=dims)
        self.kernels.append(k)
        self.join_reduction(k, n, level)

    def channel_reduction(self, n: Node, k: Kernel | None) -> bool:
        """Whether reduction n over a convolution's channels joins its kernel: the convolution's output (or a
        value of its epilogue) reduced over dim 1 alone, one group, its output channels within what a tile holds
        whole (`channels`), so that each tile reduces its own positions' channels in registers."""
        if k is None or k.kind != "gemm" or not self.channels or n.op != "reduce" or n.fn not in ("sum", "max", "min"):
            return False
        g, x = k.nodes[0], n.args[0]
        return g.fn == "conv" and g.attrs["groups"] == 1 and tuple(n.attrs["dims"]) == (1,) and \
            k.rdims in ((), (1,)) and self.inside(x, k) and k.level[self.home[x][1]] == "full" and \
            tuple(x.shape) == k.domain and k.domain[1] <= self.channels and not g.attrs.get("split_k")

    def join_reduction(self, k: Kernel, n: Node, level: str) -> None:
        if n.op == "scan":
            k.scan_reverse = n.attrs["reverse"]
        self.join(k, self.member(n, k), n, level)

    def pointwise_level(self, k: Kernel, n: Node) -> str | None:
        members = [self.home[a][1] for a in n.inputs if self.inside(a, k)]
        if k.kind in ("torch_gemm", "rnn", "attention", "scatter"):
            return None
        if k.kind == "gemm" and k.rdims:  # a reduction over its channels joined (channel_reduction)
            return self.reduced_level(k, n, members)
        if k.kind == "gemm":
            ok = n.shape == k.domain and all(k.level[m] == "full" for m in members)
            return "full" if ok and (members or n.numel == math.prod(k.domain)) and not k.nodes[0].attrs.get(
                "split_k") else None
        return self.reduced_level(k, n, members)

    def reduced_level(self, k: Kernel, n: Node, members: list) -> str | None:
        """A pointwise node's level in a kernel with reductions: full (a reduced value broadcast back over the
        reduced dims), red (over reduced values alone), or None (another kernel)."""
        full = math.prod(k.domain)
        if n.numel == full:
            for m in members:
                if k.level[m] == "red" and not (tuple(n.shape) == k.domain and _pad(m.shape, len(n.shape)) == k.keep_shape):
                    return None
                if k.level[m] == "full" and squeezed(m.shape) != squeezed(n.shape):
                    return None
            return "full"
        if k.rdims and n.numel == k.red_numel and all(k.level[m] == "red" for m in members):
            if all(squeezed(m.shape) == squeezed(n.shape) for m in members):
                return "red"
        return None

    def view_level(self, k: Kernel, n: Node) -> str | None:
        if k.kind in ("rnn", "attention", "scatter"):
            return None
        src = self.home[n.args[0]][1]
        level = k.level[src]
        if n.fn == "reshape":
            return level
        if n.fn == "expand" and level == "red" and tuple(n.shape) == k.domain and \
                _pad(src.shape, len(n.shape)) == k.keep_shape:
            return "full"
        if n.fn == "expand" and level == "full" and n.numel == src.numel:
            return "full"
        return None


def schedule(program: Program, split_k: int = 1, torch_gemm: bool = False, channels: int = 0, views: bool = True
             ) -> tuple[list[Kernel], dict]:
    """Kernels in launch order, and the buffer name of every stored program node. split_k > 1 splits each
    GEMM's K loop over that many programs; torch_gemm leaves GEMMs to torch.mm/bmm (epilogues stay Triton);
    a convolution of at most `channels` output channels takes a reduction over them (channel_reduction); with
    `views` an output reshaping a buffer whole shares its name (the forward returns it reshaped)."""
    if not program.nodes:
        raise Unsupported("The forward computes nothing.")
    return _Scheduler(program, split_k, torch_gemm, channels, views).run()



def _rest(shape: tuple, placed: list) -> tuple | None:
    """The box of `shape` that pieces placed along one dim leave, as (start, shape), where it is one box: the
    zero column of an exclusive cumsum is 1 of 32768 columns, and its kernel need not span the other 32767."""
    dims = {d for d, _, _ in placed}
    if len(dims) != 1:
        return None
    d, gaps, at = dims.pop(), [], 0
    for a, b in sorted((a, b) for _, a, b in placed):
        gaps += [(at, a)] if a > at else []
        at = max(at, b)
    gaps += [(at, shape[d])] if at < shape[d] else []
    if len(gaps) != 1:
        return None
    (a, b), = gaps
    return tuple(a if j == d else 0 for j in range(len(shape))), tuple(b - a if j == d else n for j, n in enumerate(shape))


def _pw(fn: str, a, b) -> Node:
    """A boolean pointwise node over a, b (an index leaf and a bound, or two such nodes)."""
    return Node(f"{fn}_{getattr(a, 'name', a)}", a.shape, torch.bool, op="pw", fn=fn, args=[a, b])

