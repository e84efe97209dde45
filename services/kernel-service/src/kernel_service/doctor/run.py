"""One doctor run: start (or reach) the service, read the environment, run the checks in order, and
build the report.

In-process, the service is started with the settings ``serve`` would use on this host (the caller builds
its ``KernelServiceConfig`` as ``serve`` does); its GPUs are every GPU ``serve`` would take. On a GPU host
the independent timer of the known-speedup check starts on every GPU at once while the service starts
(it holds each call behind a GPU spin, so host load does not enter its readings). With ``--url``, a first
round of probe jobs finds the service's devices, and the independent timer runs on this host's GPU when it
is of the service's kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks import Doctor, PathName
from .environment import environment, nvidia_smi
from .plans import CPU, GPU
from .probe import SANDBOX, SECRET_ENV
from .report import CheckReport, DeviceResult, DoctorReport, Environment, verdict
from .suite import CHECKS_AFTER_SANDBOX, independent_timings
from .target import DISCOVERY_JOBS, Job, Target, in_process

CHECKS = [SANDBOX, *CHECKS_AFTER_SANDBOX]


@dataclass
class DoctorOptions:
    quick: bool = False
    url: str | None = None
    api_key: str | None = None
    #: The in-process service's config (``serve``'s settings); ignored with ``url``.
    config: Any = None
    #: Shown in the table's first line (the settings the run used).
    settings: dict[str, Any] = field(default_factory=dict)
    #: Told one line as each check ends (the CLI prints it on stderr).
    progress: Callable[[str], None] | None = None


def run_doctor(options: DoctorOptions) -> DoctorReport:
    return asyncio.run(_run(options))


async def _run(options: DoctorOptions) -> DoctorReport:
    t0 = time.perf_counter()
    marker = "ksdoctor" + secrets.token_hex(8)
    work = Path(tempfile.mkdtemp(prefix="ks-doctor-"))
    try:
        if options.url:
            async with Target(options.url, options.api_key) as target:
                return await _remote(options, target, marker, work, t0)
        return await _local(options, marker, work, t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _local(options: DoctorOptions, marker: str, work: Path, t0: float) -> DoctorReport:
    from ..workers.pool import detect_gpus, worker_gpu

    config = options.config
    gpus = detect_gpus() if config.gpus is None else list(config.gpus)
    path: PathName = "gpu" if gpus else "cpu"
    plan = GPU if path == "gpu" else CPU
    old = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = marker  # the service's environment holds a secret the probe must not see
    independent: asyncio.Task[dict[str, dict[str, Any]]] | None = None
    if path == "gpu":
        pairs = plan.take(plan.known, plan.known_quick, options.quick)
        visible = {f"gpu{worker_gpu(g)}": worker_gpu(g) for g in gpus}
        independent = asyncio.create_task(independent_timings(pairs, plan.independent_calls, visible))
    try:
        with contextlib.ExitStack() as stack:
            try:
                target = await asyncio.to_thread(stack.enter_context, in_process(config))
            except Exception as exc:  # noqa: BLE001 - a service that cannot start here is the first finding
                return _not_started(options, path, exc, t0)
            service = target.service
            target.devices = [f"gpu{worker_gpu(g)}" for g in service.gpus] or ["cpu"]
            env = environment(
                target="in-process service (the settings `serve` would use here)",
                path=path,
                in_process=True,
                env_info=dict(service.env_info),
                mps=_mps_row(path, service.mps_running, config.mps),
                settings=options.settings,
            )
            env.devices = list(target.devices)
            async with target:
                d = Doctor(target, path, options.quick, plan, env, work, marker, independent)
                d.compile_workers = getattr(getattr(service, "compile_pool", None), "size", None)
                checks = await _checks(d, options.progress)
            # leaving the stack stops the service, its workers and its MPS daemons
        return _report(options, env, checks, path, t0)
    finally:
        if independent is not None and not independent.done():
            independent.cancel()
        if old is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = old


def _not_started(options: DoctorOptions, path: PathName, exc: Exception, t0: float) -> DoctorReport:
    env = Environment(target="in-process service", path=path, settings=options.settings)
    start = CheckReport(
        name="start",
        title="the service starts with serve's settings",
        runs="KernelService(config).startup(): its eval and compile workers, MPS daemons",
        rule="it starts",
        fix="run `kernel-service serve` with the same options and read its log: a GPU worker refuses to start "
        "without CUDA or a private /dev/shm, and --mps on refuses to start without a daemon per GPU",
        status="fail",
        seconds=round(time.perf_counter() - t0, 1),
        results=[
            DeviceResult(device="host", status="fail", summary=f"{exc.__class__.__name__}: {exc}"[:800])
        ],
    )
    return _report(options, env, [start], path, t0)


def _mps_row(path: str, running: bool, setting: str) -> str:
    if path != "gpu":
        return "n/a (no GPU)"
    if running:
        return "running (one daemon a GPU)"
    why = "" if setting == "off" else ": nvidia-cuda-mps-control missing or a daemon failed"
    return f"not running (--mps {setting}{why})"


async def _remote(options: DoctorOptions, target: Target, marker: str, work: Path, t0: float) -> DoctorReport:
    from . import kernels

    discovery = Job(
        "discover",
        kernels.source("cpu_ref_matmul"),
        kernels.self_solution(kernels.source("cpu_ref_matmul")),
        options={"correctness_trials": 1, "perf_trials": 1, "warmup": 0, "measure_performance": False},
    )
    answers = await target.all_at_once([discovery] * DISCOVERY_JOBS)
    target.devices = sorted({a.device for a in answers if a.device != "?"})
    on_gpu = any(a.body.get("device") == "cuda" or a.device.startswith("gpu") for a in answers)
    path: PathName = "gpu" if on_gpu else "cpu"
    plan = GPU if path == "gpu" else CPU
    first = next((a.body for a in answers if a.body.get("worker_id")), answers[0].body)
    env = environment(
        target=options.url or "",
        path=path,
        in_process=False,
        env_info=first,
        mps=None if path == "gpu" else "n/a (no GPU)",
        settings=options.settings,
    )
    env.devices = list(target.devices)
    if not target.devices:
        why = f"{answers[0].outcome}: {answers[0].body.get('message', '')[:300]}"
        reach = CheckReport(
            name="reach",
            title="the service judges jobs",
            runs=f"{DISCOVERY_JOBS} honest probe jobs at once",
            rule="each is answered by a worker",
            fix="check --url and --api-key (or BENCHMARK_SERVICE_API_KEY), and that the service is up",
            status="fail",
            seconds=0.0,
            results=[DeviceResult(device="host", status="fail", summary=f"no job was judged: {why}")],
        )
        return _report(options, env, [reach], path, t0)
    d = Doctor(target, path, options.quick, plan, env, work, marker)
    if path == "gpu":
        d.independent = asyncio.create_task(_local_independent(d, str(first.get("hardware") or "")))
    checks = await _checks(d, options.progress)
    if path == "gpu":
        env.mps = (
            "running (answers timed under MPS)"
            if any("under MPS" in m for m in target.timing_methods)
            else "not running (answers timed without MPS)"
            if target.timing_methods
            else None
        )
    return _report(options, env, checks, path, t0)


async def _local_independent(d: Doctor, hardware: str) -> dict[str, dict[str, Any]]:
    """``--url`` on a GPU service: this host's first GPU, when it is of the service's kind, times the
    known pairs for every device of the service."""
    _, names = nvidia_smi()
    match = next((n for n in names if hardware and hardware in n), None)
    if match is None:
        err = f"no GPU of the service's kind ({hardware or 'unknown'}) on this host to time independently"
        return {"*": {"error": err}}
    index = match.split(":", 1)[0]
    pairs = d.plan.take(d.plan.known, d.plan.known_quick, d.quick)
    return await independent_timings(pairs, d.plan.independent_calls, {"*": index})


async def _checks(d: Doctor, progress: Callable[[str], None] | None) -> list[CheckReport]:
    done = []
    for check in CHECKS:
        report = await check(d)
        done.append(report)
        if progress is not None:
            where = ", ".join(f"{r.device} {r.status}" for r in report.results)
            progress(f"doctor: {report.name}: {report.status.upper()} in {report.seconds:.0f} s ({where})")
    return done


def _report(
    options: DoctorOptions, env: Environment, checks: list[CheckReport], path: str, t0: float
) -> DoctorReport:
    trusted, line = verdict(checks, path)
    return DoctorReport(
        trusted=trusted,
        verdict=line,
        quick=options.quick,
        wall_s=round(time.perf_counter() - t0, 1),
        environment=env,
        checks=checks,
    )
