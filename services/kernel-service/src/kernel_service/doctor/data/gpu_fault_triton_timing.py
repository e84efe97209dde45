# ruff: noqa
# mypy: ignore-errors
"""Fault inside timing: a correct Triton add for its first FAULT_AFTER calls in its process, then the same
kernel storing a terabyte past its output (an illegal address). The correctness checks (a few calls) pass;
the fault comes in the timing phase (backend "triton").

Why 12 calls and not more: the checks make 3 calls and the probe 1, and under MPS a timed reading is one
call, whose readings may end after 20 (``PRECISE_MIN_READINGS``) plus the warm-up's 3: a larger threshold
(40) could be passed by none of the calls at all.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

FAULT_AFTER = 12
CALLS = [0]


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr, FAR: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    if FAR:
        dst = out_ptr + (1 << 40)
    else:
        dst = out_ptr
    tl.store(dst + offs, a + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        CALLS[0] += 1
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        far = CALLS[0] > FAULT_AFTER
        add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024, FAR=far)
        return out
