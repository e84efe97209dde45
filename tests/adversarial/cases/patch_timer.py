# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: patch the harness's Timer so that the candidate's calls read as nearly free.
import sys

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
        self.weight = nn.Parameter(__import__("torch").randn(n, n))

    def forward(self, x):
        return x @ self.weight
