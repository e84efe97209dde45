"""The checks after the sandbox's: honest references against themselves, a known speedup against an
independent timer, cheats that must get no reward, faults beside honest jobs, and (GPU, not ``--quick``)
an honest short kernel with builds running beside it. Each runs on every device at once
(``Target.on_every_device``), so a fault of one deployment that shows only when two GPUs judge together
(shared ``/dev/shm``, one MPS daemon for two GPUs) shows here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
from typing import Any

from . import kernels
from .checks import Check, Doctor, Pair, band
from .report import DeviceResult, JobRecord, Status
from .target import COVERAGE_TRIES, Answer, Job

#: The busy check waits this long after sending the builds before it times the kernel again.
BUILDS_SETTLE_S = 5.0


def job_of(d: Doctor, pair: Pair, **extra: Any) -> Job:
    ref = kernels.source(pair.reference)
    sol = kernels.self_solution(ref) if pair.solution == "self" else kernels.source(pair.solution)
    return Job(f"{pair.label}", ref, sol, pair.backend, d.options(**extra))


def _fmt(a: Answer) -> str:
    return f"{a.job.kernel} x{a.speedup:.3f}" if a.speedup is not None else f"{a.job.kernel} {a.outcome}"


def _missing(device: str) -> DeviceResult:
    return DeviceResult(
        device=device, status="fail", summary="no job of this check was judged on this device"
    )


# ---- honest references against themselves --------------------------------------------------------


async def run_honest(d: Doctor) -> list[DeviceResult]:
    lo, hi = d.plan.self_band
    per: dict[str, list[tuple[Answer, Answer | None]]] = {dev: [] for dev in d.target.devices}

    def within(a: Answer) -> bool:
        return a.outcome == "correct" and a.speedup is not None and lo <= a.speedup <= hi

    for pair in d.plan.take(d.plan.honest, d.plan.honest_quick, d.quick):
        got, _ = await d.target.on_every_device(job_of(d, pair))
        again = [dev for dev, a in got.items() if not within(a)]
        retry: dict[str, Answer] = {}
        if again:  # one more reading where the first missed: the band is held by a rerun, not by luck
            retry, _ = await d.target.on_every_device(job_of(d, pair))
        for dev in per:
            if dev in got:
                per[dev].append((got[dev], retry.get(dev) if dev in again else None))
    results = []
    for dev, pairs in per.items():
        if not pairs:
            results.append(_missing(dev))
            continue
        jobs: list[JobRecord] = []
        bad, shown = [], []
        for first, second in pairs:
            final = second or first
            ok = within(first) or (second is not None and within(second))
            jobs.append(first.record(ok=within(first)))
            if second is not None:
                jobs.append(second.record(ok=ok))
            text = _fmt(first) + (f" then x{second.speedup:.3f}" if second and second.speedup else "")
            if second is not None and second.speedup is None:
                text += f" then {second.outcome}"
            shown.append(text)
            if not ok:
                bad.append(
                    text + (f" ({final.body.get('message', '')[:120]})" if final.outcome != "correct" else "")
                )
        status: Status = "fail" if bad else "pass"
        summary = ("outside " if bad else "") + f"{band(d.plan.self_band)}: " + ", ".join(bad or shown)
        results.append(DeviceResult(device=dev, status=status, summary=summary, jobs=jobs))
    return results


HONEST_SELF = Check(
    name="honest_self",
    title="honest references judged against themselves",
    runs=lambda d: (
        "on every device, each reference as its own solution: "
        + ", ".join(p.label for p in d.plan.take(d.plan.honest, d.plan.honest_quick, d.quick))
    ),
    rule=lambda d: (
        f"correct, speedup within {band(d.plan.self_band)} ({d.plan.self_band_why}); a miss is "
        "judged once more and must then be within"
    ),
    fix=(
        "the judge's clock misreads honest work here: judge the failing reference against itself a few "
        "times (`kernel-service eval REF.py SOL.py --json`, SOL = REF plus `ModelNew = Model`) and compare "
        "ref_timing with new_timing and timing_gate (misses, null cost, host-timed readings); on a GPU a "
        "busy or throttled host, another tenant or moving clocks are the usual causes (docs/timing.md)"
    ),
    run=run_honest,
)


# ---- a known speedup against an independent timer ------------------------------------------------


def _known(d: Doctor) -> list[Pair]:
    return d.plan.take(d.plan.known, d.plan.known_quick, d.quick)


async def independent_timings(
    pairs: list[Pair], calls: int, gpus: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Per device: ``python -m kernel_service.doctor.independent`` on that GPU (``gpus``: device ->
    ``CUDA_VISIBLE_DEVICES``), all devices at once, each its own GPU."""
    names = [f"{p.reference}:{p.solution}" for p in pairs]

    async def one(visible: str) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        env["CUDA_VISIBLE_DEVICES"] = visible
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kernel_service.doctor.independent", "--device", "cuda",
            "--calls", str(calls), *names,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        out, err = await proc.communicate()
        if proc.returncode != 0:
            return {"error": f"exit {proc.returncode}: {err.decode(errors='replace')[-500:]}"}
        return dict(json.loads(out))

    devices = list(gpus)
    found = await asyncio.gather(*(one(gpus[dev]) for dev in devices))
    return dict(zip(devices, found, strict=True))


def _leaky(reading: dict[str, Any], calls: int) -> bool:
    """Whether an independent reading held host time in over a tenth of a side's calls (its GPU spin ran
    out before the call was enqueued: a busy host while the service started)."""
    return any(
        isinstance(r, dict)
        and max(r.get("ref_host_leaked_calls", 0), r.get("new_host_leaked_calls", 0)) > calls / 10
        for r in reading.values()
    )


async def run_known(d: Doctor) -> list[DeviceResult]:
    assert d.independent is not None
    indep = dict(await d.independent)
    again = {
        dev: dev[3:]
        for dev, r in indep.items()
        if dev.startswith("gpu") and _leaky(r, d.plan.independent_calls)
    }
    if again:  # timed again now, with the service idle
        indep.update(await independent_timings(_known(d), d.plan.independent_calls, again))
    tol = d.plan.known_tolerance
    per: dict[str, list[tuple[Pair, Answer, float | None, dict[str, Any]]]] = {
        dev: [] for dev in d.target.devices
    }

    def independent_of(dev: str, key: str) -> dict[str, Any]:
        reading = indep.get(dev, indep.get("*", {}))
        return {"error": reading["error"]} if "error" in reading else dict(reading.get(key, {}))

    def ratio_of(a: Answer | None, ind: dict[str, Any]) -> float | None:
        return a.speedup / ind["speedup"] if a is not None and a.speedup and ind.get("speedup") else None

    for pair in _known(d):
        key = f"{pair.reference}:{pair.solution}"
        got, _ = await d.target.on_every_device(job_of(d, pair))
        missed = [
            dev
            for dev in per
            if (r := ratio_of(got.get(dev), independent_of(dev, key))) is not None and abs(r - 1) > tol
        ]
        if missed:  # one more service reading before failing it
            second, _ = await d.target.on_every_device(job_of(d, pair))
            got.update({dev: second[dev] for dev in missed if dev in second and second[dev].speedup})
        for dev in per:
            if dev in got:
                ind = independent_of(dev, key)
                per[dev].append((pair, got[dev], ratio_of(got[dev], ind), ind))
    results = []
    for dev, rows in per.items():
        if not rows:
            results.append(_missing(dev))
            continue
        bad, shown, jobs, blind = [], [], [], []
        for pair, a, ratio, ind in rows:
            ok = a.outcome == "correct" and ratio is not None and abs(ratio - 1) <= tol
            if ind.get("error") and not d.target.in_process and a.outcome == "correct":
                blind.append(
                    f"{pair.label}: service x{a.speedup or 0:.2f}; cannot compare: {ind['error'][:200]}"
                )
                jobs.append(a.record())
                continue
            jobs.append(a.record(ok=ok))
            if ind.get("error"):
                text = f"{pair.label}: the independent timer failed: {ind['error'][:200]}"
            elif a.speedup is None:
                text = f"{pair.label}: {a.outcome} ({a.body.get('message', '')[:150]})"
            else:
                text = f"{pair.label}: service x{a.speedup:.2f}, independent x{ind['speedup']:.2f} ({(ratio or 0) - 1:+.1%})"
            shown.append(text)
            if not ok:
                bad.append(text)
        status: Status = "fail" if bad else "warn" if blind else "pass"
        results.append(
            DeviceResult(
                device=dev,
                status=status,
                summary="; ".join(bad or blind or shown),
                jobs=jobs,
                data={"independent": {p.label: ind for p, _, _, ind in rows}},
            )
        )
    return results


KNOWN_SPEEDUP = Check(
    name="known_speedup",
    title="a kernel with a known real speedup, against an independent timer in the same run",
    runs=lambda d: (
        (
            "on every device, "
            + ", ".join(p.label for p in _known(d))
            + f"; the same pairs timed by a plain process on the same GPU (CUDA events around each call, L2 "
            f"flushed, the stream held while the call is enqueued; median of {d.plan.independent_calls})"
        )
        if d.path == "gpu"
        else None
    ),
    rule=lambda d: (
        f"correct, and the service's speedup within {d.plan.known_tolerance:.0%} of the independent "
        "timer's (a miss is judged once more)"
    ),
    fix=(
        "the service's clock disagrees with plain CUDA events: a timer that counts host launch time reads "
        "fast kernels slow; compare the answer's timing_gate (null cost, misses, calls per reading) with "
        "bench/timing_fidelity.py on this host, and try --mps off / on to see which path is off"
    ),
    run=run_known,
    skip_why=lambda d: "GPU only (the CPU timer is for tests and development, not for publishing speedups)",
)


# ---- cheats that must get no reward --------------------------------------------------------------


async def run_cheats(d: Doctor) -> list[DeviceResult]:
    limit = d.plan.cheat_limit
    per: dict[str, list[tuple[Answer, bool]]] = {dev: [] for dev in d.target.devices}
    for pair in d.plan.take(d.plan.cheats, d.plan.cheats_quick, d.quick):
        got, _ = await d.target.on_every_device(job_of(d, pair))
        for dev, a in got.items():
            if dev in per:
                no_reward = a.outcome != "correct" or (a.speedup is not None and a.speedup <= limit)
                per[dev].append((a, no_reward))
    results = []
    for dev, rows in per.items():
        if not rows:
            results.append(_missing(dev))
            continue
        bad = [
            f"{_fmt(a)} judged correct (reward {a.body.get('reward', 0):+.2f})" for a, ok in rows if not ok
        ]
        shown = [f"{a.job.kernel} {a.outcome}" + (f" x{a.speedup:.2f}" if a.speedup else "") for a, _ in rows]
        results.append(
            DeviceResult(
                device=dev,
                status="fail" if bad else "pass",
                summary="; ".join(bad or shown),
                jobs=[a.record(ok=ok) for a, ok in rows],
            )
        )
    return results


CHEATS = Check(
    name="cheats_no_reward",
    title="cheats get no reward",
    runs=lambda d: (
        "on every device: "
        + ", ".join(p.label for p in d.plan.take(d.plan.cheats, d.plan.cheats_quick, d.quick))
    ),
    rule=lambda d: (
        f"each is not correct, or correct at no more than x{d.plan.cheat_limit:g} (its work is the "
        "reference's: no gain beyond the honest band)"
    ),
    fix=(
        "a defence of the judge is off on this deployment: check that the service runs this package's "
        "judge (kernel-service serve, not an older image), that the answers' isolation shows the workers "
        "sandboxed, and run the repository's bench/adversarial/run_gpu.py here (docs/integrity.md lists "
        "each defence)"
    ),
    run=run_cheats,
)


# ---- faults beside honest jobs -------------------------------------------------------------------


def _is_self(a: Answer, d: Doctor) -> bool:
    return any(p.label == a.job.kernel and p.solution == "self" for p in d.plan.fault_honest)


async def run_faults(d: Doctor) -> list[DeviceResult]:
    faults = d.plan.take(d.plan.faults, d.plan.faults_quick, d.quick)
    honest = d.plan.take(d.plan.fault_honest, 1, d.quick)
    lo, hi = d.plan.fault_band
    jobs: list[Job] = []
    for _ in d.target.devices:  # per device: honest, fault, honest, fault, ..., honest
        for i, fault in enumerate(faults):
            jobs += [job_of(d, honest[i % len(honest)]), job_of(d, fault)]
        jobs.append(job_of(d, honest[len(faults) % len(honest)]))
    fault_labels = {p.label for p in faults}
    answers = await d.target.all_at_once(jobs)
    rounds = 1
    # The service picks each job's device: send the batch again while a device has had no fault of its own.
    while rounds < COVERAGE_TRIES and not set(d.target.devices) <= {
        a.device for a in answers if a.job.kernel in fault_labels
    }:
        answers += await d.target.all_at_once(jobs)
        rounds += 1
    health, _ = await d.target.on_every_device(job_of(d, honest[0]))  # the service judges right after them
    results = []
    for dev in d.target.devices:
        mine = [a for a in answers if a.device == dev]
        records, bad = [], []
        n_faults = 0
        for a in mine:
            if a.job.kernel in fault_labels:
                n_faults += 1
                total = float((a.body.get("elapsed") or {}).get("total_s") or a.seconds)
                ok = (
                    a.outcome != "correct"
                    and (a.body.get("reward") or 0) < 0
                    and total <= d.plan.fault_within_s
                )
                if not ok:
                    bad.append(f"fault {a.job.kernel}: {a.outcome} after {total:.1f} s")
            else:
                ok = a.outcome == "correct" and (
                    not _is_self(a, d) or (a.speedup is not None and lo <= a.speedup <= hi)
                )
                if not ok:
                    bad.append(
                        f"honest {_fmt(a)} beside faults"
                        + (f": {a.body.get('message', '')[:150]}" if a.outcome != "correct" else "")
                    )
            records.append(a.record(ok=ok))
        after = health.get(dev)
        if after is None:
            bad.append("no honest job judged on this device after the faults")
        else:
            ok = after.outcome == "correct"
            records.append(after.record(ok=ok))
            if not ok:
                bad.append(
                    f"honest job after the faults: {after.outcome}: {after.body.get('message', '')[:150]}"
                )
        honest_n = sum(1 for a in mine if a.job.kernel not in fault_labels)
        status: Status = "fail" if bad else "pass"
        summary = (
            "; ".join(bad)
            if bad
            else (
                f"{honest_n} honest jobs beside {n_faults} fault(s) here ({len(jobs)} jobs at once on all devices, "
                f"{rounds} round(s)) and one after: all correct within {band(d.plan.fault_band)}; "
                "faults charged to themselves"
            )
        )
        if not bad and n_faults == 0:
            status = "warn"
            summary += (
                f"; no fault landed on this device in {rounds} rounds (the service picks devices): its "
                "honest jobs ran beside faults on the others only"
            )
        results.append(DeviceResult(device=dev, status=status, summary=summary, jobs=records))
    return results


FAULTS = Check(
    name="fault_beside_honest",
    title="faults beside honest jobs harm no neighbour",
    runs=lambda d: (
        "on every device at once, honest jobs interleaved with "
        + ", ".join(p.label for p in d.plan.take(d.plan.faults, d.plan.faults_quick, d.quick))
        + ", then one honest job per device"
    ),
    rule=lambda d: (
        f"every fault is not correct, with a negative reward, answered within {d.plan.fault_within_s:g} s; "
        f"every honest job correct (a reference against itself within {band(d.plan.fault_band)})"
    ),
    fix=(
        "a fault reaches other jobs here: keep --mps auto (one MPS daemon a GPU) or --mps off, never a "
        "host-wide MPS daemon for several GPUs; check /v1/metrics pools.eval.replacements and the answers' "
        "retries (README: Faulting kernels)"
    ),
    run=run_faults,
)


# ---- a short kernel on a busy host (GPU, not --quick) --------------------------------------------


def _build_job(d: Doctor, i: int, backend: str) -> Job:
    token = f"{d.marker}_{i}"
    name = "build_cuda_add" if backend == "cuda" else "build_cpp_add"
    sol = kernels.fill(kernels.source(name), literal=False, token=token)
    return Job(f"build:{token}", kernels.source("gpu_ref_add_small"), sol, backend, d.options(timeout_s=900))


def _builds(d: Doctor) -> tuple[int, str]:
    n = 8 if d.compile_workers is None else min(16, max(4, 2 * d.compile_workers))
    backend = "cuda" if not d.target.in_process or shutil.which("nvcc") else "cpp"
    return n, backend


async def run_busy(d: Doctor) -> list[DeviceResult]:
    assert d.plan.busy is not None
    tol = d.plan.busy_tolerance
    # Idle twice: a path whose clock reads a call of a few us differently job to job fails here, and is
    # told so, rather than blamed on the builds.
    idle, _ = await d.target.on_every_device(job_of(d, d.plan.busy))
    idle_again, _ = await d.target.on_every_device(job_of(d, d.plan.busy))
    n, backend = _builds(d)
    t0 = time.perf_counter()
    loads = [asyncio.create_task(d.target.evaluate(_build_job(d, i, backend))) for i in range(n)]
    try:
        await asyncio.sleep(BUILDS_SETTLE_S)
        loaded, _ = await d.target.on_every_device(job_of(d, d.plan.busy))
        pending = sum(not t.done() for t in loads)
    finally:
        for task in loads:  # the client going away cancels them (queued ones never start)
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*loads, return_exceptions=True)
    results = []
    for dev in d.target.devices:
        a, a2, b = idle.get(dev), idle_again.get(dev), loaded.get(dev)
        if a is None or a2 is None or b is None:
            results.append(_missing(dev))
            continue
        data = {
            "builds": n,
            "build_backend": backend,
            "builds_pending_after": pending,
            "loaded_after_s": round(time.perf_counter() - t0, 1),
        }
        jobs = [a.record(), a2.record(), b.record()]
        if any(x.outcome != "correct" or not x.speedup for x in (a, a2, b)):
            text = f"idle {a.outcome} x{a.speedup} and {a2.outcome} x{a2.speedup}, with builds {b.outcome} x{b.speedup}"
            results.append(DeviceResult(device=dev, status="fail", summary=text, jobs=jobs, data=data))
            continue
        assert a.speedup and a2.speedup and b.speedup
        spread = a2.speedup / a.speedup - 1
        change = b.speedup / ((a.speedup + a2.speedup) / 2) - 1
        data["idle_spread"] = round(spread, 4)
        text = (
            f"{d.plan.busy.label}: idle x{a.speedup:.3f} and x{a2.speedup:.3f}, "
            f"with {n} {backend} builds x{b.speedup:.3f} ({change:+.1%})"
        )
        status: Status = "pass" if abs(change) <= tol and abs(spread) <= tol else "fail"
        if abs(spread) > tol:
            text += (
                f"; the two idle readings differ by {spread:+.1%} with no build running: this path's clock, "
                "not the builds, reads a call of a few us differently job to job (run with MPS: --mps auto, "
                "the default where the host runs the daemon)"
            )
        if b.body.get("timing_degraded"):
            status, text = (
                "warn",
                text
                + "; the loaded answer is timing_degraded (no speed reward): the host is too busy for the gate",
            )
        elif pending == 0:
            status, text = (
                "warn",
                text + "; every build had ended before the loaded reading did: inconclusive",
            )
        jobs[2].ok = status != "fail"
        results.append(DeviceResult(device=dev, status=status, summary=text, jobs=jobs, data=data))
    return results


BUSY = Check(
    name="busy_host",
    title="the same honest kernel with builds running beside it",
    runs=lambda d: (
        (
            f"on every device, {d.plan.busy.label} (a call of a few us) idle twice, then again while "
            f"{_builds(d)[0]} distinct {_builds(d)[1]} load_inline builds run in the service's compile pool"
        )
        if d.path == "gpu" and d.plan.busy is not None
        else None
    ),
    rule=lambda d: (
        f"all correct, the two idle speedups within {d.plan.busy_tolerance:.0%} of each other and the loaded "
        f"one within {d.plan.busy_tolerance:.0%} of their mean"
    ),
    fix=(
        "builds beside the judge move its readings: keep the eval workers' cores apart from the compile "
        "pool's (the service pins them when it starts the compile pool; a host with other busy processes "
        "needs cores of its own for the eval workers), and read timing_gate's host_timed_readings"
    ),
    run=run_busy,
    in_quick=False,
    skip_why=lambda d: "GPU only (CPU timings share the cores the builds would use)",
)

CHECKS_AFTER_SANDBOX = [HONEST_SELF, KNOWN_SPEEDUP, CHEATS, FAULTS, BUSY]
