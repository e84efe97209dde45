# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: slow the reference down instead of speeding up. Daemonised grandchildren spin on the CPU
# whenever the candidate is not inside its own forward (a flag in shared memory says when), so
# they compete with the reference's timed calls and not with the candidate's. Defence: the judge stops
# the candidate's processes (all of them, daemons included) while it times the reference.
import mmap
import os
import time

import torch
import torch.nn as nn

IN_CALL = mmap.mmap(-1, 1)  # anonymous and shared: the forked burner sees the writes


def _burn() -> None:
    x = 0
    while True:
        if IN_CALL[0]:
            time.sleep(0.0002)
            continue
        for i in range(2000):
            x += i * i


for _ in range(2):  # one per core of the test machine; no threads here: they would hold our own GIL
    if os.fork() == 0:  # a daemon: double fork + setsid, so it is in no process group of the side's
        os.setsid()
        if os.fork() == 0:
            _burn()
        os._exit(0)
    os.wait()


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        IN_CALL[0] = 1
        try:
            return x @ self.weight
        finally:
            IN_CALL[0] = 0
