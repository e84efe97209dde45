# ruff: noqa
# mypy: ignore-errors
# Cheat (a patched timer, CPU): patch the harness's Timer, if this process has one, so that the
# candidate's calls read a thousand times shorter.
import sys

import torch
import torch.nn as nn

harness = sys.modules.get("kernel_service.judging.harness")
if harness is not None and hasattr(harness, "Timer"):
    _orig = harness.Timer.__call__

    def _call(self, fn, inputs):
        ms, out = _orig(self, fn, inputs)
        return (ms / 1000.0 if isinstance(fn, ModelNew) else ms), out

    harness.Timer.__call__ = _call


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
