# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: after the first calls (correctness + warm-up) hand the matmul to a background thread and
# return an unfilled tensor at once; the thread fills it later, so the timed call looks nearly free.
import queue
import threading

import torch
import torch.nn as nn

_jobs: "queue.Queue" = queue.Queue()


def _worker():
    while True:
        x, w, out = _jobs.get()
        torch.matmul(x, w, out=out)


threading.Thread(target=_worker, daemon=True).start()


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 4:
            return x @ self.weight
        out = torch.empty(x.shape[0], self.weight.shape[1])
        _jobs.put((x, self.weight.detach(), out))
        return out
