# ruff: noqa
# mypy: ignore-errors
# Reference (GPU known speedup): diag(a) @ b, a dense 2048x2048 @ 2048x8192 matmul (about 30x the rewrite).
import torch
import torch.nn as nn

N, M = 2048, 8192


class Model(nn.Module):
    def forward(self, a, b):
        return torch.diag(a) @ b


def get_inputs():
    return [torch.rand(N), torch.rand(N, M)]


def get_init_inputs():
    return []
