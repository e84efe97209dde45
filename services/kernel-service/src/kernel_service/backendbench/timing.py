"""How BackendBench timings are taken (the judge's timers: ``kernel_service.judging.timing``)."""

from __future__ import annotations

from ..judging.timing import CpuTimer, GpuTimer


def timing_method(device: str) -> str:
    return (GpuTimer.method if device.startswith("cuda") else CpuTimer.method) + "; per input, median"
