"""Both models get the same weights, as upstream KernelBench's judge gives them (CUDA-L1: 21 of the first
release's solutions and 16 of the revision's make their weights with ``torch.Tensor(n, m)``, which the device
context does not reach; built on the GPU they drew other weights than the reference, and were judged wrong)."""

from __future__ import annotations

import math

import torch
from kernel_service.judging.harness import build_model, drew_on_cpu
from torch import nn


class LegacyLinear(nn.Module):
    """nn.Linear's weights, made as model-written solutions make them."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(n, n))
        self.bias = nn.Parameter(torch.Tensor(n))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -1 / math.sqrt(n), 1 / math.sqrt(n))


def test_a_model_whose_weights_escape_the_device_context_is_seen() -> None:
    """``meta`` stands for the GPU: what the device context reaches does not draw from the CPU's generator."""
    build_model(LegacyLinear, [8], 3, torch.device("meta"))
    assert drew_on_cpu(3)
    build_model(nn.Linear, [8, 8], 3, torch.device("meta"))
    assert not drew_on_cpu(3)
    built = build_model(LegacyLinear, [8], 3, torch.device("meta"), on_cpu=True)
    assert built.weight.device.type == "meta"  # built on the CPU, then moved


def test_built_on_the_cpu_the_weights_equal_the_references() -> None:
    reference = build_model(nn.Linear, [8, 8], 3, torch.device("cpu"), on_cpu=True)
    solution = build_model(LegacyLinear, [8], 3, torch.device("cpu"), on_cpu=True)
    assert torch.equal(reference.weight, solution.weight) and torch.equal(reference.bias, solution.bias)
