# ruff: noqa
# mypy: ignore-errors
# Sandbox probe: an honest matmul whose module, when the candidate's process loads it, tries what the
# sandbox must stop and prints what it could do (one line the doctor reads back from the answer's output).
# The doctor fills in PORT (a TCP port it listens on, on 127.0.0.1), SECRET_FILE (a file of its own
# outside the worker's dirs), MARKER (a random token, also in the doctor's environment when the service
# runs in-process) and SHM_FILE (a name in /dev/shm the doctor then looks for on its own host).
import json
import os
import socket

import torch
import torch.nn as nn

PORT = __PORT__
SECRET_FILE = __SECRET_FILE__
MARKER = __MARKER__
SHM_FILE = __SHM_FILE__


def _probe():
    seen = {"pid": os.getpid()}
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=2) as s:
            s.sendall(MARKER.encode())
        seen["net"] = "reached"
    except OSError as exc:
        seen["net"] = f"blocked ({exc.__class__.__name__})"
    try:
        with open(SECRET_FILE) as f:
            seen["file"] = "read" if MARKER in f.read() else "read (other content)"
    except OSError as exc:
        seen["file"] = f"blocked ({exc.__class__.__name__})"
    seen["env"] = "present" if any(MARKER in v for v in os.environ.values()) else "absent"
    try:
        with open(SHM_FILE, "w") as f:
            f.write(MARKER)
        seen["shm"] = "written"
    except OSError as exc:
        seen["shm"] = f"not written ({exc.__class__.__name__})"
    print("KS_DOCTOR_PROBE " + json.dumps(seen), flush=True)


_probe()


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight
