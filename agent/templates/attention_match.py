"""Hand-written attention found in a lowered program: `softmax(q @ k^T * c [+ masks]) @ v` (the form
nn.MultiheadAttention with need_weights, PyTorch's math path and minGPT-style modules trace to) becomes one
attention node, so it runs as the flash-attention kernel instead of a GEMM, a softmax pass and a GEMM. Matched
over the IR:

    g1 = mm(q, kT)  [views keeping the last two dims]  x = g1 [* c] [masks]    (attention_mask.py)
    p  = exp(x - max(x, -1)) / sum(exp(x - max(x, -1)), -1)  [a safe softmax's where(max == -inf, 0, p)]
    g2 = mm(p [views], v)   ->   g2 = attention(q, kT seen as k, v, mask, causal, scale=c)

Only where no other node reads the scores or the probabilities (returned attention weights keep the
decomposition).

    nodes = fuse_attention(nodes, outputs, ModelState(traced, module))
"""
from __future__ import annotations

import math

from agent.templates.attention_mask import is_node, kernel_mask, scaled_query, score_terms, through_views
from agent.templates.ir import Leaf, Node, contiguous_strides


def _last_dim(r: Node) -> bool:
    x = r.args[0]
    return tuple(r.attrs["dims"]) == (len(x.shape) - 1,) and r.attrs.get("keepdim")


def _softmax_input(p, chain: list) -> tuple[object, bool]:
    """(x, whether safe) where p is softmax(x) over the last dim, plain or safe, else (None, False); matched nodes
    go to `chain`."""
    safe = None
    if is_node(p, "pw", "where", 3) and p.args[1] in (0, 0.0):  # rows of -inf give 0 (the kernel's answer too)
        cond = p.args[0]
        if not (is_node(cond, "pw", "eq", 2) and cond.args[1] == -math.inf and
                is_node(cond.args[0], "reduce", "max")):
            return None, False
        safe, p = [p, cond, cond.args[0]], p.args[2]
    if not is_node(p, "pw", "div", 2):
        return None, False
    e, s = p.args
    if not (is_node(e, "pw", "exp") and is_node(s, "reduce", "sum") and s.args[0] is e and _last_dim(s)):
        return None, False
    d = e.args[0]
    if not (is_node(d, "pw", "sub", 2) and d.attrs.get("alpha", 1) == 1 and
            is_node(d.args[1], "reduce", "max")):
        return None, False
    x, m = d.args
    if m.args[0] is not x or not _last_dim(m) or safe and (safe[2].args[0] is not x or not _last_dim(safe[2])):
        return None, False
    chain += [p, e, s, d, m] + (safe or [])
    return x, safe is not None


def _transposed(kt, name: str) -> tuple[object, Node | None]:
    """kT (N, D, L) seen as k (N, L, D): a leaf re-strided, or a strided view node (returned to insert)."""
    n, d, length = kt.shape
    if isinstance(kt, Leaf):
        strides = kt.strides[:-2] + (kt.strides[-1], kt.strides[-2])
        return Leaf(name, (n, length, d), kt.dtype, kind=kt.kind, base=kt.base, strides=strides,
                    offset=kt.offset, value=kt.value, step=kt.step), None
    cs = contiguous_strides(kt.shape)
    view = Node(name, (n, length, d), kt.dtype, op="view", fn="strided", args=[kt],
                attrs={"strides": (cs[0], cs[2], cs[1]), "offset": 0})
    return view, view


def _plain(value) -> bool:
    return not isinstance(value, Leaf) or (value.kind == "tensor" and not value.bounds)


def fuse_attention(nodes: list[Node], outputs: list, state=lambda base: None) -> list[Node]:
    """`nodes` (topological order) with each matched `softmax(q @ kT * c [+ masks]) @ v` GEMM turned into an
    attention node in place (the scores and softmax nodes then go dead), views of kT and the nodes computing
    its mask inserted before it. Nothing the forward returns is matched away. `state` gives the model's tensors
    by base, where the lowering may read a mask's values (attention_mask.ModelState)."""
    readers: dict = {o: [None] for o in outputs}
    for n in nodes:
        for a in n.inputs:
            readers.setdefault(a, []).append(n)
    out = []
    for g2 in nodes:
        chain: list = []
        if is_node(g2, "gemm", "mm") and len(g2.shape) == 3:
            x, safe = _softmax_input(through_views(g2.args[0], chain), chain)
            found = score_terms(x, chain) if x is not None else None
            inner = set(chain)
            if found and all(set(readers.get(c, [])) <= inner | {g2} for c in chain) and \
                    all(_plain(a) for a in (*found[0].args, g2.args[1])):
                g1, scale, terms = found
                mask = kernel_mask(terms, g1.dtype, state, g2.name)
                query = scaled_query(g1.args[0], terms, g2.name)
                if mask is not None and query is not None:
                    k, view = _transposed(g1.args[1], g2.name + "_k")
                    out += ([view] if view is not None else []) + mask.nodes + query[1]
                    g2.op, g2.fn, g2.args = "attention", "flash", [query[0], k, g2.args[1], mask.mask]
                    g2.attrs = {"causal": mask.causal, "scale": scale, "safe": safe}
                    if mask.batch is not None:
                        g2.attrs["mask_batch"] = mask.batch
        out.append(g2)
    return out
