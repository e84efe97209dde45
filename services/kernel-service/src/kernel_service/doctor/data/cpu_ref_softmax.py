# ruff: noqa
# mypy: ignore-errors
# Reference (CPU path): a row softmax summed over rows, 512x1024 fp32 (a few ms on one core).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1).sum(dim=0)


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
