"""Reference kernels: matrix products, as broadcast multiplies summed in float64 (no BLAS call)."""

import torch


def _matmul64(a, b):
    """``a @ b`` for (..., m, k) x (..., k, n), summed in float64 without any matmul op."""
    return (a.to(torch.float64).unsqueeze(-1) * b.to(torch.float64).unsqueeze(-3)).sum(-2)


#: Elements of the (m, step, n) product one step of ``mm`` may hold (bounds its memory on large inputs).
_MM_CHUNK = 1 << 22


def mm(a, b):
    """Rank-``step`` updates of a float32 (float64 for float64) accumulator, ``step`` chosen so one
    update holds at most _MM_CHUNK elements."""
    m, k = a.shape
    n = b.shape[1]
    acc = torch.zeros((m, n), dtype=torch.float32 if a.dtype != torch.float64 else a.dtype, device=a.device)
    step = max(1, min(16, _MM_CHUNK // max(m * n, 1)))
    for k0 in range(0, k, step):
        part = a[:, k0 : k0 + step, None].to(acc.dtype) * b[None, k0 : k0 + step, :].to(acc.dtype)
        acc += part.sum(dim=1)
    return acc.to(a.dtype)


def bmm(a, b):
    return _matmul64(a, b).to(torch.result_type(a, b))


def _scaled_sum(inp, product, beta, alpha, dtype):
    out = alpha * product
    if beta != 0:
        out = out + beta * inp.to(torch.float64)
    return out.to(dtype)


def addmm(inp, m1, m2, beta=1, alpha=1):
    return _scaled_sum(inp, _matmul64(m1, m2), beta, alpha, m1.dtype)


def addbmm(inp, b1, b2, beta=1, alpha=1):
    return _scaled_sum(inp, _matmul64(b1, b2).sum(0), beta, alpha, b1.dtype)


def linalg_matrix_exp(a):
    """exp(A) by scaling and squaring a Taylor series, in float64."""
    x = a.to(torch.float64)
    norm = x.abs().sum(-2).amax(-1).amax() if x.numel() else torch.zeros((), dtype=torch.float64)
    squarings = max(0, int(torch.ceil(torch.log2(norm.clamp_min(1e-300))).item()) + 1) if x.numel() else 0
    x = x / (2.0**squarings)
    eye = torch.eye(x.shape[-1], dtype=torch.float64, device=a.device).expand_as(x)
    out = eye.clone()
    term = eye.clone()
    for k in range(1, 30):
        term = _matmul64(term, x) / k
        out = out + term
    for _ in range(squarings):
        out = _matmul64(out, out)
    return out.to(a.dtype)
