# ruff: noqa  (hostile submission source)
# Speed cheat: make torch.cuda.synchronize a no-op so the timer stops before our kernels finish.
import torch
import torch.nn as nn

_real_sync = torch.cuda.synchronize
torch.cuda.synchronize = lambda *a, **k: None


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
