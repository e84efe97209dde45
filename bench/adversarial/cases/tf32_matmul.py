# ruff: noqa  (hostile submission source)
# Precision cheat: compute the fp32 matmul with TF32 tensor cores (10-bit mantissa), only inside our call.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return x @ self.weight
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
