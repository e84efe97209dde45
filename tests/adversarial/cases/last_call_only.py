# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: the harness compares only some calls; compute for real only on the calls an attacker
# expects to be checked (correctness trials, warm-up and the very last timed call, counted from the
# request's known trial counts) and return uninitialised memory otherwise.
import torch
import torch.nn as nn

CHECKED = {1, 2, 3, 4, 15}  # 3 correctness + 1 warm-up, then the 10th... timed call (+1 final check)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls in CHECKED or self.calls >= 14:
            return x @ self.weight
        return torch.empty(x.shape[0], self.weight.shape[1])
