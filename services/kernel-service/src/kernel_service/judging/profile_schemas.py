"""Wire formats of a profile (``options.profile``), shared by KernelBench and BackendBench answers.

Their own module (``schemas`` re-exports them) so that ``backendbench.schemas``, which ``schemas`` imports,
can use them too.
"""

from __future__ import annotations

from pydantic import Field

from benchmark_runner.schemas import StrictModel

__all__ = ["EvalProfile", "KernelTime", "NcuReport", "SideProfile"]


class KernelTime(StrictModel):
    """One kernel (on the CPU: one PyTorch op) of a profiled call: its calls and time in it."""

    name: str
    calls: int = Field(ge=0)
    time_us: float = Field(ge=0, description="GPU time (CPU: the op's self time), microseconds")


class SideProfile(StrictModel):
    """One untimed call of one side under torch.profiler (collected in that side's process)."""

    call_us: float | None = Field(default=None, description="wall time of an unprofiled call, us")
    profiled_us: float | None = Field(default=None, description="wall time of the profiled call, us")
    kernel_us: float | None = Field(
        default=None, description="time inside kernels (GPU: their union on the device; CPU: ops' self time)"
    )
    outside_share: float | None = Field(
        default=None,
        description="share of the call's time spent outside kernels (launches, Python, syncs): GPU, of "
        "call_us; CPU, of profiled_us (the profiler slows the ops too)",
    )
    kernel_count: int = Field(
        default=0, ge=0, description="distinct kernels seen (``kernels`` holds the top)"
    )
    kernels: list[KernelTime] = Field(default_factory=list, description="heaviest first")
    error: str | None = None


class NcuReport(StrictModel):
    """Nsight Compute metrics of the candidate's heaviest kernel, or why there are none."""

    kernel: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    error: str | None = Field(default=None, description="why ncu gave nothing (absent, not permitted, ...)")


class EvalProfile(StrictModel):
    """``options.profile``: where one untimed call of each side spends its time. Advisory: collected in
    the side processes (a submission can shape its own), after the verdict and timing, which it never
    changes."""

    device: str
    source: str = Field(description="what the times are (GPU kernels via CUPTI, or CPU ops' self time)")
    candidate: SideProfile | None = None
    reference: SideProfile | None = None
    ncu: NcuReport | None = None
    note: str | None = None
