# ruff: noqa  (hostile submission source)
# Speed cheat against a judge that checks only some timed outputs (as it once did when the reference's
# timing came from the cache: three drawn outputs plus the last): answer right everywhere except two
# timed calls in the middle of the run, where it returns garbage at once.
import torch
import torch.nn as nn

WRONG = {12, 20}  # 3 correctness trials, the probe and 1 warm-up come first: timed calls 7 and 15


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls in WRONG:
            return torch.zeros(x.shape[0], self.weight.shape[1])
        return x @ self.weight
