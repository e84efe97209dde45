"""Reference kernels: views and layout ops. A view must come back as a view of the same input (the
judge checks aliasing), so these build it with ``as_strided``/``narrow``/``set_`` over the input's memory."""

import torch


def select(x, dim, index):
    d = dim % x.dim()
    i = index % x.shape[d]
    sizes = [s for k, s in enumerate(x.shape) if k != d]
    strides = [s for k, s in enumerate(x.stride()) if k != d]
    return x.as_strided(sizes, strides, x.storage_offset() + i * x.stride(d))


def squeeze(x, dim=None):
    """squeeze.default (every size-1 dim), squeeze.dim and squeeze.dims."""
    if x.dim() == 0:
        return x.as_strided([], [], x.storage_offset())
    if dim is None:
        drop = {k for k, s in enumerate(x.shape) if s == 1}
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        drop = {d % x.dim() for d in dims if x.shape[d % x.dim()] == 1}
    sizes = [s for k, s in enumerate(x.shape) if k not in drop]
    strides = [s for k, s in enumerate(x.stride()) if k not in drop]
    return x.as_strided(sizes, strides, x.storage_offset())


def as_strided(x, size, stride, storage_offset=None):
    offset = x.storage_offset() if storage_offset is None else storage_offset
    return torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage(), offset, size, stride)


def as_strided_scatter(x, src, size, stride, storage_offset=None):
    out = x.clone()
    out.as_strided(size, stride, 0 if storage_offset is None else storage_offset).copy_(src)
    return out


def roll(x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        flat = x.reshape(-1)
        n = flat.numel()
        if n == 0:
            return x.clone()
        idx = torch.remainder(torch.arange(n, device=x.device) - shifts[0], n)
        return flat.index_select(0, idx).reshape(x.shape)
    out = x
    for s, d in zip(shifts, dims, strict=True):
        n = x.shape[d]
        if n == 0:
            continue
        idx = torch.remainder(torch.arange(n, device=x.device) - s, n)
        out = out.index_select(d, idx)
    return out.clone() if out is x else out
