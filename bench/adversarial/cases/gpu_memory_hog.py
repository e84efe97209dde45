# ruff: noqa  (hostile submission source)
# Fault: allocate all GPU memory (and keep it). Must cost only this submission.
import torch
import torch.nn as nn

_hog = []


class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            while True:
                _hog.append(torch.empty(1 << 30, dtype=torch.uint8, device=a.device))
        except torch.cuda.OutOfMemoryError:
            pass
        return a + b
