"""Complex numbers as pairs of reals. A complex tensor of shape S is held as a real one of shape S + (2,), real
part then imaginary part, which is how its memory is laid out: view_as_complex and view_as_real are the pair
itself, a complex buffer is read through a real view of it (torch.view_as_real on the host), views take a last
dim of 2, and arithmetic is spelled out on the parts. This covers rotary embeddings written with complex
products (a query's pairs times a buffer of unit complex numbers). A complex input or output is refused."""
from __future__ import annotations

import torch

from agent.templates.ir import Node, Unsupported, Value, aten

PAIR_VIEWS = {"view", "_unsafe_view", "reshape", "expand", "slice", "select", "unsqueeze", "squeeze",
              "permute", "transpose", "t", "alias"}  # views of a complex tensor, replayed on its pairs
SAME = {"view_as_complex", "view_as_real", "clone", "detach", "alias", "lift_fresh", "lift_fresh_copy",
        "resolve_conj", "contiguous"}  # the pair as it is (a conjugate is negated where it is taken)


def is_complex(node) -> bool:
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    vals = v if isinstance(v, (tuple, list)) else [v]
    return any(isinstance(t, torch.Tensor) and t.is_complex() for t in vals)


def pair_meta(v: torch.Tensor) -> torch.Tensor:
    """The meta tensor of a complex value's pair."""
    return torch.empty(tuple(v.shape) + (2,), dtype=v.dtype.to_real(), device="meta")


def call(b, node, base: str, args: list, kwargs: dict, v):
    """The value (a pair, or a real tensor) of the fx node `node`, an op that reads or makes a complex tensor,
    built by the IR builder `b` (ir._Builder); args as the builder resolved them, complex ones as pairs."""
    fx_args = list(node.args)
    if base in ("_conj", "conj_physical", "conj"):
        re, im = _parts(b, args[0])
        return _pair(b, re, _neg(b, im), v)
    if base in SAME or base == "_to_copy" and v.dtype == args[0].dtype.to_complex():
        return args[0]
    if base in PAIR_VIEWS:
        return b.view(node.target, base, [args[0], *_pair_view_args(base, fx_args, args, v)], {}, pair_meta(v))
    if base in ("real", "imag"):
        return b.viewed(aten.select.int, "select", args[0], len(args[0].shape) - 1, int(base == "imag"))
    if base in ("add", "sub", "mul", "div") and len(args) == 2:
        return _arith(b, base, args, [is_complex(a) for a in fx_args], kwargs, v)
    if base == "rsub" and len(args) == 2:  # 1 - z
        return _arith(b, "sub", args[::-1], [is_complex(a) for a in fx_args[::-1]], kwargs, v)
    if base == "polar":
        r, theta = args
        return _pair(b, _pw(b, "mul", r, _pw(b, "cos", theta)), _pw(b, "mul", r, _pw(b, "sin", theta)), v)
    if base == "complex":
        return _pair(b, args[0], args[1], v)
    if base == "abs":
        return _pw(b, "hypot", *_parts(b, args[0]))
    if base == "exp":
        re, im = _parts(b, args[0])
        scale = _pw(b, "exp", re)
        return _pair(b, _pw(b, "mul", scale, _pw(b, "cos", im)), _pw(b, "mul", scale, _pw(b, "sin", im)), v)
    raise Unsupported(f"The forward computes {node.target} on complex numbers, which the templates do not build.")


def _pair_view_args(base: str, fx_args: list, args: list, v) -> list:
    """A view's arguments for the pair: a shape gains a last dim of 2, dims count from the front."""
    n_in = len(fx_args[0].meta["val"].shape)
    if base in ("view", "_unsafe_view", "reshape", "expand"):
        return [list(v.shape) + [2]]
    if base == "permute":
        return [[d % n_in for d in args[1]] + [n_in]]
    if base == "unsqueeze":
        return [args[1] % (n_in + 1)]
    if base == "squeeze":
        dims = args[1] if len(args) > 1 else [d for d in range(n_in) if fx_args[0].meta["val"].shape[d] == 1]
        return [[d % n_in for d in ([dims] if isinstance(dims, int) else dims)]]
    if base == "t":
        return []
    if base == "transpose":
        return [args[1] % n_in, args[2] % n_in]
    return [args[1] % n_in, *args[2:]]  # slice, select: the dim, then its bounds or index


def _parts(b, pair: Value) -> tuple[Value, Value]:
    last = len(pair.shape) - 1
    return tuple(b.viewed(aten.select.int, "select", pair, last, k) for k in (0, 1))


def _pair(b, re, im, v) -> Value:
    """The pair of a complex value of v's shape from its parts."""
    re, im = _broadcast(b, re, v), _broadcast(b, im, v)
    return b.cat("stack", [[re, im], -1], {}, pair_meta(v))


def _broadcast(b, x, v) -> Value:
    """A part (a value, or a number) over v's whole shape, as the stack of the two parts needs it."""
    shape, real = tuple(v.shape), v.dtype.to_real()
    if not isinstance(x, Value):
        return b.filled(torch.empty(shape, dtype=real, device="meta"), x)
    return x if tuple(x.shape) == shape else b.add("pw", "add", [x, 0.0], shape, real)


def _pw(b, fn: str, *args, shape: tuple | None = None) -> Node:
    values = [a for a in args if isinstance(a, Value)]
    out = shape or tuple(torch.broadcast_shapes(*(tuple(a.shape) for a in values)))
    dtype = values[0].dtype if values else torch.float32
    return b.add("pw", fn, list(args), out, dtype)


def _neg(b, x: Value) -> Node:
    return _pw(b, "neg", x)


def _arith(b, fn: str, args: list, complex_args: list, kwargs: dict, v) -> Value:
    """add, sub, mul, div with a complex operand; the other complex, real (a tensor or a number)."""
    alpha = kwargs.get("alpha", 1)
    if alpha != 1:
        args = [args[0], args[1] * alpha if not isinstance(args[1], Value) else _pw(b, "mul", args[1], alpha)]
    x, y = args
    if not any(complex_args) or any(isinstance(a, complex) for a in args):
        raise Unsupported("The forward mixes complex numbers and Python complex scalars, which the templates do "
                          "not build.")
    if all(complex_args):
        (xr, xi), (yr, yi) = _parts(b, x), _parts(b, y)
        if fn in ("add", "sub"):
            return _pair(b, _pw(b, fn, xr, yr), _pw(b, fn, xi, yi), v)
        if fn == "mul":
            return _pair(b, _pw(b, "sub", _pw(b, "mul", xr, yr), _pw(b, "mul", xi, yi)),
                         _pw(b, "add", _pw(b, "mul", xr, yi), _pw(b, "mul", xi, yr)), v)
        norm = _pw(b, "add", _pw(b, "mul", yr, yr), _pw(b, "mul", yi, yi))  # x / y = x * conj(y) / |y|^2
        re = _pw(b, "add", _pw(b, "mul", xr, yr), _pw(b, "mul", xi, yi))
        im = _pw(b, "sub", _pw(b, "mul", xi, yr), _pw(b, "mul", xr, yi))
        return _pair(b, _pw(b, "div", re, norm), _pw(b, "div", im, norm), v)
    if fn in ("add", "sub"):  # a real operand moves the real part only; r - c negates the imaginary one
        if complex_args[0]:
            cr, ci = _parts(b, x)
            return _pair(b, _pw(b, fn, cr, y), ci, v)
        cr, ci = _parts(b, y)
        return _pair(b, _pw(b, fn, x, cr), _neg(b, ci) if fn == "sub" else ci, v)
    if fn == "div" and not complex_args[0]:
        raise Unsupported("The forward divides a real number by a complex one, which the templates do not build.")
    c, r = (x, y) if complex_args[0] else (y, x)
    if isinstance(r, Value):
        r = b.viewed(aten.unsqueeze.default, "unsqueeze", r, len(r.shape))  # one factor for both parts
    return _pw(b, fn, c, r, shape=tuple(pair_meta(v).shape))
