"""ATen pointwise ops as Triton expressions. Each entry maps argument expressions to a result expression.

An expression is `E(code, kind)`, kind "f" (computed in float32), "i" (integer) or "b" (boolean). Arguments
are kernel variables or Python literals; every op's result is assigned to its own variable, so an argument
may appear several times in an entry's code. Ops missing here make a task unsupported, never a fallback.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from agent.templates.special_fns import SPECIAL, polygamma_coefficients


@dataclass(frozen=True)
class E:
    code: str
    kind: str  # "f", "i", "b"


def lit(value) -> E:
    if isinstance(value, bool):
        return E("True" if value else "False", "b")
    if isinstance(value, int):
        return E(str(value), "i")
    if isinstance(value, float):
        if math.isnan(value):
            return E('float("nan")', "f")
        if math.isinf(value):
            return E('float("inf")' if value > 0 else '-float("inf")', "f")
        return E(repr(value), "f")
    raise TypeError(f"not a scalar: {value!r}")


def kind_of(dtype: torch.dtype) -> str:
    return "b" if dtype == torch.bool else "f" if dtype.is_floating_point else "i"


def f(e: E) -> str:
    """The expression as float32."""
    if e.kind == "f":
        return e.code
    if e.code.lstrip("-").isdigit():
        return e.code + ".0"
    if e.code in ("True", "False"):
        return "1.0" if e.code == "True" else "0.0"
    return f"{e.code}.to(tl.float32)"


def b(e: E) -> str:
    return e.code if e.kind == "b" else f"({e.code} != 0)"


def _num(*args: E) -> str:
    return "f" if any(a.kind == "f" for a in args) else "i"


def _arith(op: str):
    def entry(a, kw):
        x, y = a[0], a[1]
        if x.kind == y.kind == "b" and op in "+*":  # bool + bool is or, bool * bool and: a bool, never a 2
            return E(f"({x.code} {'|' if op == '+' else '&'} {y.code})", "b")
        alpha = kw.get("alpha", 1)
        yc = y.code if alpha == 1 else f"({y.code} * {lit(alpha).code})"
        return E(f"({x.code} {op} {yc})", _num(x, y, lit(alpha)))
    return entry


def _unary(template: str):
    return lambda a, kw: E(template.format(x=f(a[0])), "f")


COMPARE = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "==": operator.eq,
           "!=": operator.ne}


def _cmp(op: str):
    """A comparison; of two numbers (a target filled with ignore_index against it), its value, since a Python
    bool in a kernel has no .to()."""
    def compare(a, kw):
        x, y = number(a[0]), number(a[1])
        return lit(COMPARE[op](x, y)) if x is not None and y is not None else E(f"({a[0].code} {op} {a[1].code})", "b")
    return compare


def number(e: E) -> float | None:
    """The value of a literal expression (lit's), else None."""
    if e.code in ("True", "False"):
        return float(e.code == "True")
    try:
        return float(e.code)
    except ValueError:
        return None


def _pow(a, kw):
    """PyTorch's pow: C's for a negative base (signed under an odd integral exponent, NaN under a fractional one),
    its zeros and infinities; integers by squaring, wrapping as PyTorch's do."""
    x, e = a
    p = number(e)
    if p is not None and p == int(p) and -4 <= p <= 8:
        if p == 0:
            return E("1", "i") if x.kind == "i" else E("1.0", "f")
        if x.kind == "i" and p > 0:
            return E(f"({' * '.join([x.code] * int(p))})", "i")
        body = " * ".join([f(x)] * int(abs(p)))
        return E(f"({body})" if p > 0 else f"(1.0 / ({body}))", "f")
    if p == 0.5:  # as PyTorch's, which takes these exponents to sqrt and rsqrt
        return E(f"tl.sqrt({f(x)})", "f")
    if p == -0.5:
        return E(f"tl.rsqrt({f(x)})", "f")
    if x.kind == e.kind == "i":
        return E(f"_powi({x.code}, {e.code})", "i")
    c = number(x)
    if c is not None and c > 0 and c != 1:  # a positive number ** tensor
        return E(f"tl.exp2({f(e)} * {math.log2(c)!r})", "f")
    base = f"(tl.zeros_like({f(e)}) + {f(x)})" if c is not None else f(x)  # the helper's operands are tensors
    exponent = f"(tl.zeros_like({f(x)}) + {f(e)})" if p is not None else f(e)
    return E(f"_pow({base}, {exponent})", "f")


def _div(a, kw):
    q = f"({f(a[0])} / {f(a[1])})"
    mode = kw.get("rounding_mode")
    if mode and a[0].kind == a[1].kind == "i":  # integers stay integers: exact past float32's 2**24
        return E(f"_floordiv({a[0].code}, {a[1].code})" if mode == "floor" else f"({a[0].code} // {a[1].code})",
                 "i")
    if mode == "floor":
        return E(f"_floordiv_f({f(a[0])}, {f(a[1])})", "f")
    if mode == "trunc":
        return E(f"_trunc({q})", "f")
    return E(q, "f")


def _nan(kind: str) -> str:
    """tl.maximum and tl.minimum return NaN where an operand is NaN with this, as PyTorch's relu, clamp, hardtanh
    and maximum do; without it they return the other operand (Triton's default, torch.fmax's). On an H200's PTX:
    max.NaN.f32 for max.f32. Integers have no NaN."""
    return ", propagate_nan=tl.PropagateNan.ALL" if kind == "f" else ""


def _clamp(a, kw):
    x = a[0]
    lo = a[1] if len(a) > 1 and a[1] is not None else kw.get("min")
    hi = a[2] if len(a) > 2 and a[2] is not None else kw.get("max")
    lo = lit(lo) if isinstance(lo, (int, float)) else lo
    hi = lit(hi) if isinstance(hi, (int, float)) else hi
    code, kind = x.code, _num(x, *(v for v in (lo, hi) if v is not None))
    if lo is not None:
        code = f"tl.maximum({code}, {lo.code}{_nan(kind)})"
    if hi is not None:
        code = f"tl.minimum({code}, {hi.code}{_nan(kind)})"
    return E(code, kind)


# float8 formats a cast rounds to, as _round_f8's arguments: mantissa bits, the least normal exponent, the
# largest finite value, and whether a value past it is infinite (e5m2) or that value (e4m3fn saturates, as
# PyTorch's conversion does, infinities too)
FLOAT8 = {"float8_e4m3fn": (3, -6, 448.0, 0), "float8_e5m2": (2, -14, 57344.0, 1)}
WRAPS = {"int8": (8, True), "uint8": (8, False), "int16": (16, True), "int32": (32, True)}  # bits, signed


def _cast(a, kw):
    if kw.get("round") == "bfloat16":  # rounded where the program rounds, ties to even, as PyTorch rounds
        return E(f"_round_bf16({f(a[0])})", "f")
    if kw.get("round") == "float16":
        return E(f"{f(a[0])}.to(tl.float16).to(tl.float32)", "f")
    if kw.get("round") in FLOAT8:
        return E(f"_round_f8({f(a[0])}, {', '.join(map(str, FLOAT8[kw['round']]))})", "f")
    dtype = kw.get("dtype")
    k = kind_of(dtype) if dtype is not None else a[0].kind
    if k == "f":
        return E(f(a[0]), "f")
    if k == "b":
        return E(b(a[0]), "b")
    if kw.get("wrap"):  # its low bits, sign-extended where the type is signed
        bits, signed = WRAPS[kw["wrap"]]
        low = f"({a[0].code}.to(tl.int64) & {(1 << bits) - 1})"
        return E(f"(({low} ^ {1 << (bits - 1)}) - {1 << (bits - 1)})" if signed else low, "i")
    return E(f"{a[0].code}.to(tl.int64)" if a[0].kind != "i" else a[0].code, "i")


def _gelu(a, kw):
    x = f(a[0])
    if kw.get("approximate", "none") == "tanh":  # 0.5 x (1 + tanh(y)) is x / (1 + exp(-2y)): one exp, and no
        # cancellation where y is very negative. Through _tanh's polynomial, GeGLU at 4096 x 11008 in bf16 took
        # 0.083 ms on an H200 (1.29x its floor; torch.compile 0.069 ms), 0.070 ms before _tanh
        return E(f"({x} / (1.0 + _exp(-1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x}))))", "f")
    return E(f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))", "f")


def _softplus(x: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    bx = x if beta == 1 else f"({x} * {beta!r})"
    soft = f"_log1p(_exp({bx}))" + ("" if beta == 1 else f" / {beta!r}")
    return f"tl.where({bx} > {threshold!r}, {x}, {soft})"


def _elu(x: str, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> str:
    return f"tl.where({x} > 0, {x} * {scale!r}, {alpha * scale!r} * _expm1({x} * {input_scale!r}))"


def _arg(a, i, kw, name, default):
    if len(a) > i:
        return float(a[i].code) if isinstance(a[i], E) else a[i]
    return kw.get(name, default)


def _xlog(shift: str):
    """x * log(shift + y), 0 where x is 0, NaN where y is NaN (xlogy, and xlog1py with shift "1.0 + ")."""
    return lambda a, kw: E(f"tl.where({f(a[1])} != {f(a[1])}, {f(a[1])}, tl.where({f(a[0])} == 0, 0.0, "
                           f"{f(a[0])} * {'_log1p(' if shift else '_log('}{f(a[1])})))", "f")


POINTWISE = {
    "add": _arith("+"),
    "sub": _arith("-"),
    "mul": lambda a, kw: E(f"({a[0].code} * {a[1].code})", _num(a[0], a[1])),
    "rsub": lambda a, kw: _arith("-")([a[1], a[0]], kw),
    "div": _div,
    "true_divide": _div,
    "neg": lambda a, kw: E(f"(-{a[0].code})", _num(a[0])),
    "reciprocal": _unary("(1.0 / {x})"),
    "exp": _unary("_exp({x})"),
    "exp2": _unary("tl.exp2({x})"),
    "expm1": _unary("_expm1({x})"),
    "log": _unary("_log({x})"),
    "log2": _unary("tl.log2({x})"),
    "log10": _unary("(_log({x}) * 0.4342944819032518)"),
    "log1p": _unary("_log1p({x})"),
    "sqrt": _unary("tl.sqrt({x})"),
    "rsqrt": _unary("tl.rsqrt({x})"),
    "sin": _unary("tl.sin({x})"),
    "cos": _unary("tl.cos({x})"),
    "tan": _unary("(tl.sin({x}) / tl.cos({x}))"),
    "sinh": _unary("(0.5 * (_exp({x}) - _exp(-{x})))"),
    "cosh": _unary("(0.5 * (_exp({x}) + _exp(-{x})))"),
    "erf": _unary("tl.erf({x})"),
    "erfc": _unary("(1.0 - tl.erf({x}))"),
    "sigmoid": _unary("_sigmoid({x})"),
    "tanh": _unary("_fast_tanh({x})"),
    "abs": lambda a, kw: E(f"tl.abs({a[0].code})", a[0].kind if a[0].kind != "b" else "i"),
    "floor": _unary("tl.floor({x})"),
    "ceil": _unary("tl.ceil({x})"),
    "trunc": _unary("_trunc({x})"),
    "frac": _unary("({x} - _trunc({x}))"),
    "sign": _unary("tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0))"),
    "sgn": _unary("tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0))"),
    "pow": _pow,
    "relu": lambda a, kw: E(f"tl.maximum({a[0].code}, 0{_nan(_num(a[0]))})", _num(a[0])),
    "gelu": _gelu,
    "silu": _unary("({x} * _sigmoid({x}))"),
    "mish": _unary("_mish({x})"),
    "softplus": lambda a, kw: E(_softplus(f(a[0]), _arg(a, 1, kw, "beta", 1.0), _arg(a, 2, kw, "threshold", 20.0)), "f"),
    # a sixth as a product, not a division (div.full.f32: about 8 instructions; 1 ulp of difference at most)
    "hardswish": _unary("({x} * tl.minimum(tl.maximum({x} + 3.0, 0.0), 6.0) * 0.16666666666666666)"),
    "hardsigmoid": lambda a, kw: _clamp([E(f"{f(a[0])} * 0.16666666666666666 + 0.5", "f"), lit(0.0), lit(1.0)], {}),
    "hardtanh": lambda a, kw: _clamp([E(f(a[0]), "f"), lit(float(_arg(a, 1, kw, "min_val", -1.0))),
                                      lit(float(_arg(a, 2, kw, "max_val", 1.0)))], {}),
    "leaky_relu": lambda a, kw: E(f"tl.where({f(a[0])} > 0, {f(a[0])}, {f(a[0])} * "
                                  f"{_arg(a, 1, kw, 'negative_slope', 0.01)!r})", "f"),
    "elu": lambda a, kw: E(_elu(f(a[0]), _arg(a, 1, kw, "alpha", 1.0), _arg(a, 2, kw, "scale", 1.0),
                                _arg(a, 3, kw, "input_scale", 1.0)), "f"),
    "selu": lambda a, kw: E(_elu(f(a[0]), 1.6732632423543772, 1.0507009873554805), "f"),
    "celu": lambda a, kw: E(f"tl.where({f(a[0])} > 0, {f(a[0])}, {_arg(a, 1, kw, 'alpha', 1.0)!r} * "
                            f"_expm1({f(a[0])} / {_arg(a, 1, kw, 'alpha', 1.0)!r}))", "f"),
    "threshold": lambda a, kw: E(f"tl.where({a[0].code} > {a[1].code}, {a[0].code}, {a[2].code})", _num(a[0], a[2])),
    "clamp": _clamp,
    "clamp_min": lambda a, kw: _clamp([a[0], a[1], None], kw),
    "clamp_max": lambda a, kw: _clamp([a[0], None, a[1]], kw),
    "maximum": lambda a, kw: E(f"tl.maximum({a[0].code}, {a[1].code}{_nan(_num(a[0], a[1]))})", _num(a[0], a[1])),
    "minimum": lambda a, kw: E(f"tl.minimum({a[0].code}, {a[1].code}{_nan(_num(a[0], a[1]))})", _num(a[0], a[1])),
    "fmax": lambda a, kw: E(f"tl.maximum({a[0].code}, {a[1].code})", _num(a[0], a[1])),
    "fmin": lambda a, kw: E(f"tl.minimum({a[0].code}, {a[1].code})", _num(a[0], a[1])),
    "where": lambda a, kw: E(f"tl.where({b(a[0])}, {a[1].code}, {a[2].code})", _num(a[1], a[2])),
    "masked_fill": lambda a, kw: E(f"tl.where({b(a[1])}, {a[2].code}, {a[0].code})", _num(a[0], a[2])),
    "gt": _cmp(">"), "lt": _cmp("<"), "ge": _cmp(">="), "le": _cmp("<="), "eq": _cmp("=="), "ne": _cmp("!="),
    "logical_and": lambda a, kw: E(f"({b(a[0])} & {b(a[1])})", "b"),
    "logical_or": lambda a, kw: E(f"({b(a[0])} | {b(a[1])})", "b"),
    "logical_xor": lambda a, kw: E(f"({b(a[0])} != {b(a[1])})", "b"),
    "logical_not": lambda a, kw: E(f"({b(a[0])} == 0)", "b"),
    "bitwise_not": lambda a, kw: E(f"({a[0].code} == 0)", "b") if a[0].kind == "b" else E(f"(~{a[0].code})", "i"),
    "bitwise_and": lambda a, kw: E(f"({a[0].code} & {a[1].code})", "b" if a[0].kind == a[1].kind == "b" else "i"),
    "bitwise_or": lambda a, kw: E(f"({a[0].code} | {a[1].code})", "b" if a[0].kind == a[1].kind == "b" else "i"),
    "bitwise_xor": lambda a, kw: E(f"({a[0].code} ^ {a[1].code})", "b" if a[0].kind == a[1].kind == "b" else "i"),
    "__lshift__": lambda a, kw: _shift(a, kw, left=True),
    "bitwise_left_shift": lambda a, kw: _shift(a, kw, left=True),
    "__rshift__": lambda a, kw: _shift(a, kw, left=False),
    "bitwise_right_shift": lambda a, kw: _shift(a, kw, left=False),
    "gcd": lambda a, kw: E(f"_gcd({a[0].code}, {a[1].code})", "i"),
    "bitcast": lambda a, kw: _bitcast(a[0], kw["source"], kw["dtype"]),
    "round": lambda a, kw: E(_round(f(a[0]), _arg(a, 1, kw, "decimals", 0)), "f"),
    "isnan": lambda a, kw: E(f"({a[0].code} != {a[0].code})", "b"),
    "isinf": lambda a, kw: E(f"(tl.abs({f(a[0])}) == float(\"inf\"))", "b"),
    "lerp": lambda a, kw: E(f"({f(a[0])} + {f(a[2])} * ({f(a[1])} - {f(a[0])}))", "f"),
    "addcmul": lambda a, kw: E(f"({f(a[0])} + {kw.get('value', 1)!r} * {f(a[1])} * {f(a[2])})", "f"),
    "addcdiv": lambda a, kw: E(f"({f(a[0])} + {kw.get('value', 1)!r} * {f(a[1])} / {f(a[2])})", "f"),
    "remainder": lambda a, kw: E(f"_remainder({a[0].code}, {a[1].code})", "i") if a[0].kind == a[1].kind == "i"
    else E(f"_remainder({f(a[0])}, {f(a[1])})", "f"),
    "fmod": lambda a, kw: E(f"({a[0].code} % {a[1].code})", "i") if a[0].kind == a[1].kind == "i"
    else E(f"({f(a[0])} % {f(a[1])})", "f"),  # a float's % is C's fmod: exact, and NaN or x at 0 and infinity
    "cast": _cast,
    "xlogy": _xlog(""),
    "special_xlog1py": _xlog("1.0 + "),
    "square": lambda a, kw: E(f"({a[0].code} * {a[0].code})", _num(a[0])),
    "logit": lambda a, kw: E(f"tl.log({_logit_clamp(a, kw)} / (1.0 - {_logit_clamp(a, kw)}))", "f"),
    "asinh": _unary("tl.log({x} + tl.sqrt({x} * {x} + 1.0))"),
    "acosh": _unary("tl.log({x} + tl.sqrt({x} * {x} - 1.0))"),
    "atanh": _unary("(0.5 * _log1p(2.0 * {x} / (1.0 - {x})))"),
    "hypot": lambda a, kw: E(f"_hypot({f(a[0])}, {f(a[1])})", "f"),
    "logaddexp": lambda a, kw: _logaddexp(f(a[0]), f(a[1]), "_exp({d})", ""),
    "logaddexp2": lambda a, kw: _logaddexp(f(a[0]), f(a[1]), "tl.exp2({d})", " * 1.4426950408889634"),
    "angle": _unary("tl.where({x} != {x}, {x}, tl.where({x} < 0, 3.141592653589793, 0.0))"),
    "copysign": lambda a, kw: E(f"tl.where({_signbit(a[1])}, -tl.abs({f(a[0])}), tl.abs({f(a[0])}))", "f"),
    "signbit": lambda a, kw: E(_signbit(a[0]), "b"),
    "isfinite": lambda a, kw: E(f"(tl.abs({f(a[0])}) < float(\"inf\"))", "b"),
    "isposinf": lambda a, kw: E(f"({f(a[0])} == float(\"inf\"))", "b"),
    "isneginf": lambda a, kw: E(f"({f(a[0])} == -float(\"inf\"))", "b"),
    "heaviside": lambda a, kw: E(f"tl.where({f(a[0])} == 0, {f(a[1])}, tl.where({f(a[0])} > 0, 1.0, 0.0))", "f"),
    "hardshrink": lambda a, kw: E(f"tl.where(tl.abs({f(a[0])}) > {_arg(a, 1, kw, 'lambd', 0.5)!r}, {f(a[0])}, 0.0)",
                                  "f"),
    "softshrink": lambda a, kw: E(f"tl.where({f(a[0])} > {_arg(a, 1, kw, 'lambd', 0.5)!r}, {f(a[0])} - "
                                  f"{_arg(a, 1, kw, 'lambd', 0.5)!r}, tl.where({f(a[0])} < "
                                  f"-{_arg(a, 1, kw, 'lambd', 0.5)!r}, {f(a[0])} + {_arg(a, 1, kw, 'lambd', 0.5)!r}, "
                                  f"0.0))", "f"),
    "_prelu_kernel": lambda a, kw: E(f"tl.where({f(a[0])} > 0, {f(a[0])}, {f(a[1])} * {f(a[0])})", "f"),
    "deg2rad": _unary("({x} * 0.017453292519943295)"),
    "rad2deg": _unary("({x} * 57.29577951308232)"),
    "atan": _unary("_atan({x})"),
    "asin": _unary("_atan2({x}, tl.sqrt((1.0 - {x}) * (1.0 + {x})))"),
    "acos": _unary("_atan2(tl.sqrt((1.0 - {x}) * (1.0 + {x})), {x})"),
    "atan2": lambda a, kw: E(f"_atan2({f(a[0])}, {f(a[1])})", "f"),
    "erfinv": _unary("_erfinv({x})"),
    "lgamma": _unary("_lgamma({x})"),
    "digamma": _unary("_digamma({x})"),
    "polygamma": lambda a, kw: _polygamma(int(a[0].code), f(a[1])),
    "i0": _unary("_i0({x})"),
    "special_i0e": _unary("_i0e({x})"),
    "special_i1": _unary("_i1({x})"),
    "special_bessel_j0": _unary("_bessel_j0({x})"),
    "special_bessel_j1": _unary("_bessel_j1({x})"),
    "special_i1e": _unary("_i1e({x})"),
    "special_erfcx": _unary("_erfcx({x})"),
    "special_log_ndtr": _unary("_log_ndtr({x})"),
    "nan_to_num": lambda a, kw: E(_nan_to_num(f(a[0]), _arg(a, 1, kw, "nan", 0.0), _arg(a, 2, kw, "posinf", None),
                                              _arg(a, 3, kw, "neginf", None)), "f"),
}


# the dtypes Tensor.view(dtype) is built between (of one width): floats wider than 32 bits are computed in fp32
BITCAST = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32)


def _bitcast(e: E, source: torch.dtype, target: torch.dtype) -> E:
    """A value's bits as `source` stores them, read as `target`: back to the source's own type first (a float
    computes in fp32, an integer may have been widened), exact for every value the source holds."""
    bits = f"{e.code}.to(tl.{str(source)[6:]}).to(tl.{str(target)[6:]}, bitcast=True)"
    return E(f"{bits}.to(tl.float32)", "f") if target.is_floating_point else E(bits, "i")


SHIFTS = {"__lshift__", "bitwise_left_shift", "__rshift__", "bitwise_right_shift"}


def _shift(a: list[E], kw: dict, left: bool) -> E:
    """PyTorch's integer shifts of kw["bits"]-wide values, defined for every count: a count past the width (or
    negative) shifts all bits out, to 0, or to the sign for a signed right shift (C leaves those undefined)."""
    x, n, bits = a[0].code, a[1].code, kw["bits"]
    fits = f"(({n} >= 0) & ({n} < {bits}))"
    if left:
        return E(f"tl.where({fits}, {x} << {n}, 0)", "i")
    if kw["signed"]:
        return E(f"({x} >> tl.where({fits}, {n}, {bits - 1}))", "i")
    return E(f"tl.where({fits}, {x} >> {n}, 0)", "i")


def _logaddexp(x: str, y: str, exp: str, scale: str) -> E:
    """log(e^x + e^y) (or in base 2, with exp2 and the log's scale), as PyTorch's: where both are one infinity,
    that infinity (the difference of the two would be NaN)."""
    tail = exp.format(d=f"-tl.abs({x} - {y})")
    return E(f"tl.where(({x} == {y}) & (tl.abs({x}) == float(\"inf\")), {x}, "
             f"tl.maximum({x}, {y}) + _log1p({tail}){scale})", "f")


def _polygamma(n: int, x: str) -> E:
    if n == 0:
        return E(f"_digamma({x})", "f")
    return E(f"_polygamma({x}, {n}, {', '.join(repr(c) for c in polygamma_coefficients(n))})", "f")


def _signbit(e: E) -> str:
    """The sign bit: set for -0.0 (a negative number times zero) and a negative NaN, where `x < 0` is false."""
    try:
        return str(math.copysign(1.0, float(f(e))) < 0)
    except ValueError:
        return f"_signbit({f(e)})"


def _round(x: str, decimals: int) -> str:
    """To the nearest integer, ties to even (torch.round), after scaling by 10 ** decimals as PyTorch does: a
    product then a quotient, or for negative decimals a quotient then a product."""
    if decimals == 0:
        return f"_rint({x})"
    scale = float(10 ** abs(decimals))
    return f"(_rint({x} * {scale!r}) / {scale!r})" if decimals > 0 else f"(_rint({x} / {scale!r}) * {scale!r})"


def _logit_clamp(a, kw) -> str:
    eps = _arg(a, 1, kw, "eps", None)
    return f(a[0]) if eps is None else f"tl.minimum(tl.maximum({f(a[0])}, {eps!r}), {1.0 - eps!r})"


def _nan_to_num(x: str, nan, posinf, neginf) -> str:
    big = 3.4028234663852886e38  # float32's largest finite value
    hi, lo = big if posinf is None else posinf, -big if neginf is None else neginf
    return (f"tl.where({x} != {x}, {(nan or 0.0)!r}, tl.where({x} == float(\"inf\"), {float(hi)!r}, "
            f"tl.where({x} == -float(\"inf\"), {float(lo)!r}, {x})))")

# @triton.jit helpers the expressions above may call, added to a candidate when its kernels use them
# (helpers_for). exp(x) - 1 and log(1 + x) lose all their digits near 0 where the result is small: tanh of
# 4.5e-5 as (1 - t) / (1 + t) was 1e-3 off, softplus of -20 as log(1 + exp(x)) was 0, and the evaluator refused
# 52_Conv2d_Activation_BatchNorm's mish at elements of the shifted trial for it. Near 0 they are polynomials:
# Taylor terms of exp to x**9 where |x| < 0.5, and log(1 + x) = 2 atanh(s), s = x / (2 + x), to s**15 where
# |x| < 0.5; both under 2e-9 of the value there, and exp or log is well conditioned elsewhere.
_PAIR_COMBINE = '''@triton.jit
def _{name}_combine(v1, i1, v2, i2):
    n1 = v1 != v1
    n2 = v2 != v2
    second = (v2 {better} v1) | (n2 & ~n1) | (((v2 == v1) | (n1 & n2)) & (i2 {tie} i1))
    return tl.where(second, v2, v1), tl.where(second, i2, i1)
'''
HELPERS = {
    # below 2 ** 23 an fp32 sum with 2 ** 23 keeps no fraction: the addition rounds it off, ties to even
    "_rint": '''@triton.jit
def _rint(x):
    r = (tl.abs(x) + 8388608.0) - 8388608.0
    return tl.where(tl.abs(x) < 8388608.0, tl.where(x < 0, -r, r), x)
''',
    "_expm1": '''@triton.jit
def _expm1(x):
    p = 1.0 + x * 0.1111111111111111
    p = 1.0 + x * 0.125 * p
    p = 1.0 + x * 0.14285714285714285 * p
    p = 1.0 + x * 0.16666666666666666 * p
    p = 1.0 + x * 0.2 * p
    p = 1.0 + x * 0.25 * p
    p = 1.0 + x * 0.3333333333333333 * p
    p = 1.0 + x * 0.5 * p
    return tl.where(tl.abs(x) < 0.5, x * p, tl.exp(x) - 1.0)
''',
    "_log1p": '''@triton.jit
def _log1p(x):
    s = x / (2.0 + x)
    q = s * s
    p = 0.07692307692307693 + q * 0.06666666666666667
    p = 0.09090909090909091 + q * p
    p = 0.1111111111111111 + q * p
    p = 0.14285714285714285 + q * p
    p = 0.2 + q * p
    p = 0.3333333333333333 + q * p
    return tl.where(tl.abs(x) < 0.5, 2.0 * s * (1.0 + q * p), tl.log(1.0 + x))
''',
    # ln x as the SFU's log2 (lg2.approx.f32, subnormals kept) times ln 2: within 2**-21.41 of ln x on [0.5, 2]
    # (no relative accuracy near 1), 3 units in the last place elsewhere; two instructions where tl.log's
    # libdevice polynomial takes about 30. Level 1's 98_KLDivLoss, two logs an element pair, was bound by them
    # (62 instructions an element pair, 13 so). A kernel that calls it takes the constexpr SFU, true where its
    # tensors are on a GPU and the candidate's logs are "sfu" (program._sfu): the interpreter runs no PTX.
    "_log": '''@triton.jit
def _log(SFU: tl.constexpr, x):
    y = tl.log(x)
    if SFU and y.dtype == tl.float32:
        y = tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                      pack=1) * 0.6931471805599453
    return y
''',
    # e^x as the SFU's 2^x of x log2(e) (ex2.approx.ftz.f32): two instructions where tl.exp takes six (the same
    # multiply and 2^x, and a range test with two scalings that keep subnormal results). Flushed to zero below
    # 2^-126, under any tolerance the evaluator sets. Cross-entropy over 4096 x 32000 bf16 logits ran 14
    # instructions an element with tl.exp (about the floor's time in issue alone). The SFU constexpr as for _log.
    "_exp": '''@triton.jit
def _exp(SFU: tl.constexpr, x):
    y = tl.exp(x)
    if SFU and y.dtype == tl.float32:
        y = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                      dtype=tl.float32, is_pure=True, pack=1)
    return y
''',
    # 1 / (1 + e^-x) as the SFU's 2^x and reciprocal (ex2.approx.ftz, rcp.approx.ftz: 2 and 1 units in the last
    # place), four instructions where tl.sigmoid's full-range exp and division take about eleven: level 2's
    # 60_ConvTranspose3d_Swish_GroupNorm_HardSwish's convolution was bound by instruction issue. Flushed to zero
    # below 2^-126, where x e^x is under fp32's tolerance anyway. The SFU constexpr as for _log.
    "_sigmoid": '''@triton.jit
def _sigmoid(SFU: tl.constexpr, x):
    y = tl.sigmoid(x)
    if SFU and y.dtype == tl.float32:
        e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * -1.4426950408889634],
                                      dtype=tl.float32, is_pure=True, pack=1)
        y = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [1.0 + e], dtype=tl.float32,
                                      is_pure=True, pack=1)
    return y
''',
    "_tanh": '''@triton.jit
def _tanh(x):
    t = _expm1(-2.0 * tl.abs(x))
    r = -t / (2.0 + t)
    return tl.where(x >= 0, r, -r)
''',
    # tanh(x) = 1 - 2 / (e^2x + 1) by the SFU's 2^x and reciprocal (ex2.approx.ftz, rcp.approx.ftz): six
    # instructions where _tanh's expm1 and IEEE division take about 30. DyT over 4096 x 4096 bf16 (a tanh, a
    # product and a sum an element) ran 2.02x its floor so, behind Liger. Within 5e-7 of tanh (no relative
    # accuracy near 0, where the evaluator's tolerance is 1e-4 of the output's RMS). The SFU constexpr as for _log.
    "_fast_tanh": '''@triton.jit
def _fast_tanh(SFU: tl.constexpr, x):
    y = _tanh(x)
    if SFU and y.dtype == tl.float32:
        e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 2.8853900817779268],
                                      dtype=tl.float32, is_pure=True, pack=1)
        y = 1.0 - 2.0 * tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [e + 1.0],
                                                  dtype=tl.float32, is_pure=True, pack=1)
    return y
''',
    # tanh(softplus(x)) = n / (n + 2), n = e^x (e^x + 2): one exp and a division where tanh of softplus took two
    # exps, a log and two divisions (level 2's 47_Conv3d_Mish_Tanh's epilogue: about 130 instructions an
    # element). No cancellation at either end: n / 2 is e^x where e^x is under fp32's roundoff against 1, and
    # past softplus's threshold of 20 the ratio is 1 in fp32, as PyTorch's mish is x there.
    "_mish": '''@triton.jit
def _mish(x):
    e = tl.exp(tl.minimum(x, 20.0))
    n = e * (e + 2.0)
    return tl.where(x > 20.0, x, x * n / (n + 2.0))
''',
    # Euclid's algorithm, as PyTorch's gcd: 93 steps cover any pair of int64s (consecutive Fibonacci numbers, the
    # slowest pairs, pass 2**63 at the 93rd)
    "_gcd": '''@triton.jit
def _gcd(a, b):
    a = tl.abs(a)
    b = tl.abs(b)
    for _ in range(93):
        step = b != 0
        r = tl.where(step, a % tl.where(step, b, 1), 0)
        a = tl.where(step, b, a)
        b = r
    return a
''',
    # fp32 to the nearest bf16 by its bits (Triton's interpreter truncates in .to(tl.bfloat16), whatever the
    # rounding asked for); past bf16's largest value, infinity, as PyTorch's
    "_round_bf16": '''@triton.jit
def _round_bf16(x):
    b = x.to(tl.int32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & -65536
    return tl.where(x != x, x, b.to(tl.float32, bitcast=True))
''',
    # fp32 to the nearest float8 value (FLOAT8), ties to even, by its quantum: 2^(e - MBITS) in x's binade e,
    # 2^(EMIN - MBITS) below the normal range; the division by it and the product are exact
    "_round_f8": '''@triton.jit
def _round_f8(x, MBITS: tl.constexpr, EMIN: tl.constexpr, BIG: tl.constexpr, INF: tl.constexpr):
    bits = x.to(tl.int32, bitcast=True)
    e = tl.maximum(((bits >> 23) & 0xFF) - 127, EMIN) - MBITS
    q = ((e + 127) << 23).to(tl.float32, bitcast=True)
    a = tl.abs(x) / q
    a = tl.where(a < 8388608.0, (a + 8388608.0) - 8388608.0, a) * q
    a = tl.where(a > BIG, float("inf") if INF else BIG, a)
    return (a.to(tl.int32, bitcast=True) | (bits & -2147483648)).to(tl.float32, bitcast=True)
''',
    # as C's hypot: the larger magnitude times sqrt(1 + r^2), r the ratio of the smaller to it, so that squares
    # of 1e20 do not overflow; infinite where either is, NaN where either is and neither is infinite
    "_hypot": '''@triton.jit
def _hypot(x, y):
    a = tl.abs(x)
    b = tl.abs(y)
    m = tl.maximum(a, b)
    r = tl.minimum(a, b) / tl.where(m == 0, 1.0, m)
    h = m * tl.sqrt(1.0 + r * r)
    h = tl.where((a != a) | (b != b), float("nan"), h)
    return tl.where((a == float("inf")) | (b == float("inf")), float("inf"), h)
''',
    # floats' floor division as PyTorch computes it, from the exact fmod (a float's %): (a - fmod) / b, one less
    # where the signs differ, a division by zero a / b (x / inf and inf / x are 0 or -1, and NaN, where the
    # quotient rounded away). Their remainder is _remainder's, the same formula over fmod.
    "_floordiv_f": '''@triton.jit
def _floordiv_f(a, b):
    m = a % b
    d = (a - m) / b
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    f = tl.where(d != 0, f, tl.where(_signbit(a / b), -0.0, 0.0))
    return tl.where(b == 0, a / b, f)
''',
    # C's pow by 2^(e log2|x|): the sign of x where e is an odd integer (-0.0's too), NaN for a negative base under
    # a fractional exponent (not -inf's, whose powers are infinite or zero), 1 for x^0, 1^e and (-1)^(+-inf)
    "_pow": '''@triton.jit
def _pow(x, e):
    a = tl.abs(x)
    r = tl.exp2(e * tl.log2(a))
    whole = tl.floor(e) == e
    odd = whole & (e - 2.0 * tl.floor(e * 0.5) == 1.0)
    r = tl.where(odd & _signbit(x) & (x == x), -r, r)
    r = tl.where((x < 0) & ~whole & (a != float("inf")), float("nan"), r)
    r = tl.where((e == 0) | (x == 1.0) | ((a == 1.0) & (tl.abs(e) == float("inf"))), 1.0, r)
    return r
''',
    # an integer power by squaring over the exponent's 64 bits, wrapping as PyTorch's
    "_powi": '''@triton.jit
def _powi(x, e):
    b = x + e * 0
    n = e + x * 0
    r = b * 0 + 1
    for _ in range(64):
        r = tl.where((n & 1) != 0, r * b, r)
        b = b * b
        n = n >> 1
    return r
''',
    "_signbit": '''@triton.jit
def _signbit(x):
    return x.to(tl.float32).to(tl.int32, bitcast=True) < 0
''',
    "_trunc": '''@triton.jit
def _trunc(x):
    return tl.where(x >= 0, tl.floor(x), tl.ceil(x))
''',
    "_widen": '''@triton.jit
def _widen(x):
    if x.dtype == tl.bfloat16:  # bf16 is fp32's top half: widened by bits
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)
''',
    "_pairs": '''@triton.jit
def _pairs(u, s):
    lo = (u << s).to(tl.float32, bitcast=True)  # with s = 16: the pair's first bf16, as fp32
    hi = ((u >> s) << s).to(tl.float32, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [u.shape[0], u.shape[1] * 2])
''',
    # integer division and remainder rounded down, as PyTorch's (Triton's // and % truncate, as C's do); the
    # remainder serves floats too, over their % (C's fmod)
    "_floordiv": '''@triton.jit
def _floordiv(a, b):
    q = a // b
    return tl.where((a % b != 0) & ((a < 0) != (b < 0)), q - 1, q)
''',
    "_remainder": '''@triton.jit
def _remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "_mul_combine": '''@triton.jit
def _mul_combine(a, b):
    return a * b
''',
    # a running max and min keep a NaN from where it appears on, as torch.cummax and cummin do
    "_max_combine": '''@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_min_combine": '''@triton.jit
def _min_combine(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    # (value, index) pairs: the larger (smaller) value, NaN above all, and between equal values (or two NaNs)
    # the first index as PyTorch's argmax and argmin take it, or the later one as torch.cummax and cummin do
    **{f"_{name}_combine": _PAIR_COMBINE.format(name=name, better=better, tie=tie) for name, better, tie in (
        ("argmax", ">", "<"), ("argmin", "<", "<"), ("lastmax", ">", ">"), ("lastmin", "<", ">"))},
    # two (max, sum of exp(x - max)) pairs as one: the larger max, each sum scaled to it (by 1 where its own
    # max is that max, also where both are infinite)
    "_lse_combine": '''@triton.jit
def _lse_combine(m1, s1, m2, s2):
    m = tl.maximum(m1, m2, propagate_nan=tl.PropagateNan.ALL)
    a = tl.where(m1 == m, 1.0, tl.exp(m1 - m))
    b = tl.where(m2 == m, 1.0, tl.exp(m2 - m))
    return m, s1 * a + s2 * b
''',
    "_sum2": '''@triton.jit
def _sum2(a0, b0, a1, b1):
    return a0 + a1, b0 + b1
''',
    "_sum3": '''@triton.jit
def _sum3(a0, b0, c0, a1, b1, c1):
    return a0 + a1, b0 + b1, c0 + c1
''',
    "_sum4": '''@triton.jit
def _sum4(a0, b0, c0, d0, a1, b1, c1, d1):
    return a0 + a1, b0 + b1, c0 + c1, d0 + d1
''',
    **SPECIAL,
}


def helpers_for(source: str) -> list[str]:
    """The HELPERS that `source` calls and those they call, each once, callees first."""
    found: list[str] = []

    def visit(text: str) -> None:
        for name, code in HELPERS.items():
            if name not in found and any(name + c in text for c in "(,)"):  # called, or a combine function
                visit(code.split("\ndef ", 1)[1].split("\n", 1)[1])  # the body, past its def line
                found.append(name)
    visit(source)
    return [HELPERS[name] for name in found]
