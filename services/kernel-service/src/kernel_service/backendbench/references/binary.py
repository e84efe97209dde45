"""Reference kernels: elementwise functions of two tensors (arithmetic, comparisons, min/max, remainders,
powers), through other ops, values in float64 where rounding matters, PyTorch's type promotion."""

import math

import torch


def _dtype(a, b):
    return torch.result_type(a, b)


def _f64(v, like):
    return torch.as_tensor(v, device=like.device).to(torch.float64)


def _pair(a, b):
    """Both operands as float64 tensors of the broadcast shape, and the promoted dtype."""
    dtype = _dtype(a, b)
    x, y = torch.broadcast_tensors(_f64(a, a), _f64(b, a))
    return x, y, dtype


def _float_out(dtype):
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def add(a, b, alpha=1):
    return torch.sub(a, b, alpha=-alpha)


def sub(a, b, alpha=1):
    return torch.add(a, b, alpha=-alpha)


def mul(a, b):
    """``addcmul`` on a zero tensor: one product, rounded once (in float32 for half types, as ``mul``).
    (A ``prod`` over the stacked pair compiled NVRTC kernels in every new process on the H100, 9.5 s of
    a 30 s opinfo run: only the reference process may fill the kernel cache, and it never runs ``prod``
    on those inputs.) Bool is ``logical_and``; complex operands keep the ``prod`` form."""
    dtype = torch.result_type(a, b)
    b = torch.as_tensor(b, dtype=dtype, device=a.device)
    x, y = torch.broadcast_tensors(a.to(dtype), b)
    if dtype == torch.bool:
        return torch.logical_and(x, y)
    if not dtype.is_complex:
        return torch.addcmul(torch.zeros_like(x), x, y)
    return torch.stack([x, y]).prod(dim=0)


def _compute_dtype(dtype, device):
    """The dtype PyTorch's division kernels work in: the dtype itself on the CPU (half types round after
    every step there), float32 for half types on CUDA (their opmath type)."""
    if dtype in (torch.float16, torch.bfloat16) and device.type == "cuda":
        return torch.float32
    return dtype


def _quotient(x, y, c):
    """x / y (float64 operands) rounded to ``c`` as a division in ``c`` rounds it: the float64 product
    with the reciprocal is within an ulp of float64, which rounding to float32 absorbs; half types divide
    in float32 and round once more."""
    q = x * torch.reciprocal(y)
    if c == torch.float64:
        return q
    return q.to(torch.float32).to(c)


def _int_quotient(x, y, floor):
    """Exact integer division of int64 tensors (trunc or floor) without a divide op: a float64 guess,
    then one correction step from the remainder."""
    q = torch.trunc(x.to(torch.float64) * torch.reciprocal(y.to(torch.float64))).to(torch.int64)
    r = x - q * y
    too_far = (r != 0) & ((r < 0) != (x < 0)) if not floor else torch.zeros_like(r, dtype=torch.bool)
    q = torch.where(too_far, q - torch.sign(x) * torch.sign(y), q)
    r = x - q * y
    short = (r.abs() >= y.abs()) & (y != 0)
    q = torch.where(short, q + torch.sign(x) * torch.sign(y), q)
    if floor:
        r = x - q * y
        q = torch.where((r != 0) & ((r < 0) != (y < 0)), q - 1, q)
    return q


def _floor_div(x, y, c):
    """Python-style floor division of floats, as PyTorch computes it in ``c``: from fmod, so that
    ``a == b * q + fmod`` holds (the floor of the rounded quotient can be off by one)."""
    xc, yc = x.to(c), y.to(c)
    mod = torch.fmod(xc, yc)
    div = _quotient((xc - mod).to(torch.float64), y, c)
    div = torch.where((mod != 0) & ((yc < 0) != (mod < 0)), div - 1, div)
    floored = torch.floor(div)
    floored = torch.where(div - floored > 0.5, floored + 1, floored)
    zero = torch.copysign(torch.zeros_like(div), _quotient(x, y, c))
    out = torch.where(div != 0, floored, zero)
    return torch.where(yc == 0, _quotient(x, y, c), out)


def div(a, b, rounding_mode=None):
    x, y, dtype = _pair(a, b)
    device = x.device
    if rounding_mode is None:
        out = _float_out(dtype)
        return _quotient(x, y, _compute_dtype(out, device)).to(out)
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError(f"unknown rounding_mode {rounding_mode!r}")
    if not dtype.is_floating_point:
        xi, yi = torch.broadcast_tensors(
            torch.as_tensor(a).to(torch.int64), torch.as_tensor(b).to(torch.int64)
        )
        return _int_quotient(xi, yi, rounding_mode == "floor").to(dtype)
    c = _compute_dtype(dtype, device)
    if rounding_mode == "trunc":
        return torch.trunc(_quotient(x, y, c)).to(dtype)
    return _floor_div(x, y, c).to(dtype)


def eq(a, b):
    return torch.logical_and(torch.le(a, b), torch.ge(a, b))


def ne(a, b):
    return torch.logical_not(torch.logical_and(torch.le(a, b), torch.ge(a, b)))


def lt(a, b):
    return torch.gt(torch.as_tensor(b, device=a.device), a)


def le(a, b):
    return torch.ge(torch.as_tensor(b, device=a.device), a)


def gt(a, b):
    return torch.lt(torch.as_tensor(b, device=a.device), a)


def ge(a, b):
    return torch.le(torch.as_tensor(b, device=a.device), a)


def _nan_where(mask, out):
    if not out.dtype.is_floating_point:
        return out
    return torch.where(mask, torch.full_like(out, math.nan), out)


def maximum(a, b):
    out = torch.where(a > b, a, b)
    return _nan_where(torch.isnan(a) | torch.isnan(b), out)


def minimum(a, b):
    out = torch.where(a < b, a, b)
    return _nan_where(torch.isnan(a) | torch.isnan(b), out)


def fmax(a, b):
    out = torch.where(a > b, a, b)
    out = torch.where(torch.isnan(a), b, out)
    return torch.where(torch.isnan(b), a, out).to(_dtype(a, b))


def fmin(a, b):
    out = torch.where(a < b, a, b)
    out = torch.where(torch.isnan(a), b, out)
    return torch.where(torch.isnan(b), a, out).to(_dtype(a, b))


def _fmod64(x, y):
    return x - torch.trunc(x / y) * y


def fmod(a, b):
    x, y, dtype = _pair(a, b)
    return _fmod64(x, y).to(dtype)


def remainder(a, b):
    x, y, dtype = _pair(a, b)
    m = _fmod64(x, y)
    wrong_sign = (m != 0) & ((m < 0) != (y < 0))
    return torch.where(wrong_sign, m + y, m).to(dtype)


def pow_(a, b):
    x, y, dtype = _pair(a, b)
    mag = torch.exp(y * torch.log(x.abs()))
    integral = y == torch.trunc(y)
    odd = integral & (torch.remainder(y, 2.0) == 1)
    signed = torch.where(odd, -mag, mag)
    out = torch.where(x < 0, torch.where(integral, signed, torch.full_like(mag, math.nan)), mag)
    one = torch.ones_like(out)
    out = torch.where((y == 0) | (x == 1), one, out)
    return out.to(dtype)


def hypot(a, b):
    x, y, dtype = _pair(a, b)
    return torch.sqrt(x * x + y * y).to(dtype)


_BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def nextafter(a, b):
    """The next representable value of ``a`` toward ``b``: one step of the bit pattern."""
    dtype = _dtype(a, b)
    x, y = torch.broadcast_tensors(
        torch.as_tensor(a).to(dtype), torch.as_tensor(b, device=a.device).to(dtype)
    )
    x, y = x.contiguous(), y.contiguous()
    bits = x.view(_BITS[dtype]).to(torch.int64)
    away = (y > x) == (x > 0)
    stepped = torch.where(away, bits + 1, bits - 1).to(_BITS[dtype]).view(dtype)
    tiny = torch.ones((), dtype=_BITS[dtype], device=x.device).view(dtype)
    from_zero = torch.copysign(tiny.expand_as(y), y)
    out = torch.where(x == 0, from_zero, stepped)
    out = torch.where(x == y, y, out)
    return torch.where(torch.isnan(x) | torch.isnan(y), x + y, out)
