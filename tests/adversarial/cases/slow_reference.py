# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: monkeypatch torch.matmul (which the reference calls) to waste time; the solution keeps
# the original for itself.
import time

import torch
import torch.nn as nn

_matmul = torch.matmul


def _slow(*args, **kwargs):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.005:
        pass
    return _matmul(*args, **kwargs)


torch.matmul = _slow


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return _matmul(x, self.weight)
