"""The sandbox check: an honest submission that, as the candidate's process loads it, tries what the
sandbox must stop (``data/sandbox_probe.py``), judged on every device.

It connects to a TCP port the doctor listens on (127.0.0.1), reads a file of the doctor's outside the
worker's dirs, looks for a secret the doctor put in its own environment before starting the service
(in-process only: a worker's environment is an allow-list), and writes a file in ``/dev/shm`` that the
doctor then looks for in its own host's ``/dev/shm``: found there, the workers share the host's, and on a
GPU host two workers' CUDA inter-process events (named by PID, and every worker's PIDs are the same in
its own PID namespace) become each other's, which gave honest jobs on a second GPU false verdicts
(issue 29). The workers' own isolation reports (launcher, namespaces, Landlock, fallbacks) complete it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

from . import kernels
from .checks import Check, Doctor
from .environment import describe_isolation
from .report import DeviceResult, Status
from .target import Answer, Job

PROBE_PREFIX = "KS_DOCTOR_PROBE "
#: In the doctor's environment (in-process) while the service runs: a worker must not see it.
SECRET_ENV = "KS_DOCTOR_SECRET"
SHM_NOTE = "a private /dev/shm could not be mounted"


@contextlib.contextmanager
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records what reaches it."""
    received: list[bytes] = []
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    received.append(conn.recv(100) or b"<connected>")
                except OSError:
                    received.append(b"<connected>")

    thread = threading.Thread(target=accept, name="doctor-probe-listener", daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1], received
    finally:
        stop.set()
        thread.join(2)
        srv.close()


def probe_job(d: Doctor, port: int, secret_file: str, shm_file: str) -> Job:
    solution = kernels.fill(
        kernels.source("sandbox_probe"),
        port=port,
        secret_file=secret_file,
        marker=d.marker,
        shm_file=shm_file,
    )
    return Job(
        "probe:sandbox",
        kernels.source("cpu_ref_matmul"),
        solution,
        options={"correctness_trials": 1, "perf_trials": 1, "warmup": 0, "measure_performance": False,
                 "timeout_s": 120},
    )  # fmt: skip


def probe_seen(answer: Answer) -> dict[str, Any] | None:
    """What the probe printed (the worst of its lines, if its module was loaded more than once)."""
    seen: dict[str, Any] | None = None
    for line in str(answer.body.get("output") or "").splitlines():
        if line.startswith(PROBE_PREFIX):
            try:
                got = json.loads(line[len(PROBE_PREFIX) :])
            except json.JSONDecodeError:
                continue
            if seen is None:
                seen = got
            else:  # keep anything that got through
                for key in ("net", "file", "env"):
                    if got.get(key) in ("reached", "read", "present"):
                        seen[key] = got[key]
    return seen


def shm_row(iso: dict[str, Any] | None, found_on_host: bool) -> tuple[str, bool | None]:
    """The private /dev/shm row, and whether it is private (None: cannot tell)."""
    if found_on_host:
        return "NO: a worker's file appeared in this host's /dev/shm", False
    if not iso:
        return "unknown", None
    launcher = iso.get("launcher")
    if "private_shm" in iso:  # the workers say so themselves (services since issue 55)
        if iso["private_shm"]:
            return f"yes (the worker's own tmpfs; launcher {launcher})", True
        return f"NO: the workers have the host's /dev/shm (launcher {launcher})", False
    if launcher == "bwrap":
        return "yes (bwrap tmpfs)", True
    if launcher == "unshare":
        if any(SHM_NOTE in str(f) for f in iso.get("fallbacks", [])):
            return "NO: the worker could not mount its own", False
        return "yes (tmpfs in the worker's mount namespace)", True
    return "NO: no mount namespace (--sandbox none, or none works here)", False


async def run_probe(d: Doctor) -> list[DeviceResult]:
    tmp = d.work / "secret"
    tmp.mkdir(parents=True, exist_ok=True)
    secret_file = tmp / "api-keys.yaml"
    secret_file.write_text(f"tenant: {d.marker}\n")
    shm_file = f"/dev/shm/ks-doctor-{d.marker}"
    with listener() as (port, received):
        by_device, answers = await d.target.on_every_device(probe_job(d, port, str(secret_file), shm_file))
    found_on_host = os.path.exists(shm_file)
    if found_on_host:
        with contextlib.suppress(OSError):
            os.unlink(shm_file)
    results = []
    for device in d.target.devices or sorted(by_device):
        answer = by_device.get(device)
        if answer is None:
            results.append(DeviceResult(device=device, status="fail", summary="no probe job was judged here"))
            continue
        results.append(_judge_probe(d, device, answer, received, found_on_host))
    # the environment's rows from what the workers reported
    first = next((a for a in answers if a.body.get("isolation")), None)
    iso = first.body.get("isolation") if first else d.env.isolation
    if iso:
        d.env.isolation = iso
        d.env.namespaces, d.env.landlock = describe_isolation(iso)
    d.env.private_dev_shm = shm_row(iso, found_on_host)[0]
    return results


def _judge_probe(
    d: Doctor, device: str, answer: Answer, received: list[bytes], found_on_host: bool
) -> DeviceResult:
    job = answer.record()
    iso = answer.body.get("isolation") or {}
    seen = probe_seen(answer)
    failures: list[str] = []
    warnings: list[str] = []
    if answer.outcome != "correct":
        failures.append(f"the probe (an honest matmul) was judged {answer.outcome}: {job.message[:200]}")
    if seen is None:
        warnings.append("the probe's report is missing from the answer's output: the probes cannot tell")
        seen = {}
    if seen.get("net") == "reached" or any(d.marker.encode() in r for r in received):
        failures.append("the submission reached a TCP port on the host's loopback")
    if seen.get("file") == "read":
        failures.append("the submission read a file of the service's user outside its dirs")
    if d.target.in_process and seen.get("env") == "present":
        failures.append("the submission saw a secret of the service's environment")
    text, private = shm_row(iso, found_on_host)
    if private is False:
        if d.path == "gpu":
            failures.append(f"private /dev/shm: {text} (GPU workers' inter-process events would cross)")
        else:
            warnings.append(f"private /dev/shm: {text} (harmless on the CPU path, false verdicts on GPUs)")
    for note in iso.get("fallbacks", []):
        warnings.append(str(note))
    status: Status = "fail" if failures else "warn" if warnings else "pass"
    layers = ", ".join(x for x in describe_isolation(iso) if x) or "isolation unknown"
    probes = ", ".join(f"{k} {seen[k]}" for k in ("net", "file", "env", "shm") if k in seen)
    summary = "; ".join(failures or warnings) if status != "pass" else f"{layers}; probes: {probes}"
    job.ok = not failures
    return DeviceResult(device=device, status=status, summary=summary[:600], jobs=[job], data={"probe": seen})


SANDBOX = Check(
    name="sandbox",
    title="the sandbox layers hold (namespaces, Landlock, bubblewrap, private /dev/shm)",
    runs=lambda d: (
        "on every device, an honest matmul whose module tries the host's loopback, a file of the service's "
        "user, the service's environment and /dev/shm as the candidate's process loads it"
    ),
    rule=lambda d: (
        "the probe is judged correct; it reaches no loopback port, reads no file outside its dirs, sees no "
        "secret of the service's environment; "
        + ("/dev/shm is the worker's own (fail otherwise); " if d.path == "gpu" else "")
        + "a layer missing (isolation fallbacks) is a warning"
    ),
    fix=(
        "give the workers their namespaces and Landlock: run where unprivileged user namespaces work "
        "(`unshare -rpfn --mount-proc true`) or install bubblewrap, keep --sandbox auto, run a kernel with "
        "Landlock (Linux >= 5.13, `lsm=...,landlock`); docs/integrity.md says what each layer defends"
    ),
    run=run_probe,
)
