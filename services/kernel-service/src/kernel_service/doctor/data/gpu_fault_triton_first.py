# ruff: noqa
# mypy: ignore-errors
"""Fault: a Triton add that stores a terabyte past its output on its first call: an illegal address
(backend "triton"). It must cost this submission only."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_far_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    far = out_ptr + (1 << 40)
    tl.store(far + offs, a + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        add_far_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
