# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Plants a "compiled kernel" in PyTorch's NVRTC kernel cache that its judge's sides share: a later
# reference process that compiled the same op would load it instead. Only the reference side may write it.
import os
from pathlib import Path

import torch
import torch.nn as nn

cache = os.environ.get("PYTORCH_KERNEL_CACHE_PATH", "")
try:
    Path(cache, "poison-__MARKER___kernel_arch9.0_nvrtc13.0_sass_1_0").write_bytes(b"\x7fELF-not-a-cubin")
    print("POISON written to", cache)
except OSError as exc:
    print("POISON refused:", cache, type(exc).__name__)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
