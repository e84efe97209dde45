"""Reference kernels: elementwise functions of one tensor, each through other ops (an identity, a
series) in float64, rounded once to the input's dtype."""

import math

import torch


def _f64(x):
    return x.to(torch.float64)


def _out(y, like):
    return y.to(like.dtype if like.dtype.is_floating_point else torch.get_default_dtype())


def abs_(x):
    return torch.where(x < 0, torch.sub(torch.zeros((), dtype=x.dtype, device=x.device), x), x)


def neg(x):
    return torch.sub(torch.zeros((), dtype=x.dtype, device=x.device), x)


def relu(x):
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)


def sigmoid(x):
    y = x.float()
    return torch.reciprocal(torch.exp(torch.sub(torch.zeros((), device=x.device), y)) + 1).to(x.dtype)


def sqrt(x):
    return _out(torch.pow(_f64(x), 0.5), x)


def rsqrt(x):
    return _out(torch.pow(_f64(x), -0.5), x)


def reciprocal(x):
    return _out(torch.div(1.0, _f64(x)), x)


def exp(x):
    return _out(torch.pow(2.0, _f64(x) * (1.0 / math.log(2.0))), x)


def exp2(x):
    return _out(torch.pow(2.0, _f64(x)), x)


def expm1(x):
    return _out(torch.exp(_f64(x)) - 1.0, x)


def log(x):
    return _out(torch.log2(_f64(x)) * math.log(2.0), x)


def log2(x):
    return _out(torch.log(_f64(x)) / math.log(2.0), x)


def log10(x):
    return _out(torch.log(_f64(x)) / math.log(10.0), x)


def log1p(x):
    return _out(torch.log(1.0 + _f64(x)), x)


def sin(x):
    return _out(torch.cos(_f64(x) - math.pi / 2), x)


def cos(x):
    return _out(torch.sin(_f64(x) + math.pi / 2), x)


def tan(x):
    y = _f64(x)
    return _out(torch.sin(y) / torch.cos(y), x)


def sinh(x):
    y = _f64(x)
    return _out((torch.exp(y) - torch.exp(-y)) / 2, x)


def cosh(x):
    y = _f64(x)
    return _out((torch.exp(y) + torch.exp(-y)) / 2, x)


def tanh(x):
    y = _f64(x)
    t = torch.expm1(-2 * y.abs())
    return _out(torch.copysign(-t / (t + 2), y), x)


def _atan2(y, x):
    """atan2 through atan and the half-angle formula (float64 tensors of one shape)."""
    r = torch.sqrt(x * x + y * y)
    right = torch.atan(y / x)
    left = 2 * torch.atan((r - x) / y)
    on_axis = torch.where(
        torch.copysign(torch.ones_like(x), x) > 0, y, torch.copysign(torch.full_like(y, math.pi), y)
    )
    out = torch.where(x > 0, right, torch.where(y != 0, left, on_axis))
    return torch.where(torch.isnan(x) | torch.isnan(y), x + y, out)


def atan2(y, x):
    dtype = torch.result_type(y, x)
    yb, xb = torch.broadcast_tensors(torch.as_tensor(y), torch.as_tensor(x))
    out = _atan2(_f64(yb), _f64(xb))
    return out.to(dtype if dtype.is_floating_point else torch.get_default_dtype())


def asin(x):
    y = _f64(x)
    return _out(_atan2(y, torch.sqrt(1 - y * y)), x)


def acos(x):
    y = _f64(x)
    return _out(_atan2(torch.sqrt(1 - y * y), y), x)


def atan(x):
    y = _f64(x)
    return _out(torch.asin(y / torch.sqrt(1 + y * y)), x)


def asinh(x):
    y = _f64(x)
    a = y.abs()
    return _out(torch.copysign(torch.log1p(a + a * a / (1 + torch.sqrt(1 + a * a))), y), x)


def acosh(x):
    y = _f64(x)
    return _out(torch.log(y + torch.sqrt(y * y - 1)), x)


def atanh(x):
    y = _f64(x)
    return _out(0.5 * torch.log1p(2 * y / (1 - y)), x)


def erf(x):
    return _out(1 - torch.erfc(_f64(x)), x)


def erfc(x):
    return _out(1 - torch.erf(_f64(x)), x)


_LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)


def _lgamma_pos(z):
    """log Gamma(z) for z >= 0.5 (Lanczos, g = 7)."""
    z = z - 1
    acc = torch.full_like(z, _LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], start=1):
        acc = acc + c / (z + i)
    t = z + 7.5
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * torch.log(t) - t + torch.log(acc)


def lgamma(x):
    y = _f64(x)
    small = y < 0.5
    safe = torch.where(small, 1 - y, y)
    pos = _lgamma_pos(safe)
    reflected = math.log(math.pi) - torch.log(torch.sin(math.pi * y).abs()) - pos
    out = torch.where(small, reflected, pos)
    pole = (y <= 0) & (y == torch.floor(y))
    out = torch.where(pole, torch.full_like(y, math.inf), out)
    out = torch.where(torch.isinf(y), torch.full_like(y, math.inf), out)
    return _out(out, x)


def _digamma_pos(z):
    """digamma(z) for z >= 0.5: shift past 10, then the asymptotic series."""
    acc = torch.zeros_like(z)
    for _ in range(10):
        low = z < 10
        acc = acc - torch.where(low, 1 / z, torch.zeros_like(z))
        z = torch.where(low, z + 1, z)
    inv2 = 1 / (z * z)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return acc + torch.log(z) - 0.5 / z - series


def digamma(x):
    y = _f64(x)
    small = y < 0.5
    pos = _digamma_pos(torch.where(small, 1 - y, y))
    out = torch.where(small, pos - math.pi / torch.tan(math.pi * y), pos)
    zero = y == 0
    out = torch.where(
        zero, torch.copysign(torch.full_like(y, math.inf), -torch.copysign(torch.ones_like(y), y)), out
    )
    negint = (y < 0) & (y == torch.floor(y))
    out = torch.where(negint, torch.full_like(y, math.nan), out)
    return _out(out, x)


def _floor64(y):
    return torch.where(torch.isinf(y), y, y - torch.remainder(y, 1.0))


def floor(x):
    if not x.dtype.is_floating_point:
        return x.clone()
    return _floor64(_f64(x)).to(x.dtype)


def ceil(x):
    if not x.dtype.is_floating_point:
        return x.clone()
    return (-_floor64(-_f64(x))).to(x.dtype)


def trunc(x):
    if not x.dtype.is_floating_point:
        return x.clone()
    y = _f64(x)
    return torch.where(torch.isinf(y), y, y - torch.fmod(y, 1.0)).to(x.dtype)


def _round_half_even(y):
    f = _floor64(y)
    d = y - f
    even = torch.remainder(f, 2.0) == 0
    up = (d > 0.5) | ((d == 0.5) & ~even)
    return torch.where(up, f + 1, f)


def round_(x, decimals=0):
    """round.default and round.decimals: x * 10^d rounded half to even in float32 (opmath), as PyTorch."""
    if not x.dtype.is_floating_point:
        return x.clone()
    y = x.float() if x.dtype != torch.float64 else x
    if decimals == 0:
        return _round_half_even(_f64(y)).to(x.dtype)
    scale = torch.tensor(10.0 ** abs(decimals), dtype=y.dtype, device=x.device)
    if decimals > 0:
        return (_round_half_even(_f64(y * scale)).to(y.dtype) / scale).to(x.dtype)
    return (_round_half_even(_f64(y / scale)).to(y.dtype) * scale).to(x.dtype)


def sign(x):
    if x.dtype == torch.bool:
        return x.clone()
    one = torch.ones((), dtype=x.dtype, device=x.device)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    out = torch.where(x > 0, one, torch.where(x < 0, -one, zero))
    return torch.where(x != x, x, out) if x.dtype.is_floating_point else out


def signbit(x):
    if not x.dtype.is_floating_point:
        return x < 0
    return torch.copysign(torch.ones_like(_f64(x)), _f64(x)) < 0


def frexp(x):
    y = _f64(x)
    a = y.abs()
    finite = torch.isfinite(y) & (a > 0)
    safe = torch.where(finite, a, torch.ones_like(a))
    e = torch.floor(torch.log2(safe)) + 1
    m = y / torch.pow(2.0, e)
    too_big = m.abs() >= 1
    e = torch.where(too_big, e + 1, e)
    m = torch.where(too_big, m / 2, m)
    too_small = m.abs() < 0.5
    e = torch.where(too_small, e - 1, e)
    m = torch.where(too_small, m * 2, m)
    m = torch.where(finite, m, y)
    e = torch.where(finite, e, torch.zeros_like(e))
    return m.to(x.dtype), e.to(torch.int32)


def angle(x):
    if x.is_complex():
        raise NotImplementedError("complex angle")
    y = _f64(x)
    out = torch.where(y < 0, torch.full_like(y, math.pi), torch.zeros_like(y))
    return _out(torch.where(torch.isnan(y), y, out), x)
