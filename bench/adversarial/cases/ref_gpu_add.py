# ruff: noqa  (hostile submission source)
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


N = 1 << 20


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
