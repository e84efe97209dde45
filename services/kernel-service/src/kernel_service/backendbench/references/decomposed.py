"""Helpers for the kernels that are PyTorch's own decompositions (this module's source heads each one)."""

import torch
from torch._decomp import decomposition_table  # noqa: F401 - the kernel below this source uses it

_HALF = (torch.float16, torch.bfloat16)


def _map(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _upcast(decomposition, args, kwargs):
    """The decomposition computed in float32 when an input is half precision, the result cast back."""
    half = [t.dtype for t in _flat((args, kwargs)) if t.dtype in _HALF]
    if not half:
        return decomposition(*args, **kwargs)
    up = _map((list(args), kwargs), lambda t: t.float() if t.dtype in _HALF else t)
    out = decomposition(*up[0], **up[1])
    return _map(out, lambda t: t.to(half[0]) if t.dtype == torch.float32 else t)


def _fresh(out):
    """The decomposition's result in memory of its own (it may return a view of an input)."""
    return _map(out, lambda t: t.clone())


def _flat(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat(v)]
    return []
