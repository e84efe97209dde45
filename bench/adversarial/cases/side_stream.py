# ruff: noqa  (hostile submission source)
# Speed cheat: launch the matmul on a side stream and return without making the current stream wait.
import torch
import torch.nn as nn

_side = torch.cuda.Stream()


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        with torch.cuda.stream(_side):
            out = x @ self.weight
        return out
