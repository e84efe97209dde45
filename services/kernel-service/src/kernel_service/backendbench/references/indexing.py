"""Reference kernels: gathers, scatters, masked and indexed writes, searches, uniques and segments, through
plain indexing (``aten.index``), ``scatter_``/``index_put_`` on copies, sorts and loops."""

import torch


def _coords(index, dim):
    """Advanced-indexing coordinates that address ``t[..., index[i, j], ...]`` along ``dim``."""
    if index.dim() == 0:
        return (index.to(torch.int64),)
    grids = list(torch.meshgrid(*[torch.arange(s, device=index.device) for s in index.shape], indexing="ij"))
    grids[dim] = index.to(torch.int64)
    return tuple(grids)


def gather(x, dim, index, sparse_grad=False):
    if index.numel() == 0:
        return torch.empty(index.shape, dtype=x.dtype, device=x.device)
    if x.dim() == 0:
        return x.reshape(1)[index.reshape(-1).to(torch.int64)].reshape(index.shape)
    return x[_coords(index, dim % x.dim())]


def _flat_positions(x, coords):
    return torch.arange(x.numel(), device=x.device).reshape(x.shape)[coords]


def scatter_add(x, dim, index, src):
    out = x.clone()
    if index.numel() == 0:
        return out
    if x.dim() == 0:
        return out + src.reshape(-1)[: index.numel()].sum()
    coords = _coords(index, dim % x.dim())
    vals = src[tuple(slice(0, s) for s in index.shape)]
    return out.index_put_(coords, vals, accumulate=True)


def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    """scatter_reduce.two: every source element reduced into its target in float64, all at once
    (``index_add``/``index_reduce`` on the flat positions; a loop over elements synced the GPU per
    element)."""
    d = dim % max(x.dim(), 1)
    acc = x.to(torch.float64).clone()
    out_shape = x.shape
    flat_acc = acc.reshape(-1)
    if x.dim() == 0:
        targets = torch.zeros(index.numel(), dtype=torch.int64, device=x.device)
        values = src.reshape(-1)[: index.numel()].to(torch.float64)
    else:
        targets = _flat_positions(x, _coords(index, d)).reshape(-1)
        values = src[tuple(slice(0, s) for s in index.shape)].reshape(-1).to(torch.float64)
    touched = torch.zeros(flat_acc.shape, dtype=torch.bool, device=x.device)
    touched[targets] = True
    if not include_self:
        identity = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -float("inf"), "amin": float("inf")}[reduce]
        flat_acc = torch.where(touched, torch.full_like(flat_acc, identity), flat_acc)
    if reduce in ("sum", "mean"):
        flat_acc = flat_acc.index_add(0, targets, values)
    else:
        flat_acc = flat_acc.index_reduce(0, targets, values, reduce, include_self=True)
    if reduce == "mean":
        count = torch.zeros_like(flat_acc).index_add(0, targets, torch.ones_like(values))
        denom = count + (1.0 if include_self else 0.0)
        mean = flat_acc / denom.clamp_min(1.0)
        if not x.dtype.is_floating_point:
            mean = torch.floor(mean)
        flat_acc = torch.where(touched, mean, flat_acc)
    return flat_acc.reshape(out_shape).to(x.dtype)


def _linear_positions(x, indices):
    """For ``x[indices]`` (aten.index semantics: None keeps a dim), the flat position of each element."""
    ids = torch.arange(x.numel(), device=x.device).reshape(x.shape)
    return torch.ops.aten.index.Tensor(ids, list(indices))


def index_put(x, indices, values, accumulate=False):
    out = x.contiguous().clone()
    pos = _linear_positions(x, indices)
    vals = values.to(x.dtype).expand(pos.shape).reshape(-1)
    flat = out.reshape(-1)
    if accumulate and _sums_in_float32(x, indices):
        acc = flat.float().scatter_add_(0, pos.reshape(-1), vals.float())
        return acc.to(x.dtype).reshape(x.shape)
    if accumulate:
        flat.scatter_add_(0, pos.reshape(-1), vals)
    else:
        flat.scatter_(0, pos.reshape(-1), vals)
    return flat.reshape(x.shape)


def _sums_in_float32(x, indices):
    """Whether the op sums a position's values in float32 and rounds once: on CUDA, a half-precision
    ``x`` indexed in every dimension (PyTorch's ``indexing_backward_kernel_stride_1``). Elsewhere it adds
    them one at a time in ``x``'s dtype (checked on the CPU), as ``scatter_add_`` does; in bfloat16 a
    different order or rounding moves a sum by whole units (on the H100, 4 of 18 inputs of
    ``_unsafe_masked_index_put_accumulate``)."""
    full = len(indices) == x.dim() and all(i is not None for i in indices)
    return x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and full


def index_reduce(x, dim, index, source, reduce, include_self=True):
    """index_reduce: slices of ``source`` reduced into the slices of ``x`` that ``index`` names, in
    float64, all at once (``scatter_reduce`` with the index spread over each slice; a loop over the
    index synced the GPU per entry)."""
    d = dim % max(x.dim(), 1)
    acc = x.to(torch.float64)
    src = source.to(torch.float64)
    if x.dim() == 0:
        acc, src = acc.reshape(1), src.reshape(1)
    shape = [1] * src.dim()
    shape[d] = -1
    spread = index.reshape(shape).to(torch.int64).expand(src.shape)
    out = acc.scatter_reduce(d, spread, src, reduce, include_self=include_self)
    return out.reshape(x.shape).to(x.dtype)


def masked_select(x, mask):
    xb, mb = torch.broadcast_tensors(x, mask)
    pos = torch.nonzero(mb.reshape(-1)).reshape(-1)
    return xb.reshape(-1)[pos]


def masked_scatter(x, mask, source):
    xb, mb = torch.broadcast_tensors(x, mask)
    out = xb.contiguous().clone()
    pos = torch.nonzero(mb.reshape(-1)).reshape(-1)
    flat = out.reshape(-1)
    flat[pos] = source.reshape(-1)[: pos.numel()].to(x.dtype)
    return flat.reshape(xb.shape)


def put(x, index, source, accumulate=False):
    out = x.contiguous().clone().reshape(-1)
    idx = torch.remainder(index.reshape(-1), max(x.numel(), 1))
    out.index_put_((idx,), source.reshape(-1).to(x.dtype), accumulate=accumulate)
    return out.reshape(x.shape)


def take(x, index):
    return x.reshape(-1)[index.to(torch.int64).reshape(-1)].reshape(index.shape).clone()


def _clamped(x, indices):
    out: list[torch.Tensor | None] = []
    for d, idx in enumerate(indices):
        if idx is None:
            out.append(None)
            continue
        size = x.shape[d]
        out.append(torch.clamp(idx, -size, size - 1) if size else idx)
    return out


def _unsafe_masked_index(x, mask, indices, fill):
    taken = torch.ops.aten.index.Tensor(x, _clamped(x, indices))
    return torch.where(mask, taken, torch.as_tensor(fill, dtype=x.dtype, device=x.device))


def _unsafe_masked_index_put_accumulate(x, mask, indices, values):
    masked = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return index_put(x, _clamped(x, indices), masked, accumulate=True)


def _searchsorted(seq, values, out_int32, right, side, sorter):
    if side is not None:
        right = side == "right"
    if sorter is not None:
        seq = torch.gather(seq, -1, sorter)
    v = values.unsqueeze(-1)
    s = seq if seq.dim() == 1 else seq.unsqueeze(-2)
    hits = (s <= v) if right else (s < v)
    nan_v = torch.isnan(v) if v.dtype.is_floating_point else torch.zeros_like(v, dtype=torch.bool)
    if right:
        hits = hits | nan_v
    else:
        hits = hits | (nan_v & ~torch.isnan(s) if s.dtype.is_floating_point else hits)
    count = hits.sum(-1)
    return count.to(torch.int32 if out_int32 else torch.int64)


def searchsorted(seq, values, out_int32=False, right=False, side=None, sorter=None):
    """searchsorted.Tensor and searchsorted.Scalar: how many sorted entries lie before each value."""
    if not isinstance(values, torch.Tensor):
        values = torch.tensor(values, dtype=seq.dtype, device=seq.device)
        return _searchsorted(seq, values.reshape(1), out_int32, right, side, sorter).reshape(())
    return _searchsorted(seq, values, out_int32, right, side, sorter)


def _runs(rows):
    """Start of every run of equal consecutive rows (a (n, m) tensor), as a bool vector."""
    if rows.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool, device=rows.device)
    if rows.shape[1] == 0:
        differs = torch.zeros(rows.shape[0] - 1, dtype=torch.bool, device=rows.device)
        return torch.cat([torch.ones(1, dtype=torch.bool, device=rows.device), differs])
    differs = (rows[1:] != rows[:-1]).any(-1)
    return torch.cat([torch.ones(1, dtype=torch.bool, device=rows.device), differs])


def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    if dim is None:
        flat = x.reshape(-1)
        starts = _runs(flat.reshape(-1, 1))
        groups = torch.cumsum(starts.to(torch.int64), 0) - 1
        values = flat[starts]
        counts = torch.bincount(groups, minlength=values.numel()) if flat.numel() else groups
        inverse = (
            groups.reshape(x.shape) if return_inverse else torch.zeros(0, dtype=torch.int64, device=x.device)
        )
        counts = counts if return_counts else torch.zeros(0, dtype=torch.int64, device=x.device)
        return values, inverse, counts
    moved = x.movedim(dim, 0)
    rows = moved.reshape(moved.shape[0], -1)
    starts = _runs(rows)
    groups = torch.cumsum(starts.to(torch.int64), 0) - 1
    values = moved[starts].movedim(0, dim)
    counts = torch.bincount(groups, minlength=int(starts.sum().tolist())) if rows.shape[0] else groups
    inverse = groups if return_inverse else torch.zeros(0, dtype=torch.int64, device=x.device)
    counts = counts if return_counts else torch.zeros(0, dtype=torch.int64, device=x.device)
    return values, inverse, counts


def unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    """Unique slices along ``dim``, in lexicographic order, with the inverse map and the counts."""
    moved = x.movedim(dim, 0)
    n = moved.shape[0]
    rows = moved.reshape(n, -1)
    order = torch.arange(n, device=x.device)
    for col in reversed(range(rows.shape[1])):
        order = order[torch.sort(rows[order, col], stable=True).indices]
    ordered = rows[order]
    starts = _runs(ordered)
    groups = torch.cumsum(starts.to(torch.int64), 0) - 1
    inverse = torch.empty(n, dtype=torch.int64, device=x.device)
    inverse[order] = groups
    values = moved[order][starts].movedim(0, dim)
    counts = torch.bincount(groups, minlength=int(starts.sum().tolist())) if n else groups
    return values, inverse, counts


def segment_reduce(
    data, reduce, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None
):
    """Reduce consecutive segments of ``data`` along ``axis`` (lengths or offsets give their sizes)."""
    if offsets is not None:
        bounds = offsets.to(torch.int64)
        sizes = bounds[..., 1:] - bounds[..., :-1]
    else:
        sizes = lengths.to(torch.int64)
    if sizes.dim() > 1:
        raise NotImplementedError("batched segment lengths")
    d = axis % data.dim()
    y = data.to(torch.float64).movedim(d, 0)
    outs = []
    start = 0
    empty_value = {"max": -float("inf"), "min": float("inf"), "sum": 0.0, "prod": 1.0, "mean": float("nan")}
    for size in sizes.tolist():
        seg = y[start : start + size]
        start += size
        if size == 0:
            fill = empty_value[reduce] if initial is None else float(initial)
            outs.append(torch.full(y.shape[1:], fill, dtype=torch.float64, device=data.device))
            continue
        if reduce == "max":
            r = torch.amax(seg, 0)
        elif reduce == "min":
            r = torch.amin(seg, 0)
        elif reduce == "sum":
            r = seg.sum(0)
        elif reduce == "prod":
            r = torch.cumprod(seg, 0)[-1]
        else:
            r = seg.sum(0)
        if initial is not None:
            init = torch.full_like(r, float(initial))
            if reduce == "max":
                r = torch.maximum(r, init)
            elif reduce == "min":
                r = torch.minimum(r, init)
            elif reduce in ("sum", "mean"):
                r = r + init
            else:
                r = r * init
        if reduce == "mean":
            r = r / size
        outs.append(r)
    if not outs:
        return torch.zeros((0, *y.shape[1:]), dtype=data.dtype, device=data.device).movedim(0, d)
    return torch.stack(outs).movedim(0, d).to(data.dtype)
