# ruff: noqa
# mypy: ignore-errors
# Known real speedup (GPU): relu(2x + 1) fused into one Triton kernel (backend "triton").
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fused(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x * 2.0 + 1.0, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _fused[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
