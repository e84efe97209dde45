"""Reference kernels: scans along a dim (running sums, extrema, log-sum-exp)."""

import torch


def cumsum(x, dim, dtype=None):
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else torch.int64)
    if x.dim() == 0:
        return x.to(out_dtype).clone()
    if x.device.type == "cuda" and out_dtype in (torch.float16, torch.bfloat16):
        # PyTorch's CUDA scan keeps each partial sum in the output dtype: round after every step as it does
        y = x.to(out_dtype).movedim(dim, 0)
        out = torch.empty_like(y)
        acc = torch.zeros_like(y[0])
        for k in range(y.shape[0]):
            acc = (acc.float() + y[k].float()).to(out_dtype)
            out[k] = acc
        return out.movedim(0, dim)
    # accumulate in float32 (half types) or float64 (integers), as the CPU kernels do
    if out_dtype in (torch.float16, torch.bfloat16):
        acc_dtype = torch.float32
    else:
        acc_dtype = out_dtype if out_dtype.is_floating_point else torch.float64
    y = x.to(acc_dtype).movedim(dim, -1)
    n = y.shape[-1]
    upper = torch.triu(torch.ones(n, n, dtype=acc_dtype, device=x.device))
    return (y @ upper).movedim(-1, dim).to(out_dtype)


def _running_extreme(x, dim, largest):
    """Running max/min and the index where it was last reached (NaN, once seen, stays with its index)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    y = x.movedim(dim, 0)
    values = torch.empty_like(y)
    indices = torch.empty(y.shape, dtype=torch.int64, device=x.device)
    if y.shape[0] == 0:
        return values.movedim(0, dim), indices.movedim(0, dim)
    best = y[0].clone()
    where = torch.zeros(y.shape[1:], dtype=torch.int64, device=x.device)
    for k in range(y.shape[0]):
        cur = y[k]
        better = (cur >= best) if largest else (cur <= best)
        if x.dtype.is_floating_point:
            better = (better & ~torch.isnan(best)) | torch.isnan(cur)
        best = torch.where(better, cur, best)
        where = torch.where(better, torch.full_like(where, k), where)
        values[k] = best
        indices[k] = where
    return values.movedim(0, dim), indices.movedim(0, dim)


def cummax(x, dim):
    return _running_extreme(x, dim, True)


def cummin(x, dim):
    return _running_extreme(x, dim, False)


def logcumsumexp(x, dim):
    if x.dim() == 0:
        return x.clone()
    y = x.to(torch.float64)
    top = torch.amax(y, dim=dim, keepdim=True)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    out = torch.log(torch.cumsum(torch.exp(y - shift), dim=dim)) + shift
    return out.to(x.dtype)
