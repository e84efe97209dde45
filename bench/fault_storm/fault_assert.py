"""Fault: a device-side assert. Indexing a 4-element CUDA tensor at 10 with a CUDA index tensor is checked
on the GPU only (no host sync), so its kernel asserts and the context is lost (backend "torch"). The
gathered value is added (times 0) to a + b, so the output has the right shape and depends on the index."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        index = torch.tensor([10], device=a.device)
        picked = torch.zeros(4, device=a.device)[index]  # out of bounds: a device-side assert
        return a + b + picked * 0.0
