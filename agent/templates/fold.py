"""Folding a selected row sum into the reading pass: a sum of where(cond, e, 0) whose `e` is affine in values
the row's earlier reductions produce, e = P + c1 * q1 + ..., with P, cond and each q free of reductions,
equals sum(where(cond, P, 0)) + c1 * sum(where(cond, q1, 0)) + ...: sums the first pass can carry. Cross-entropy
picks its target's log-probability x[t] - max - log(sum(exp(x - max))) this way, so with online softmax the
loss reads each logit once instead of a second time for the target.

    kernel = fold_sums(kernel)   # the same kernel when nothing folds
"""
from __future__ import annotations

from agent.templates.ir import Leaf, Node, Value
from agent.templates.schedule import Kernel


def foldable(kernel: Kernel) -> list[Node]:
    """The sum reductions of `kernel` that fold (see the module docstring)."""
    return [r for r in kernel.nodes if _fold(kernel, r) is not None]


def fold_sums(kernel: Kernel) -> Kernel:
    """A copy of `kernel` where each foldable sum r is replaced by sums of reduction-free terms and a red-level
    node combining them; the members that read r read that node."""
    swap: dict[Node, Node] = {}
    nodes, level, stores = [], {}, {}
    for m in kernel.nodes:
        parts = _fold(kernel, m)
        if parts is not None:
            sums = [Node(f"{m.name}_f{i}", m.shape, m.dtype, op="reduce", fn="sum", args=[e], attrs=dict(m.attrs))
                    for i, e in enumerate([parts[0]] + [q for _, q in parts[1]])]
            made = sums + [x for cs, _ in parts[1] for c in cs for x in _made(kernel, c)]  # sums of coefficients too
            new = sums[0]
            for (cs, _), s in zip(parts[1], sums[1:]):
                for c in cs:
                    prod = Node(f"{m.name}_c{len(made)}", m.shape, m.dtype, op="pw", fn="mul", args=[c, s])
                    new = Node(f"{m.name}_a{len(made)}", m.shape, m.dtype, op="pw", fn="add", args=[new, prod])
                    made += [prod, new]
            for x in made[:-1]:
                nodes.append(x)
                level[x] = "red"
        elif any(a in swap for a in m.args):
            new = Node(m.name, m.shape, m.dtype, op=m.op, fn=m.fn, args=[swap.get(a, a) for a in m.args],
                       attrs=m.attrs)
        else:
            new = m
        if new is not m:
            swap[m] = new
        nodes.append(new)
        level[new] = kernel.level[m]
        if m in kernel.stores:
            stores[new] = kernel.stores[m]
    if not swap:
        return kernel
    return Kernel(kernel.kind, kernel.domain, kernel.rdims, nodes, level, stores, kernel.scan_reverse,
                  {swap.get(m, m): c for m, c in kernel.store_when.items()})


def _fold(kernel: Kernel, r) -> tuple[Value, list[tuple[list, Value]]] | None:
    """(where(cond, P, 0), [([c, ...], where(cond, q, 0)), ...]) for a foldable sum r, else None: the coefficients
    of each q, in the order the terms came."""
    if not (isinstance(r, Node) and r.op == "reduce" and r.fn == "sum" and kernel.level.get(r) == "red"):
        return None
    w = r.args[0]
    if not (isinstance(w, Node) and w.op == "pw" and w.fn == "where" and is_zero(w.args[2])):
        return None
    cond, e = w.args[0], w.args[1]
    if reads_reduction(kernel, cond) or not reads_reduction(kernel, e):
        return None
    parts = _affine(kernel, e)
    if parts is None:
        return None
    p, terms = parts
    # terms of one q share its sum, each coefficient still added in turn: cross-entropy's x[t] - max - log(sum) as
    # (x[t] - max) - log(sum), exact where max is far larger than the loss (max + log(sum) first rounded it away)
    by_q: dict = {}
    for c, q in terms:
        by_q.setdefault(q if isinstance(q, float) else id(q), ([], q))[0].append(c)

    def pick(v, name):
        return Node(name, w.shape, w.dtype, op="pw", fn="where", args=[cond, v, w.args[2]])
    return pick(p, r.name + "_p"), [(cs, pick(q, f"{r.name}_q{i}")) for i, (cs, q) in enumerate(by_q.values())]


def _affine(kernel: Kernel, v):
    """v as (P, [(c, q), ...]) meaning P + c1 * q1 + ...: each c a red-level member (or a sum of them), P and
    each q (a Value or a float) free of the kernel's reductions; None where v is not of that form."""
    if not reads_reduction(kernel, v):
        return v, []
    if kernel.level.get(v) == "red":
        return 0.0, [(v, 1.0)]
    if not isinstance(v, Node) or v.op != "pw":
        return None
    args = v.args
    if v.fn in ("add", "sub") and len(args) == 2 and v.attrs.get("alpha", 1) == 1:
        a, b = _affine(kernel, args[0]), _affine(kernel, args[1])
        if a is None or b is None:
            return None
        sign = 1.0 if v.fn == "add" else -1.0
        p = _pw(v.fn, a[0], b[0], like=v)
        return p, a[1] + [(c, _scale(q, sign, v)) for c, q in b[1]]
    if v.fn == "neg":
        a = _affine(kernel, args[0])
        return None if a is None else (_scale(a[0], -1.0, v), [(c, _scale(q, -1.0, v)) for c, q in a[1]])
    if v.fn == "mul" and len(args) == 2:
        free = [x for x in args if not reads_reduction(kernel, x)]
        if len(free) != 1:
            return None
        a = _affine(kernel, args[1] if free[0] is args[0] else args[0])
        k = free[0]
        return None if a is None else (_scale(a[0], k, v), [(c, _scale(q, k, v)) for c, q in a[1]])
    return None


def _made(kernel: Kernel, c) -> list[Node]:
    """The nodes of a coefficient that the fold made (sums of members), operands first."""
    if not isinstance(c, Node) or c in kernel.level:
        return []
    return [x for a in c.args for x in _made(kernel, a)] + [c]


def reads_reduction(kernel: Kernel, v, seen: dict | None = None) -> bool:
    seen = {} if seen is None else seen
    if not isinstance(v, Node):
        return False
    if id(v) not in seen:
        seen[id(v)] = v.op == "reduce" and v in kernel.level or any(reads_reduction(kernel, a, seen) for a in v.args)
    return seen[id(v)]


def is_zero(v) -> bool:
    return v == 0 if isinstance(v, (int, float)) and not isinstance(v, bool) else \
        isinstance(v, Leaf) and v.kind == "const" and v.value == 0


def _pw(fn: str, a, b, like):
    """a fn b, folding the float zeros the decomposition produces."""
    if fn == "add" and isinstance(b, float) and b == 0.0 or fn == "sub" and isinstance(b, float) and b == 0.0:
        return a
    if fn == "add" and isinstance(a, float) and a == 0.0:
        return b
    if fn == "sub" and isinstance(a, float) and a == 0.0:
        return _scale(b, -1.0, like)
    if isinstance(a, float) and isinstance(b, float):
        return a + b if fn == "add" else a - b
    return Node(f"{like.name}_{fn}", like.shape, like.dtype, op="pw", fn=fn, args=[a, b])


def _scale(v, k, like):
    if isinstance(v, float) and isinstance(k, float):
        return v * k
    if isinstance(v, float) and v == 0.0:
        return 0.0
    if isinstance(k, float) and k == 1.0:
        return v
    if isinstance(k, float) and k == -1.0 and not isinstance(v, float):
        return Node(f"{like.name}_neg", like.shape, like.dtype, op="pw", fn="neg", args=[v])
    return Node(f"{like.name}_mul", like.shape, like.dtype, op="pw", fn="mul", args=[v, k])
