# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Correctness cheat: find the harness module and make its comparison always succeed; return garbage.
import sys

import torch
import torch.nn as nn

for name, mod in list(sys.modules.items()):
    if name.startswith("kernel_service") and hasattr(mod, "compare_outputs"):
        comparison = (
            getattr(mod, "Comparison", None) or sys.modules["kernel_service.judging.compare"].Comparison
        )
        mod.compare_outputs = lambda *a, **k: comparison(True, "", 0.0, 0.0)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return torch.zeros(x.shape[0], self.n)
