# ruff: noqa
# mypy: ignore-errors
# Reference (GPU): a row softmax summed over rows, 8192x2048 fp32.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1).sum(dim=0)


def get_inputs():
    return [torch.randn(8192, 2048)]


def get_init_inputs():
    return []
