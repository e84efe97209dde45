"""Reference kernels: sorting without a sort op (each element's rank counted by comparisons, NaN largest,
ties in index order: a stable sort), and what builds on it (topk, the bitwise hash)."""

import torch


def _less(a, b):
    """a < b in sort order (NaN after every number, NaNs equal)."""
    if not a.dtype.is_floating_point:
        return a < b
    na, nb = torch.isnan(a), torch.isnan(b)
    return (~na & nb) | (~na & ~nb & (a < b))


def _equal(a, b):
    if not a.dtype.is_floating_point:
        return a == b
    return (torch.isnan(a) & torch.isnan(b)) | (a == b)


def _rank(y, descending):
    """Each element's position in a stable sort of the last dim."""
    a, b = y.unsqueeze(-1), y.unsqueeze(-2)
    before = _less(a, b) if descending else _less(b, a)
    n = y.shape[-1]
    idx = torch.arange(n, device=y.device)
    earlier = (idx.unsqueeze(0) < idx.unsqueeze(1)) & _equal(a, b)
    return (before | earlier).sum(-1)


def sort(x, dim=-1, descending=False, stable=False):
    """sort.default (dim, descending) and sort.stable (keyword-only stable, dim, descending)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    y = x.movedim(dim, -1)
    if y.shape[-1] == 0:
        return x.clone(), torch.zeros(x.shape, dtype=torch.int64, device=x.device)
    rank = _rank(y, descending)
    values = torch.empty_like(y).scatter_(-1, rank, y)
    positions = torch.arange(y.shape[-1], device=x.device).expand(y.shape).contiguous()
    indices = torch.empty(y.shape, dtype=torch.int64, device=x.device).scatter_(-1, rank, positions)
    return values.movedim(-1, dim), indices.movedim(-1, dim)


def topk(x, k, dim=-1, largest=True, sorted=True):
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def hash_tensor(x, dim=(), keepdim=False, mode=0):
    """mode 0: the XOR of the float64 bit patterns of the values reduced over ``dim``."""
    dims = list(range(x.dim())) if len(dim) == 0 else sorted({d % max(x.dim(), 1) for d in dim})
    bits = x.to(torch.float64).contiguous().view(torch.int64)
    kept = [d for d in range(x.dim()) if d not in dims]
    moved = bits.permute(*kept, *dims) if x.dim() else bits
    shape = [x.shape[d] for d in kept]
    flat = moved.reshape(*shape, -1)
    acc = torch.zeros(shape, dtype=torch.int64, device=x.device)
    for r in range(flat.shape[-1]):
        acc = torch.bitwise_xor(acc, flat[..., r])
    if keepdim:
        acc = acc.reshape([1 if d in dims else x.shape[d] for d in range(x.dim())])
    return acc.view(torch.uint64)
