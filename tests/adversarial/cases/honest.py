# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Honest solution: the same math. Must stay `correct` (no false positive) after every hostile case.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
