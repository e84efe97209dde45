# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Fault: kill the service. Signals the parent, the test process running the service (pid injected) and
# its process group. The service must survive; only this submission may fail.
import os
import signal

import torch
import torch.nn as nn

for target in (os.getppid(), __SERVICE_PID__):
    for fn in (os.kill, os.killpg):
        try:
            if target > 1:
                fn(target, signal.SIGKILL)
                print(f"{fn.__name__}({target}) sent")
        except OSError as exc:
            print(f"{fn.__name__}({target}) blocked: {exc}")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
