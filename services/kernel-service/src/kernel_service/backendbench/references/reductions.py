"""Reference kernels: reductions (sum, mean, extrema, products, moments, order statistics, whole-tensor
predicates), each through other reductions or a sort, accumulated in float64 where rounding matters."""

import torch


def _dims(x, dim):
    """The reduced dims as a sorted list of non-negative ints (all of them for None or [])."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(x.dim(), 1) for d in dims})


def _count(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d] if x.dim() else 1
    return n


def _reduced_shape(x, dims, keepdim):
    if keepdim:
        return [1 if i in dims else s for i, s in enumerate(x.shape)]
    return [s for i, s in enumerate(x.shape) if i not in dims]


def sum_(x, dim=None, keepdim=False, dtype=None):
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64)
    dims = _dims(x, dim)
    count = _count(x, dims)
    if count == 0:
        return torch.zeros(_reduced_shape(x, dims, keepdim), dtype=out_dtype, device=x.device)
    if x.dim() == 0:
        return x.to(out_dtype).clone()
    acc = x.to(torch.float64)
    return (torch.mean(acc, dim=dims, keepdim=keepdim) * count).to(out_dtype)


def mean(x, dim=None, keepdim=False, dtype=None):
    dims = _dims(x, dim)
    count = _count(x, dims)
    if x.dim() == 0:
        return x.to(torch.float64).to(dtype or x.dtype)
    total = torch.sum(x.to(torch.float64), dim=dims, keepdim=keepdim)
    return (total / count).to(dtype or x.dtype)


def _extreme(x, dim, keepdim, largest):
    dims = _dims(x, dim)
    if x.dim() == 0:
        return x.clone()
    out = x
    for d in reversed(dims):
        out = (torch.max(out, dim=d, keepdim=True) if largest else torch.min(out, dim=d, keepdim=True)).values
    if not keepdim:
        for d in reversed(dims):
            out = out.squeeze(d)
    return out.clone() if out is x else out


def amax(x, dim=(), keepdim=False):
    return _extreme(x, dim, keepdim, True)


def amin(x, dim=(), keepdim=False):
    return _extreme(x, dim, keepdim, False)


def max_(x, dim=None, keepdim=False):
    """max.default (the largest element) and max.dim (values and indices along dim)."""
    if dim is None:
        return torch.amax(x)
    return torch.amax(x, dim, keepdim), torch.argmax(x, dim, keepdim)


def min_(x, dim=None, keepdim=False):
    if dim is None:
        return torch.amin(x)
    return torch.amin(x, dim, keepdim), torch.argmin(x, dim, keepdim)


def _arg_extreme(x, dim, keepdim, largest):
    if dim is None:
        flat = x.reshape(-1)
        pick = torch.max(flat, 0) if largest else torch.min(flat, 0)
        idx = pick.indices
        return idx.reshape([1] * x.dim()) if keepdim else idx
    pick = torch.max(x, dim, keepdim) if largest else torch.min(x, dim, keepdim)
    return pick.indices


def argmax(x, dim=None, keepdim=False):
    return _arg_extreme(x, dim, keepdim, True)


def argmin(x, dim=None, keepdim=False):
    return _arg_extreme(x, dim, keepdim, False)


def prod(x, dim=None, keepdim=False, dtype=None):
    """prod.default and prod.dim_int: the last entry of a cumulative product in float64."""
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64)
    acc_dtype = torch.float64 if out_dtype.is_floating_point else torch.int64
    if dim is None:
        flat = x.reshape(-1).to(acc_dtype)
        if flat.numel() == 0:
            return torch.ones((), dtype=out_dtype, device=x.device)
        return torch.cumprod(flat, 0)[-1].to(out_dtype)
    if x.dim() == 0:
        return x.to(out_dtype).clone()
    d = dim % x.dim()
    if x.shape[d] == 0:
        shape = _reduced_shape(x, [d], keepdim)
        return torch.ones(shape, dtype=out_dtype, device=x.device)
    out = torch.cumprod(x.to(acc_dtype), d).narrow(d, x.shape[d] - 1, 1)
    return (out if keepdim else out.squeeze(d)).to(out_dtype)


def var(x, dim=None, correction=None, keepdim=False):
    dims = _dims(x, dim)
    c = 1 if correction is None else correction
    y = x.to(torch.float64)
    n = _count(x, dims)
    if x.dim() == 0:
        dev = torch.zeros_like(y)
        return (dev / max(n - c, 0)).to(x.dtype)
    mu = torch.mean(y, dim=dims, keepdim=True)
    ss = torch.sum((y - mu) * (y - mu), dim=dims, keepdim=keepdim)
    return (ss / max(n - c, 0)).to(x.dtype)


def kthvalue(x, k, dim=-1, keepdim=False):
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    values, indices = torch.sort(x, dim=dim, stable=True)
    v = values.narrow(dim, k - 1, 1)
    i = indices.narrow(dim, k - 1, 1)
    return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))


def _median(x, dim, keepdim, ignore_nan):
    """The lower median along ``dim`` and its index; NaN sorts last (``ignore_nan``: skipped, else it
    is the answer, at its first index)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    values, indices = torch.sort(x, dim=dim, stable=True)
    nan = torch.isnan(x)
    if ignore_nan:
        valid = x.shape[dim] - nan.sum(dim=dim, keepdim=True)
        k = torch.clamp(torch.div(valid - 1, 2, rounding_mode="floor"), min=0)
        v, i = torch.gather(values, dim, k), torch.gather(indices, dim, k)
    else:
        k = (x.shape[dim] - 1) // 2
        v, i = values.narrow(dim, k, 1), indices.narrow(dim, k, 1)
        has_nan = nan.any(dim=dim, keepdim=True)
        v = torch.where(has_nan, torch.full_like(v, float("nan")), v)
        i = torch.where(has_nan, torch.argmax(nan.to(torch.int64), dim=dim, keepdim=True), i)
    return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))


def median(x, dim=None, keepdim=False):
    """median.default (lower median of all elements, NaN if any) and median.dim (values, indices)."""
    if dim is None:
        return _median(x.reshape(-1), 0, False, False)[0]
    return _median(x, dim, keepdim, False)


def nanmedian(x, dim=None, keepdim=False):
    if dim is None:
        return _median(x.reshape(-1), 0, False, True)[0]
    return _median(x, dim, keepdim, True)


def mode(x, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and the index of
    its last occurrence, for every row at once (a loop over rows and values synced the GPU per value:
    157 ms for one opinfo input on the H100)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    n = rows.shape[-1]
    ordered = torch.sort(rows, dim=-1, stable=True).values
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    run = starts.cumsum(-1) - 1  # each position's run of equal values, in ascending order
    counts = torch.zeros(rows.shape, dtype=torch.int64, device=x.device)
    counts.scatter_add_(1, run, torch.ones_like(run))
    best = counts.argmax(-1, keepdim=True)  # the first (smallest) of the most frequent values
    first = (run == best).to(torch.uint8).argmax(-1, keepdim=True)
    values = ordered.gather(1, first)
    hits = (rows == values).to(torch.uint8)
    indices = (n - 1) - hits.flip(-1).argmax(-1, keepdim=True)  # its last occurrence
    shape = list(moved.shape[:-1])
    v, i = values.reshape(shape), indices.reshape(shape)
    if keepdim:
        v, i = v.unsqueeze(dim % x.dim()), i.unsqueeze(dim % x.dim())
    return v, i


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    x, y = torch.broadcast_tensors(a.to(torch.float64), b.to(torch.float64))
    close = (x - y).abs() <= atol + rtol * y.abs()
    close = close | ((x == y) & torch.isinf(x))
    if equal_nan:
        close = close | (torch.isnan(x) & torch.isnan(y))
    return bool(close.all().tolist())


def equal(a, b):
    if a.shape != b.shape:
        return False
    return bool((a == b).all().tolist())


def histc(x, bins=100, min=0, max=0):
    y = x.to(torch.float64).reshape(-1)
    lo, hi = float(min), float(max)
    if lo == hi and y.numel():
        lo, hi = float(y.min().tolist()), float(y.max().tolist())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    inside = (y >= lo) & (y <= hi)
    idx = torch.floor((y - lo) * bins / (hi - lo)).to(torch.int64)
    idx = torch.clamp(idx, 0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.float64, device=x.device)
    counts = counts.index_add(0, idx[inside], torch.ones_like(y[inside]))
    return counts.to(x.dtype)
