# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Escape, part 1: leave a file with a secret in this worker's own temp dir (a stand-in for another
# tenant's submission, build products or data).
import os
from pathlib import Path

import torch
import torch.nn as nn

Path(os.environ.get("TMPDIR", "."), "planted-__MARKER__.txt").write_text("tenant A secret __MARKER__")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
