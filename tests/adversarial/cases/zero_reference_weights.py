# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Correctness + speed cheat: find the reference model (same process) and zero its weights, so the
# reference returns zeros; then return zeros at no cost.
import gc

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        for obj in gc.get_objects():
            if isinstance(obj, nn.Module) and type(obj).__name__ == "Model":
                with torch.no_grad():
                    for p in obj.parameters():
                        p.zero_()

    def forward(self, x):
        return torch.zeros(x.shape[0], self.n)
