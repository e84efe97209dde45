# ruff: noqa  (hostile submission source)
# White-box cheat on the judge/candidate split: the candidate runtime orders its work after the judge's
# `go` event with Stream.wait_event; make that a no-op so the work runs while the judge's gate holds,
# before the judge's start event.
import torch
import torch.nn as nn

torch.cuda.Stream.wait_event = lambda self, event: None


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
