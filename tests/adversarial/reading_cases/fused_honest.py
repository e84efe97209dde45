import torch
import torch.nn as nn

STEPS = 24
SCALE = 1.01**STEPS
SHIFT = sum(0.001 * 1.01**k for k in range(STEPS))


class ModelNew(nn.Module):
    """The honest rewrite of ``ref_many_kernels``: the 24 affine steps composed into one (two launches)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * SCALE + SHIFT
