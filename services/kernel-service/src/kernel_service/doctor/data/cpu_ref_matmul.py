# ruff: noqa
# mypy: ignore-errors
# Reference (CPU path): a 256x256 fp32 matmul, about a millisecond on one core.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return torch.matmul(x, self.weight)


N = 256


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return [N]
