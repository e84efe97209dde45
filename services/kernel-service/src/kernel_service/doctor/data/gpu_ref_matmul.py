# ruff: noqa
# mypy: ignore-errors
# Reference (GPU): a 4096x4096 fp32 matmul against a parameter (a few ms); also the cheats' reference.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return [4096]
