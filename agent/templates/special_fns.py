"""Special functions as @triton.jit helpers (pointwise_ops.HELPERS): inverse trigonometry, erfinv, lgamma,
digamma and polygamma, i0, i1, j0, j1 and erfcx, in fp32 from tl's arithmetic, exp, log, sqrt, sin and cos alone.
libdevice has most of them, but the Triton interpreter runs no libdevice call, so a kernel that made one could not
be checked on a CPU.

Each polynomial is a least-squares fit at 600 Chebyshev nodes of its interval (800 for j0 and j1) against
PyTorch's float64 function, weighted by 1 / |value|; the comment above each gives the largest relative error of
the fit on that interval. polygamma is a recurrence and a series, exact in its terms.
"""
from __future__ import annotations

import math

# atan(u) = u + u z P(z), z = u^2, |u| <= tan(pi / 8): P within 5e-8 relative, atan so within 3e-9
ATAN = (-0.3333333328, 0.1999997708, -0.1428414266, 0.1107122505, -0.08623742908, 0.05045963684)
# erfinv(x) / x as a polynomial in w - 2.5, w = -log(1 - x^2) in [0, 5] (|x| < 0.9966): within 7e-9
ERFINV_MID = (1.50140936, 0.2466402785, -0.004177388474, -0.001252725227, 0.0002183458868, -4.973069666e-06,
              -3.463093069e-06, 4.682669732e-07, 2.32648001e-08, -8.941414082e-09)
# the same in sqrt(w) - 3, sqrt(w) in [sqrt(5), 4.1], past fp32's largest value below 1 (w = 15.9): within 9e-8
ERFINV_TAIL = (2.83297702246, 1.001674434, 0.009434444684, -0.007628825864, 0.005769102593, -0.003648541051,
               0.001284108621, 7.545866247e-05, -0.0001532291111)
# i0(x) in y = x^2 / 3.75^2 for |x| <= 3.75: within 1.2e-8
I0_SMALL = (1.0000000115, 3.515623436, 3.089936653, 1.206764754, 0.2659603115, 0.03607537496, 0.004585211972)
# i0(x) sqrt(x) e^-x in t = 3.75 / x for x > 3.75: within 3.3e-8
I0_LARGE = (0.3989422866, 0.01329700567, 0.002023218602, 0.0002885738523, 0.00124557823, -0.0009892931939,
            -0.002905387468, 0.009536713018, -0.008750600909, 0.002606211684)
# i1(x) / x in y = x^2 / 3.75^2 for |x| <= 3.75: within 2.3e-9
I1_SMALL = (0.5000000011, 0.8789061159, 0.5149866124, 0.1508576401, 0.0265724331, 0.003027707518, 0.000320213028)
# i1(x) sqrt(x) e^-x in t = 3.75 / x for x > 3.75: within 3.8e-8
I1_LARGE = (0.3989422736, -0.03989308487, -0.003354095177, -0.0005116506674, -0.001216723319, 0.0003692337651,
            0.004565103086, -0.01192134722, 0.01032765792, -0.00299055541)
# Bessel functions of the first kind, split at 5 as PyTorch's are (past 5 its float64 j0 is an asymptotic form,
# 2e-6 off the series at 5.1: the fits follow PyTorch's, not the series). j0(x) / (x^2 - j0's first zero^2) in
# u = x^2 / 25: within 3.3e-11; j1(x) / (x (x^2 - j1's first zero^2)): within 4.7e-12
J0_SMALL = (-0.172915069025, 0.333228653288, -0.24811731292, 0.100074604495, -0.0254571462526, 0.00446489212566,
            -0.000571219697337, 5.40724908301e-05, -3.21358207094e-06)
J1_SMALL = (-0.034055373913, 0.0484346188383, -0.0283843836577, 0.00940615072313, -0.00202665656092,
            0.000307970114304, -3.47699463486e-05, 2.96220525552e-06, -1.63309378104e-07)
# past 5, j(x) = sqrt(2 / (pi x)) (P cos(x - phase) - Q / x sin(x - phase)), P and Q in t = 25 / x^2, from PyTorch's
# float64 j and y: P within 7.6e-11, Q within 2.1e-9
J0_P = (0.999999999931, -0.00281249275778, 0.000179316522045, -3.57671790308e-05, 1.2422566659e-05,
        -4.33353710561e-06, 8.40187357392e-07)
J0_Q = (-0.125000000172, 0.00292970289252, -0.000363560465637, 0.000110791765043, -5.58545029904e-05,
        1.5979435663e-05, -1.77891129225e-06)
J1_P = (1.00000000008, 0.00468749202982, -0.000230573335426, 4.23423667338e-05, -1.41924248767e-05,
        4.87749680402e-06, -9.39664056756e-07)
J1_Q = (0.375000000756, -0.00410163566165, 0.000445220912863, -0.000132787830192, 7.25722902579e-05,
        -1.37995421499e-05, -6.36446629467e-07)
# erfcx(x) / t in t = 2 / (2 + x) for x >= 0: within 1.2e-8
ERFCX = (0.2820947952, 0.2820937538, 0.2468845747, 0.1753159758, 0.09346243446, -0.05921135814, 0.1321770452,
         -0.4549739894, 0.4936949328, -0.2347335933, 0.04319543336)


def polygamma_coefficients(n: int) -> tuple[float, ...]:
    """_polygamma's arguments after N for order n >= 1: (-1)^(n+1) times n!, (n-1)!, n!/2 and the series'
    B_2k (2k+n-1)! / (2k)! for k = 1..5."""
    sign = 1.0 if n % 2 else -1.0
    bernoulli = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66)
    terms = [B * math.factorial(2 * k + n - 1) / math.factorial(2 * k) for k, B in enumerate(bernoulli, 1)]
    return tuple(sign * v for v in (math.factorial(n), math.factorial(n - 1), math.factorial(n) / 2, *terms))


def horner(x: str, coeffs: tuple[float, ...]) -> str:
    """c0 + x (c1 + x (c2 + ...)) as one expression."""
    code = repr(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        code = f"{c!r} + {x} * ({code})"
    return code


PI = 3.141592653589793


def _bessel_j(order: int, zero_sq: float, small: tuple, p: tuple, q: tuple) -> str:
    """j0 or j1: up to 5, (x^2 - its first zero^2) times the fit in u (and times x for the odd j1); past 5,
    sqrt(2 / (pi x)) (P cos(x - phase) - Q / x sin(x - phase)), phase (2 order + 1) pi / 4, j1 taking x's sign."""
    odd, signed = ("x * ", "tl.where(x < 0, -large, large)") if order else ("", "large")
    return f'''@triton.jit
def _bessel_j{order}(x):
    a = tl.abs(x)
    z = a * a
    u = z * 0.04
    t = 25.0 / z
    w = a - {(2 * order + 1) * PI / 4!r}
    large = ({horner("t", p)}) * tl.cos(w) - ({horner("t", q)}) / a * tl.sin(w)
    large = large * {(2 / PI) ** 0.5!r} / tl.sqrt(a)
    return tl.where(a <= 5.0, {odd}(z - {zero_sq!r}) * ({horner("u", small)}), {signed})
'''
HALF_PI = 1.5707963267948966

SPECIAL = {
    # past 1 atan(a) = pi/2 - atan(1/a); past tan(pi/8), atan(t) = pi/4 + atan((t - 1) / (t + 1))
    "_atan": f'''@triton.jit
def _atan(x):
    a = tl.abs(x)
    t = tl.where(a > 1.0, 1.0 / a, a)
    big = t > 0.41421356237309503
    u = tl.where(big, (t - 1.0) / (t + 1.0), t)
    z = u * u
    r = u + u * z * ({horner("z", ATAN)})
    r = tl.where(big, r + {PI / 4!r}, r)
    r = tl.where(a > 1.0, {HALF_PI!r} - r, r)
    return tl.where(x < 0, -r, r)
''',
    # the angle of the smaller over the larger magnitude (1 where both are infinite), then its quadrant by the
    # operands' sign bits, so that signed zeros land where torch.atan2 puts them (atan2(0, -0) = pi)
    "_atan2": f'''@triton.jit
def _atan2(y, x):
    ay = tl.abs(y)
    ax = tl.abs(x)
    hi = tl.maximum(ay, ax)
    lo = tl.minimum(ay, ax)
    r = _atan(tl.where(hi == 0, 0.0, tl.where(lo == hi, 1.0, lo / hi)))
    r = tl.where(ay > ax, {HALF_PI!r} - r, r)
    r = tl.where(x.to(tl.int32, bitcast=True) < 0, {PI!r} - r, r)
    r = tl.where(y.to(tl.int32, bitcast=True) < 0, -r, r)
    return tl.where((x != x) | (y != y), x + y, r)
''',
    "_erfinv": f'''@triton.jit
def _erfinv(x):
    w = -tl.log((1.0 - x) * (1.0 + x))
    s = tl.sqrt(w) - 3.0
    v = w - 2.5
    p = tl.where(w < 5.0, {horner("v", ERFINV_MID)}, {horner("s", ERFINV_TAIL)})
    return tl.where(tl.abs(x) == 1.0, x * float("inf"), p * x)
''',
    # lgamma(a) = lgamma(a + 8) - log(a (a + 1) ... (a + 7)) below 8, Stirling's series to 1/z^5 from 8 (under
    # 3e-10 there); below 0 the reflection lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x), the sine taken of
    # x's distance to its nearest integer, which fp32 holds exactly
    "_lgamma": f'''@triton.jit
def _lgamma(x):
    a = tl.where(x < 0, 1.0 - x, x)
    small = a < 8.0
    z = tl.where(small, a + 8.0, a)
    p = a * (a + 1.0) * (a + 2.0) * (a + 3.0) * (a + 4.0) * (a + 5.0) * (a + 6.0) * (a + 7.0)
    q = 1.0 / (z * z)
    g = (z - 0.5) * tl.log(z) - z + 0.9189385332046727 + ({horner("q", (1 / 12, -1 / 360, 1 / 1260))}) / z
    g = tl.where(small, g - tl.log(p), g)
    d = tl.abs(x - tl.floor(x + 0.5))
    g = tl.where(x < 0, tl.log({PI!r} / tl.sin({PI!r} * d)) - g, g)
    return tl.where(tl.abs(x) == float("inf"), float("inf"), g)
''',
    # digamma(a) = digamma(a + 8) - (1/a + ... + 1/(a + 7)) below 8, its asymptotic series to 1/z^6 from 8;
    # below 0 the reflection digamma(x) = digamma(1 - x) - pi cot(pi x), NaN at the negative integers as PyTorch
    "_digamma": f'''@triton.jit
def _digamma(x):
    a = tl.where(x < 0, 1.0 - x, x)
    small = a < 8.0
    z = tl.where(small, a + 8.0, a)
    s = 1.0 / a + 1.0 / (a + 1.0) + 1.0 / (a + 2.0) + 1.0 / (a + 3.0)
    s += 1.0 / (a + 4.0) + 1.0 / (a + 5.0) + 1.0 / (a + 6.0) + 1.0 / (a + 7.0)
    q = 1.0 / (z * z)
    g = tl.log(z) - 0.5 / z - q * ({horner("q", (1 / 12, -1 / 120, 1 / 252))})
    g = tl.where(small, g - s, g)
    d = {PI!r} * (x - tl.floor(x + 0.5))
    g = tl.where(x < 0, g - {PI!r} * tl.cos(d) / tl.sin(d), g)
    return tl.where((x < 0) & (d == 0), float("nan"), g)
''',
    # e^a times the rest, infinite where e^a overflows (past 88.72) as PyTorch's is, though i0 itself is finite to 91
    "_i0": f'''@triton.jit
def _i0(x):
    a = tl.abs(x)
    y = a * a * {1 / 3.75 ** 2!r}
    t = 3.75 / a
    return tl.where(a <= 3.75, {horner("y", I0_SMALL)}, tl.exp(a) * ({horner("t", I0_LARGE)}) / tl.sqrt(a))
''',
    "_i0e": f'''@triton.jit
def _i0e(x):
    a = tl.abs(x)
    y = a * a * {1 / 3.75 ** 2!r}
    t = 3.75 / a
    return tl.where(a <= 3.75, ({horner("y", I0_SMALL)}) * tl.exp(-a), ({horner("t", I0_LARGE)}) / tl.sqrt(a))
''',
    # the n-th derivative of digamma, n >= 1: x stepped up past 16 by the recurrence (each step a term
    # n! / x^(n+1), which also carries a negative x, up to -48, past its poles), then the asymptotic series in
    # 1 / x there, its coefficients (scaled by (-1)^(n+1)) from polygamma_coefficients
    "_polygamma": '''@triton.jit
def _polygamma(x, N: tl.constexpr, fact, a, b, d1, d2, d3, d4, d5):
    s = tl.zeros_like(x)
    for _ in range(64):
        low = x < 16.0
        p = x
        for _ in tl.static_range(N):
            p = p * x
        s = s + tl.where(low, 1.0 / p, 0.0)
        x = tl.where(low, x + 1.0, x)
    r = 1.0 / x
    q = r
    for _ in tl.static_range(N - 1):
        q = q * r
    r2 = r * r
    return fact * s + q * (a + r * b + r2 * (d1 + r2 * (d2 + r2 * (d3 + r2 * (d4 + r2 * d5)))))
''',
    "_bessel_j0": _bessel_j(0, 5.783185962946785, J0_SMALL, J0_P, J0_Q),
    "_bessel_j1": _bessel_j(1, 14.681970642123892, J1_SMALL, J1_P, J1_Q),
    # odd: x times the fit near zero, the sign of x times the fit past 3.75
    "_i1": f'''@triton.jit
def _i1(x):
    a = tl.abs(x)
    y = a * a * {1 / 3.75 ** 2!r}
    t = 3.75 / a
    large = tl.exp(a) * ({horner("t", I1_LARGE)}) / tl.sqrt(a)
    return tl.where(a <= 3.75, x * ({horner("y", I1_SMALL)}), tl.where(x < 0, -large, large))
''',
    "_i1e": f'''@triton.jit
def _i1e(x):
    a = tl.abs(x)
    y = a * a * {1 / 3.75 ** 2!r}
    t = 3.75 / a
    large = ({horner("t", I1_LARGE)}) / tl.sqrt(a)
    return tl.where(a <= 3.75, x * ({horner("y", I1_SMALL)}) * tl.exp(-a), tl.where(x < 0, -large, large))
''',
    # e^(x^2) erfc(x): from the fit where x >= 0; below 0, erfc(x) = 1 + erf(|x|) holds all its digits
    "_erfcx": f'''@triton.jit
def _erfcx(x):
    t = 2.0 / (2.0 + x)
    return tl.where(x >= 0, t * ({horner("t", ERFCX)}), tl.exp(x * x) * (1.0 - tl.erf(x)))
''',
    # log of the normal CDF: log(erfc(-x / sqrt 2) / 2) through erfcx, so the far left tail keeps its digits
    "_log_ndtr": '''@triton.jit
def _log_ndtr(x):
    u = x * 0.7071067811865476
    left = tl.log(0.5 * _erfcx(-u)) - u * u
    right = _log1p(-0.5 * tl.exp(-u * u) * _erfcx(u))
    return tl.where(x < 0, left, right)
''',
}
