# ruff: noqa
# mypy: ignore-errors
# Known real speedup (GPU): diag(a) @ b rewritten as a row scaling, one memory-bound kernel.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a.unsqueeze(1) * b
