"""Wait until a GPU takes new CUDA clients again, before a replacement worker starts CUDA on it.

Why: after a fatal fault (an illegal address, a device-side assert) the dead worker's processes take a
moment to go, and under MPS the GPU's server refuses new clients until every client of the faulted one
has exited ("CUDA-capable device(s) is/are busy or unavailable", "Unexpected error from
cudaGetDeviceCount()"). A process whose first CUDA call failed keeps that failure for its life (the
runtime caches it), so the asking is done by a throwaway process: the driver API through ctypes, no
torch, about a tenth of a second an attempt.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Mapping

from .mps import CONTROL

#: Exit 0 once a context on device 0 can allocate and synchronise; else the failing call's CUDA error code.
PROBE = """
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(200)
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for call in (lambda: cuda.cuInit(0), lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0),
             lambda: cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev),
             lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 20), lambda: cuda.cuCtxSynchronize()):
    err = call()
    if err:
        sys.exit(min(int(err), 199))
"""
#: Longest wait for a GPU to take clients: past it the replacement starts anyway, and its own start says why.
READY_TIMEOUT_S = 60.0
RETRY_S = 0.2


def mps_clients(env: Mapping[str, str]) -> int:
    """How many clients the MPS servers of ``env``'s control daemon still have (0 without a daemon)."""
    if not env.get("CUDA_MPS_PIPE_DIRECTORY") or shutil.which(CONTROL) is None:
        return 0

    def ask(command: str) -> list[str]:
        done = subprocess.run([CONTROL], input=command + "\n", env=dict(env), capture_output=True, text=True)
        return [w for w in done.stdout.split() if w.isdigit()]

    return sum(len(ask(f"get_client_list {server}")) for server in ask("get_server_list"))


def gpu_ready(env: Mapping[str, str], timeout_s: float = READY_TIMEOUT_S) -> tuple[bool, float, int]:
    """Wait until the GPU that ``env`` selects (``CUDA_VISIBLE_DEVICES``, an MPS pipe dir) has lost every
    client of its MPS server (a faulted server recovers only then: a client that came sooner was told
    "MPS server is not ready", error 807), then ask it for a context until it gives one; returns whether
    it did, the seconds waited and the attempts made."""
    t0 = time.monotonic()
    while mps_clients(env) and time.monotonic() - t0 < timeout_s:
        time.sleep(RETRY_S)
    attempts = 0
    while True:
        attempts += 1
        try:
            code = subprocess.run(
                [sys.executable, "-c", PROBE], env=dict(env), capture_output=True, timeout=30
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
        if code == 0:
            return True, time.monotonic() - t0, attempts
        if code == 200 or time.monotonic() - t0 > timeout_s:  # no driver: nothing to wait for
            return False, time.monotonic() - t0, attempts
        time.sleep(RETRY_S)
