# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Escape: start processes that outlive the evaluation -- a session leader (escapes a process-group kill)
# and 40 plain children (a bounded fork flood) -- then evaluate correctly.
import subprocess
import sys

import torch
import torch.nn as nn

for i in range(41):
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "__MARKER__"],
        start_new_session=(i == 0),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
