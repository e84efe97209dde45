"""Reference kernels: neural-network ops (softmax, pooling, antialiased resize, grid sampling), from box sums over cumulative sums, explicit weight matrices and gathers, in float64."""

import torch


def softmax(x, dim, dtype=None):
    y = x.to(dtype) if dtype is not None else x
    z = y.float() if y.dtype in (torch.float16, torch.bfloat16) else y
    shifted = z - torch.amax(z, dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return (e / torch.sum(e, dim=dim, keepdim=True)).to(y.dtype)


def _softmax(x, dim, half_to_float):
    """aten._softmax: softmax along ``dim``, in float32 for half inputs (kept there if ``half_to_float``)."""
    return softmax(x.float(), dim) if half_to_float else softmax(x, dim)


def _box_sum(y, axis, starts, ends):
    """Sums of ``y`` over [starts[i], ends[i]) along ``axis``, from a cumulative sum with a zero row."""
    pad_shape = list(y.shape)
    pad_shape[axis] = 1
    c = torch.cat([torch.zeros(pad_shape, dtype=y.dtype, device=y.device), torch.cumsum(y, axis)], axis)
    return c.index_select(axis, ends) - c.index_select(axis, starts)


def _tuple(v, n):
    v = [v] if isinstance(v, int) else list(v)
    return v * n if len(v) == 1 else v


def _avg_pool(x, nd, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kernel = _tuple(kernel, nd)
    stride = _tuple(stride, nd) if stride is not None and len(_tuple(stride, nd)) else kernel
    padding = _tuple(padding, nd)
    y = x.to(torch.float64)
    full = None
    clipped = None
    for i in range(nd):
        axis = x.dim() - nd + i
        size, k, s, p = x.shape[axis], kernel[i], stride[i], padding[i]
        out = (size + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        starts = torch.arange(out, device=x.device) * s - p
        ends = torch.clamp(starts + k, max=size + p)
        lo, hi = torch.clamp(starts, min=0), torch.clamp(ends, max=size)
        y = _box_sum(y, axis, lo, hi)
        shape = [1] * nd
        shape[i] = out
        span_full = (ends - starts).to(torch.float64).reshape(shape)
        span_clip = (hi - lo).to(torch.float64).reshape(shape)
        full = span_full if full is None else full * span_full
        clipped = span_clip if clipped is None else clipped * span_clip
    if divisor_override:
        divisor = torch.tensor(float(divisor_override), dtype=torch.float64, device=x.device)
    else:
        counted = full if count_include_pad else clipped
        assert counted is not None
        divisor = counted
    return (y / divisor).to(x.dtype)


def avg_pool2d(
    x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(
    x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_avg_pool3d(x, output_size):
    y = x.to(torch.float64)
    count = None
    for i, out in enumerate(output_size):
        axis = x.dim() - 3 + i
        size = x.shape[axis]
        o = torch.arange(out, device=x.device)
        starts = torch.div(o * size, out, rounding_mode="floor")
        ends = torch.div((o + 1) * size + out - 1, out, rounding_mode="floor")
        y = _box_sum(y, axis, starts, ends)
        shape = [1, 1, 1]
        shape[i] = out
        span = (ends - starts).to(torch.float64).reshape(shape)
        count = span if count is None else count * span
    return (y / count).to(x.dtype)


def _aa_weights(size, out, align_corners, scale_opt, device):
    """The antialiased bilinear (triangle filter) weights, (out, size), as PyTorch's separable pass."""
    if align_corners:
        scale = (size - 1) / (out - 1) if out > 1 else 0.0
    else:
        scale = 1.0 / scale_opt if scale_opt is not None and scale_opt > 0 else size / out
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    rows = []
    for i in range(out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), size)
        w = [max(0.0, 1.0 - abs((j + lo - center + 0.5) * invscale)) for j in range(hi - lo)]
        total = sum(w)
        row = [0.0] * size
        for j, v in enumerate(w):
            row[lo + j] = v / total if total else v
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64, device=device).reshape(out, size)


def _upsample_bilinear2d_aa(x, output_size, align_corners, scales_h=None, scales_w=None):
    y = x.to(torch.float64)
    wh = _aa_weights(x.shape[-2], output_size[0], align_corners, scales_h, x.device)
    ww = _aa_weights(x.shape[-1], output_size[1], align_corners, scales_w, x.device)
    y = (y.unsqueeze(-2) * ww).sum(-1)
    y = (y.transpose(-1, -2).unsqueeze(-2) * wh).sum(-1).transpose(-1, -2)
    return y.to(x.dtype)


def _reflect(c, twice_low, twice_high):
    if twice_low == twice_high:
        return torch.zeros_like(c)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = (c - low).abs()
    extra = torch.fmod(c, span)
    flips = torch.floor(c / span)
    return torch.where(torch.remainder(flips, 2) == 0, extra + low, span - extra + low)


def _source(coord, size, padding_mode, align_corners):
    c = (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    if padding_mode == 1:
        c = torch.clamp(c, 0, size - 1)
    elif padding_mode == 2:
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = torch.clamp(c, 0, size - 1)
    return c


def grid_sampler_3d(x, grid, interpolation_mode, padding_mode, align_corners):
    """Trilinear (mode 0) or nearest (mode 1) sampling of (N, C, D, H, W) at grid (N, d, h, w, 3)."""
    y = x.to(torch.float64)
    g = grid.to(torch.float64)
    n, _, depth, height, width = x.shape
    ix = _source(g[..., 0], width, padding_mode, align_corners)
    iy = _source(g[..., 1], height, padding_mode, align_corners)
    iz = _source(g[..., 2], depth, padding_mode, align_corners)
    batch = torch.arange(n, device=x.device).reshape(n, 1, 1, 1).expand(ix.shape)

    def at(zi, yi, xi):
        inside = (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height) & (zi >= 0) & (zi < depth)
        zc, yc, xc = (
            torch.clamp(v, 0, s - 1).to(torch.int64) for v, s in ((zi, depth), (yi, height), (xi, width))
        )
        vals = y.permute(0, 2, 3, 4, 1)[batch, zc, yc, xc]
        return vals * inside.unsqueeze(-1)

    if interpolation_mode == 1:
        out = at(torch.round(iz), torch.round(iy), torch.round(ix))
    else:
        x0, y0, z0 = torch.floor(ix), torch.floor(iy), torch.floor(iz)
        fx, fy, fz = ix - x0, iy - y0, iz - z0
        out = torch.zeros((*ix.shape, x.shape[1]), dtype=torch.float64, device=x.device)
        for dz in (0, 1):
            for dy in (0, 1):
                for dx in (0, 1):
                    w = (fx if dx else 1 - fx) * (fy if dy else 1 - fy) * (fz if dz else 1 - fz)
                    out = out + at(z0 + dz, y0 + dy, x0 + dx) * w.unsqueeze(-1)
    return out.permute(0, 4, 1, 2, 3).to(x.dtype)
