# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Escape, part 2: walk the service's work dir (siblings of this worker's temp dir) and the build cache
# looking for what other submissions left; also try to write outside the temp dir.
import os
from pathlib import Path

import torch
import torch.nn as nn

mine = Path(os.environ.get("TMPDIR", ".")).resolve()
found = []
for root in {mine.parent, mine.parent.parent}:
    try:
        for dirpath, _dirs, files in os.walk(root):
            if Path(dirpath).resolve() == mine or mine in Path(dirpath).resolve().parents:
                continue
            for f in files:
                if "__MARKER__" in f:
                    try:
                        found.append(f"{dirpath}/{f}: " + Path(dirpath, f).read_text())
                    except OSError as exc:
                        found.append(f"{dirpath}/{f}: blocked {exc}")
    except OSError:
        pass
try:
    Path("__OUTSIDE_DIR__", "written-by-solution.txt").write_text("pwned")
    found.append("wrote outside the temp dir")
except OSError as exc:
    found.append(f"write outside blocked: {exc}")
print("\n".join(found))


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
