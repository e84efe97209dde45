import torch
import torch.nn as nn


class Model(nn.Module):
    """Latency-bound: four 1024-wide linear layers on a batch of 16 (tens of us a call)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def get_inputs():
    return [torch.randn(16, 1024)]


def get_init_inputs():
    return []
