# ruff: noqa
# mypy: ignore-errors
# Fault (CPU): forward ends its process with os._exit. It must cost this submission only.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        os._exit(3)
