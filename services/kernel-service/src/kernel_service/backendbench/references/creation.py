"""Reference kernels: tensors made from scratch or from another's shape (ranges, fills, copies), and the
one-element read-out; range values computed in float64 as PyTorch's kernels do in their accumulate type."""

import math

import torch


def _default(dtype, *values):
    if dtype is not None:
        return dtype
    if any(isinstance(v, bool) for v in values) and all(isinstance(v, bool) for v in values):
        return torch.bool
    if all(isinstance(v, int) for v in values):
        return torch.int64
    return torch.get_default_dtype()


def _scalar(v):
    return v.tolist() if isinstance(v, torch.Tensor) else v


def _from_list(values, dtype, device):
    out = torch.tensor(values, dtype=torch.float64, device=device)
    if not dtype.is_floating_point:
        out = torch.trunc(out)
    return out.to(dtype)


def arange(start, end=None, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    """arange.default (end), arange.start (start, end) and arange.start_step."""
    if end is None:
        start, end = 0, start
    start, end, step = _scalar(start), _scalar(end), _scalar(step)
    out_dtype = _default(dtype, start, end, step)
    n = max(0, math.ceil((end - start) / step))
    return _from_list([start + step * i for i in range(n)], out_dtype, device)


def full_like(x, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    out = torch.empty_like(x, dtype=dtype or x.dtype, device=device or x.device)
    return out.fill_(fill_value)


def clone(x, memory_format=None):
    if memory_format is None or memory_format == torch.preserve_format:
        return torch.empty_like(x).copy_(x)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)


def _local_scalar_dense(x):
    return x.reshape(()).tolist()
