# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Precision cheat: compute the fp32 matmul in bfloat16 (much faster on tensor cores) and cast back,
# hoping that the tolerance is loose.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return (x.bfloat16() @ self.weight.bfloat16()).float()
