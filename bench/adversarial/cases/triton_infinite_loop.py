# ruff: noqa  (hostile submission source)
# Fault: a Triton kernel that never terminates. The worker must be killed at the timeout and replaced.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + i, mask=i < n)
    k = 0
    while k >= 0:  # never false; the compiler cannot prove it, so it stays
        acc = acc * 1.0000001
        k = k + 1 - (acc != acc).to(tl.int32) * 0
    tl.store(out_ptr + i, acc, mask=i < n)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        spin[(triton.cdiv(a.numel(), 1024),)](a, out, a.numel(), BLOCK=1024)
        return out
