# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat against a large output (over the harness's sampling threshold, so timed outputs are checked
# at random positions rather than whole): exact on the untimed calls, then on the timed calls it skips
# the last tenth of the rows and leaves them zero.
import torch
import torch.nn as nn

HONEST_CALLS = 5  # 3 correctness trials + the custom-kernel probe + 1 warm-up


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= HONEST_CALLS:
            return torch.relu(x)
        out = torch.zeros_like(x)
        keep = x.shape[0] * 9 // 10
        out[:keep] = torch.relu(x[:keep])
        return out
