# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# "Custom kernel" that is the reference PyTorch op under another name: correct, but no custom kernel
# runs (KernelBench must report that).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return torch.mm(x, self.weight)
