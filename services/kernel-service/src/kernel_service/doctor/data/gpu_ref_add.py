# ruff: noqa
# mypy: ignore-errors
"""Reference of the faults and honest jobs beside them (from bench/fault_storm): a + b, fp32, 4096 x 4096."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


N = 4096


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs() -> list[int]:
    return []
