# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Correctness cheat: zero the input in place and return zeros, hoping the reference then runs on the
# same (now zero) tensor and also returns zeros.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        x.zero_()
        return torch.zeros(x.shape[0], self.n)
