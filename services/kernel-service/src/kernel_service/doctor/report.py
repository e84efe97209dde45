"""What the doctor found, as pydantic models (``--json``), a table and one closing line.

``DoctorReport`` holds the environment (``Environment``), each check's ``CheckReport`` (what it runs, its
pass rule, what to do when it fails, and per device a ``DeviceResult`` with the jobs it judged) and the
verdict: ``trusted`` is false as soon as any check failed on any device. A ``warn`` (a layer missing, a
check that could not conclude) is named in the table and the verdict, and does not fail the run;
a ``skip`` says why the check does not apply here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["pass", "fail", "warn", "skip"]
#: Worst first: a check's status is the worst of its devices'.
SEVERITY: dict[Status, int] = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}


def worst(statuses: list[Status]) -> Status:
    return max(statuses, key=SEVERITY.__getitem__, default="skip")


class JobRecord(BaseModel):
    """One evaluation a check made, as the service answered it."""

    kernel: str
    outcome: str | None = None
    speedup: float | None = None
    reward: float | None = None
    device: str | None = None
    worker_id: str | None = None
    seconds: float = 0.0
    timing_degraded: bool | None = None
    message: str = ""
    ok: bool = True  # whether this job met the check's rule


class DeviceResult(BaseModel):
    device: str  # "cpu", "gpu0", ... or "host" (a check that runs once)
    status: Status
    summary: str
    jobs: list[JobRecord] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)


class CheckReport(BaseModel):
    name: str
    title: str
    runs: str
    rule: str
    fix: str
    status: Status
    seconds: float
    results: list[DeviceResult] = Field(default_factory=list)


class Environment(BaseModel):
    """The host (in-process service) or what the service's answers say about it (``--url``)."""

    target: str  # "in-process service" or the URL
    path: Literal["cpu", "gpu"]
    devices: list[str] = Field(default_factory=list)
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    gpus: list[str] = Field(default_factory=list)
    mps: str | None = None
    namespaces: str | None = None
    landlock: str | None = None
    bubblewrap: str | None = None
    private_dev_shm: str | None = None
    nvcc: str | None = None
    ncu: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    isolation: dict[str, Any] | None = None


class DoctorReport(BaseModel):
    trusted: bool
    verdict: str
    quick: bool
    wall_s: float
    environment: Environment
    checks: list[CheckReport]

    def failed(self) -> list[CheckReport]:
        return [c for c in self.checks if c.status == "fail"]


ENV_ROWS: list[tuple[str, str]] = [
    ("target", "target"),
    ("driver", "driver"),
    ("CUDA", "cuda"),
    ("torch", "torch"),
    ("GPUs", "gpus"),
    ("MPS", "mps"),
    ("namespaces", "namespaces"),
    ("Landlock", "landlock"),
    ("bubblewrap", "bubblewrap"),
    ("private /dev/shm", "private_dev_shm"),
    ("nvcc", "nvcc"),
    ("ncu", "ncu"),
]


def _cell(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def render(report: DoctorReport) -> str:
    """The table an operator reads, ending with the verdict line."""
    env = report.environment
    settings = ", ".join(f"{k}={v}" for k, v in env.settings.items())
    lines = [f"kernel-service doctor ({env.path} path{', quick' if report.quick else ''}; {settings})", ""]
    lines.append("environment")
    for label, key in ENV_ROWS:
        lines.append(f"  {label:<17} {_cell(getattr(env, key))}")
    lines.append("")
    rows = [("check", "device", "result", "s", "detail")]
    for check in report.checks:
        for res in check.results or [DeviceResult(device="-", status=check.status, summary="")]:
            rows.append((check.name, res.device, res.status.upper(), f"{check.seconds:.0f}", res.summary))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, row in enumerate(rows):
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        )
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths) + "  " + "-" * 6)
    lines.append("")
    for check in report.checks:
        if check.status in ("fail", "warn"):
            lines.append(f"{check.name}: {check.title}")
            lines.append(f"  runs: {check.runs}")
            lines.append(f"  rule: {check.rule}")
            for res in check.results:
                if res.status in ("fail", "warn"):
                    lines.append(f"  {res.device}: {res.summary}")
                    for job in res.jobs:
                        if not job.ok:
                            shown = f" x{job.speedup:.3f}" if job.speedup is not None else ""
                            said = f": {job.message[:200]}" if job.message else ""
                            lines.append(f"    {job.kernel}: {job.outcome}{shown} on {job.worker_id}{said}")
            lines.append(f"  what to do: {check.fix}")
            lines.append("")
    lines.append(f"wall time {report.wall_s:.1f} s")
    lines.append(report.verdict)
    return "\n".join(lines)


def verdict(checks: list[CheckReport], path: str) -> tuple[bool, str]:
    """Whether scores can be trusted here, and the one line that says so (and what to do if not)."""
    failed = [c for c in checks if c.status == "fail"]
    warned = [c.name for c in checks if c.status == "warn"]
    ran = [c for c in checks if c.status != "skip"]
    if failed:
        first = failed[0]
        where = ", ".join(r.device for r in first.results if r.status == "fail")
        why = next((r.summary for r in first.results if r.status == "fail"), "")
        others = f" (also failed: {', '.join(c.name for c in failed[1:])})" if failed[1:] else ""
        return False, (
            f"VERDICT: scores can NOT be trusted on this deployment: {first.name} failed on {where}: {why}"
            f"{others}. What to do: {first.fix}"
        )
    note = f"; warnings: {', '.join(warned)} (see above)" if warned else ""
    scope = (
        " (the CPU path: CPU timings are for tests and development, not for publishing speedups)"
        if path == "cpu"
        else ""
    )
    return True, (
        f"VERDICT: scores can be trusted on this deployment{scope}: {len(ran)} checks passed{note}."
    )
