# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Correctness + speed cheat: the reference's output for the same inputs is alive in the same process;
# find it with the garbage collector and return a copy instead of computing.
import gc

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        for obj in gc.get_objects():
            if (
                type(obj) is torch.Tensor
                and obj is not x
                and obj.shape == (x.shape[0], self.n)
                and obj.dtype == torch.float32
                and not obj.requires_grad
                and obj.data_ptr() != x.data_ptr()
            ):
                return obj.clone()
        return torch.zeros(x.shape[0], self.n)
