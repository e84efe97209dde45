# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Fault: ask for far more host memory than exists (4 TiB). Must fail inside the submission only.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        hog = torch.ones(1 << 40, dtype=torch.float32)
        return x @ self.weight + hog[:1]
