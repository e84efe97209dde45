# ruff: noqa
# mypy: ignore-errors
# Load for the busy-host check where nvcc is missing (backend "cpp"): a load_inline C++ add whose build
# (torch/extension.h, about 20 s of g++) keeps a core busy. __TOKEN__ makes each one a distinct build.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = r"""
#include <torch/extension.h>
// __TOKEN__
torch::Tensor add(torch::Tensor a, torch::Tensor b) { return a + b; }
"""
ext = load_inline(name="doctor_load___TOKEN__", cpp_sources=CPP_SRC, functions=["add"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add(a, b)
