# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Fault: fill the disk. Writes up to 1 GiB in 1 MiB chunks and reports where the file-size limit stopped it.
import os

import torch
import torch.nn as nn

written = 0
chunk = b"\0" * (1 << 20)
try:
    with open(os.path.join(os.environ.get("TMPDIR", "."), "huge.bin"), "wb") as f:
        for _ in range(1024):
            f.write(chunk)
            f.flush()
            written += len(chunk)
except OSError as exc:
    print(f"stopped after {written} bytes: {exc}")
print(f"HUGE_FILE_WRITTEN={written}")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
