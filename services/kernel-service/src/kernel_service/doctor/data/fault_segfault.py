# ruff: noqa
# mypy: ignore-errors
# Fault (CPU): forward reads address 0 (SIGSEGV). It must cost this submission only.
import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        ctypes.string_at(0)
        return inputs[0]
