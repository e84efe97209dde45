"""What a check is, and what the checks share: the path's plan (kernels, options, bands) and the run's
context (the service, the devices, the independent timings).

A ``Check`` is a small object: its name, a title, what it runs and its pass rule (both for the path the
doctor takes, CPU or GPU, and ``--quick``), what to do when it fails, and a coroutine that runs it and
returns one ``DeviceResult`` per device (or one for the host). The CPU and GPU checks are the same
objects: a ``Plan`` holds what differs (kernels, options and bands).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .report import CheckReport, DeviceResult, Environment, worst
from .target import Target

PathName = Literal["cpu", "gpu"]


@dataclass(frozen=True)
class Pair:
    """A reference kernel and a solution kernel (``doctor/data`` names; solution ``self``: the
    reference as its own solution)."""

    label: str
    reference: str
    solution: str = "self"
    backend: str = "torch"


@dataclass(frozen=True)
class Plan:
    """What one path's checks run, and the bands they hold it to."""

    options: dict[str, Any]
    honest: list[Pair]
    honest_quick: int  # how many of ``honest`` --quick runs
    self_band: tuple[float, float]
    self_band_why: str
    cheats: list[Pair]
    cheats_quick: int
    #: A cheat that is judged correct may read at most this speedup (noise of honest work, no gain).
    cheat_limit: float
    faults: list[Pair]
    faults_quick: int
    fault_honest: list[Pair]
    fault_band: tuple[float, float]
    #: A fault must be answered within this many seconds (the job's own loading and checks included).
    fault_within_s: float
    known: list[Pair] = field(default_factory=list)
    known_quick: int = 0
    known_tolerance: float = 0.05
    independent_calls: int = 100
    busy: Pair | None = None
    busy_tolerance: float = 0.10

    def take(self, items: list[Pair], quick_n: int, quick: bool) -> list[Pair]:
        return items[:quick_n] if quick else items


@dataclass
class Doctor:
    """One run's context, handed to every check."""

    target: Target
    path: PathName
    quick: bool
    plan: Plan
    env: Environment
    work: Path  # the doctor's own temp dir (the probe's secret file, independent-timer modules)
    marker: str  # a random token: the probe's secret, the builds' distinct names
    #: Per device, per known-speedup pair: the independent timer's reading (a task started early).
    independent: asyncio.Task[dict[str, dict[str, Any]]] | None = None
    compile_workers: int | None = None  # the in-process service's compile pool size

    def options(self, **extra: Any) -> dict[str, Any]:
        return {**self.plan.options, **extra}


Runner = Callable[[Doctor], Awaitable[list[DeviceResult]]]


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    #: What it runs and its pass rule, for the run's path and ``--quick`` (None: the check does not run
    #: on that path; ``skip_why`` says why).
    runs: Callable[[Doctor], str | None]
    rule: Callable[[Doctor], str]
    fix: str
    run: Runner
    in_quick: bool = True
    skip_why: Callable[[Doctor], str] = lambda d: "not on this path"

    async def __call__(self, d: Doctor) -> CheckReport:
        t0 = time.perf_counter()
        runs = self.runs(d)
        if runs is None or (d.quick and not self.in_quick):
            why = "not in --quick" if runs is not None else self.skip_why(d)
            return CheckReport(
                name=self.name,
                title=self.title,
                runs=runs or "-",
                rule=self.rule(d),
                fix=self.fix,
                status="skip",
                seconds=0.0,
                results=[DeviceResult(device="-", status="skip", summary=f"skipped: {why}")],
            )
        try:
            results = await self.run(d)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is a failed check, said why
            results = [
                DeviceResult(device="host", status="fail", summary=f"the check could not run: {exc!r}"[:500])
            ]
        return CheckReport(
            name=self.name,
            title=self.title,
            runs=runs,
            rule=self.rule(d),
            fix=self.fix,
            status=worst([r.status for r in results]),
            seconds=round(time.perf_counter() - t0, 1),
            results=results,
        )


def band(values: tuple[float, float]) -> str:
    return f"{values[0]:g}-{values[1]:g}"
