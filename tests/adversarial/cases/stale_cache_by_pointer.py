# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: cache the output by input identity (data pointer). Warm-up reuses the same input object;
# fresh inputs that land at a recycled address get a stale answer.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key not in self.cache:
            self.cache[key] = x @ self.weight
        return self.cache[key]
