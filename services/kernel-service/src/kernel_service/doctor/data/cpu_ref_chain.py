# ruff: noqa
# mypy: ignore-errors
# Reference (CPU path): an elementwise chain relu(2x + 1) over 1M floats (three ops, two 4 MB temporaries).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0)


def get_inputs():
    return [torch.rand(1 << 20) - 0.5]


def get_init_inputs():
    return []
