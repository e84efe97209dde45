"""Time the real op and the kernel the same way, so their ratio means something.

CPU: ``time.perf_counter`` around each call, median of the trials. CUDA: a CUDA event pair around each
call, with L2 flushed before every trial (a buffer larger than an H100's 50 MB L2 is zeroed) and a full
device synchronisation, so work on any stream is counted; median of the trials.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

_L2_FLUSH_BYTES = 256 * 1024 * 1024
_flush_buffer: torch.Tensor | None = None


def timing_method(device: str) -> str:
    if device.startswith("cuda"):
        return "cuda events per call, L2 flushed between trials, median"
    return "time.perf_counter per call, median"


def _flush_l2(device: str) -> None:
    global _flush_buffer
    if _flush_buffer is None or str(_flush_buffer.device) != str(torch.device(device)):
        _flush_buffer = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    _flush_buffer.zero_()


def time_call(fn: Callable[[], Any], device: str, *, warmup: int, trials: int) -> float:
    """Median milliseconds of one call of ``fn``."""
    cuda = device.startswith("cuda")
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    samples = []
    for _ in range(trials):
        if cuda:
            _flush_l2(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)
