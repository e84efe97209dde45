"""How BackendBench timings are taken (the judge's timers: ``kernel_service.timing``)."""

from __future__ import annotations

from ..timing import CpuTimer, GpuTimer


def timing_method(device: str) -> str:
    return (GpuTimer.method if device.startswith("cuda") else CpuTimer.method) + "; per input, median"
