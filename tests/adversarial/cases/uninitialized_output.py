# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Correctness cheat (upstream KernelBench's "result reuse" idea, written anew): compute nothing and answer
# with memory allocated but never written, hoping the allocator hands back a block that still holds the
# reference's output. On a GPU under the own baseline the reference ran in this very process just before
# this code loaded, on blocks of exactly this size (its readings there on values of their own).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return torch.empty(x.shape[0], self.weight.shape[1], device=x.device, dtype=x.dtype)
