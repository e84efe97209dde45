"""Fault: a Triton kernel that never terminates, submitted with timeout_s 25: the worker must be killed at
the timeout and replaced (backend "triton").

Not bench/adversarial/cases/triton_infinite_loop.py's loop: Triton refuses that one at compile time (its
loop variable changes type), so it fails fast instead of hanging. Here every program spins on a flag that
nobody sets, read with a volatile load each time round, so the compiler can neither hoist nor drop it.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(a_ptr, b_ptr, out_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)
    spins = 0
    while tl.load(flag_ptr, volatile=True) == 0:  # the flag stays 0: never false
        spins += 1
    tl.store(out_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        flag = torch.zeros(1, dtype=torch.int32, device=a.device)
        n = a.numel()
        spin_kernel[(triton.cdiv(n, 1024),)](a, b, out, flag, n, BLOCK=1024)
        return out
