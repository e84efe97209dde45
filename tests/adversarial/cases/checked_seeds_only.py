# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Correctness cheat: replay the (predictable) correctness seeds to know the checked inputs; answer
# right only for those and return garbage fast for anything else.
import torch
import torch.nn as nn

KNOWN = []
for trial in range(10):
    torch.manual_seed(42 * 1000 + 17 * (trial + 1))
    KNOWN.append(torch.randn(256, 256))


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        if any(torch.equal(x, k) for k in KNOWN):
            return x @ self.weight
        return torch.empty(x.shape[0], self.weight.shape[1])
