"""Parent side of the workers: spawn, talk JSON over a pipe, time out, kill, replace.

A :class:`WorkerProcess` is one persistent ``kernel_service.workers.worker`` subprocess (warm: torch imported
once) in its own session, inside fresh PID + network + mount namespaces where the host allows it
(``sandbox.launch_prefix``: bubblewrap, else ``unshare``), with an allow-listed environment (never the
service's secrets), so a kill of its process group, or the death of its PID 1, takes every process the
submission started with it. The worker applies the in-process layers itself (rlimits, Landlock).
A :class:`WorkerPool` hands out idle workers to jobs; a worker that timed out, crashed, broke the
protocol, served ``max_jobs_per_worker`` jobs, or asked to be recycled (a fault, a patch or thread the
solution left behind, leftover processes) is killed and replaced, and the next job gets a fresh one.
Nothing a worker sends is unpickled: it is JSON, and the caller validates it with pydantic.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchmark_runner.service.caller import current_caller

from ..judging import sandbox
from ..judging.sandbox import Launcher
from ..kernelbench.metrics import WorkMeter
from .gpu_ready import gpu_ready
from .scheduling import FairScheduler
from .worker import CANCEL_FILE, FAULT_LOG_NAME, HOLD_ENV, read_tail

#: Longest JSON line accepted from a worker; results are excerpts, so anything bigger is a broken worker.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
STARTUP_TIMEOUT_S = 180.0
#: Extra seconds past a job's timeout_s before the parent kills the worker (the worker's own budget
#: logic stops timing early; this is the hard wall).
KILL_GRACE_S = 2.0

_ids = itertools.count(1)
logger = logging.getLogger(__name__)


SANDBOX_CHOICES = ("auto", "bwrap", "unshare", "none")


def detect_gpus() -> list[int]:
    """GPU indices visible to this process (``torch.cuda.device_count`` does not create a context)."""
    try:
        import torch

        return list(range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - no torch / broken driver: no GPUs
        return []


def worker_gpu(index: int, env: Mapping[str, str] = os.environ) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` a worker gets for this process's GPU ``index``.

    A worker's own variable replaces the service's, so an index of the service's (GPU 0 of a service
    started with ``CUDA_VISIBLE_DEVICES=2,3``) must become the entry it stands for (``2``): a bare index
    would put the worker on another GPU than the one the service counted, perhaps beside another worker.
    """
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    names = [v.strip() for v in visible.split(",") if v.strip()]
    if not 0 <= index < len(names):
        raise ValueError(
            f"gpus: GPU {index} is not visible to the service (CUDA_VISIBLE_DEVICES={visible!r} names "
            f"{len(names)}; use indices 0..{len(names) - 1})"
        )
    return names[index]


def resolve_launcher(choice: str) -> tuple[Launcher, tuple[str, ...]]:
    """The launcher for a pool's ``sandbox`` setting, and notes on layers that are missing.

    ``auto`` takes the best one that works here (bubblewrap, else unshare, else none: the worker then
    still has rlimits and Landlock, and its isolation report says what is missing). Naming a launcher
    that does not work here is a configuration error, not a silent downgrade.
    """
    if choice not in SANDBOX_CHOICES:
        raise ValueError(f"sandbox: expected one of {', '.join(SANDBOX_CHOICES)}, got {choice!r}")
    if choice == "none":
        return "none", ("sandbox disabled by configuration (sandbox='none')",)
    launcher, why = sandbox.available_launcher(choice)
    if choice != "auto" and launcher != choice:
        raise RuntimeError(f"sandbox={choice!r} requested but it does not work here: {'; '.join(why)}")
    return launcher, why


@dataclass
class WorkerConfig:
    """How workers are started; one config per pool."""

    role: str = "eval"  # "eval" (times; owns a device) | "compile" (CPU only, fills the build cache)
    root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kernel-service")
    fsize_bytes: int = 1 << 30
    nproc: int | None = None
    address_space: int | None = None
    max_jobs_per_worker: int = 50
    sandbox: str = "auto"  # "auto" | "bwrap" | "unshare" | "none"
    env: dict[str, str] = field(default_factory=dict)
    #: Per device (a ``WorkerProcess.device``), what its workers' environment adds or overrides (its MPS
    #: daemon, and the GPU as that daemon names it: ``workers.mps``).
    device_env: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Keep a held worker beside each slot (torch imported, CUDA not started) to replace the slot's worker
    #: when it dies; None: for GPU slots only (a fault there must cost seconds, not a fresh torch import).
    standby: bool | None = None
    #: Dirs a worker may write besides its own temp dir (the build cache); None: ``root / "build-cache"``.
    writable: list[Path] | None = None
    #: Extra dirs a worker may read (Landlock); system and Python dirs are always readable.
    readable: list[Path] = field(default_factory=list)
    #: Landlock in the worker (on by default; off only to diagnose a host where it breaks something).
    landlock: bool = True

    def writable_dirs(self) -> list[Path]:
        return list(self.writable) if self.writable is not None else [self.root / "build-cache"]


@dataclass
class Reply:
    """What came back for one job: a result dict, or why there is none."""

    result: dict[str, Any] | None
    failure: str | None = None  # "timeout" | "crash" | "gpu_fault" | "protocol" | "cancelled" | "startup"
    message: str = ""
    phase: str | None = None
    output: str | None = None
    worker_id: str = ""
    recycle: bool = False
    #: Whether the worker said the submission's code was sent to run (a ``candidate`` message; only
    #: KernelBench jobs send it): a crash before it is not the submission's.
    candidate_started: bool = False


class WorkerProcess:
    """One warm worker subprocess. Blocking API: call it from a thread."""

    def __init__(
        self,
        config: WorkerConfig,
        device: str | None,
        launcher: Launcher = "none",
        notes: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.device = device  # a GPU index for CUDA_VISIBLE_DEVICES, or None (no GPU)
        self.worker_id = f"{config.role}-{device if device is not None else 'cpu'}-{next(_ids)}"
        self.tmp = config.root / "workers" / self.worker_id
        self.jobs_done = 0
        self.ready_info: dict[str, Any] | None = None
        self.launcher: Launcher = launcher
        self._notes = notes
        self.writable: list[Path] = config.writable_dirs()  # what its Landlock domain may write
        self._buf = b""
        self._lock = threading.RLock()
        self.env: dict[str, str] = {}
        self.held = False  # started as a standby: ``go`` is written once the GPU takes clients
        self.proc: subprocess.Popen[bytes] | None = None
        self._rfd: int | None = None
        self._cancelled: str | None = None  # the job id the last cancel() was for

    def can_write(self, path: Path) -> bool:
        dirs = [d.resolve() for d in [self.tmp, *self.writable]]
        return any(path == d or d in path.parents for d in dirs)

    def spawn(self, hold: bool = False) -> None:
        """Start the worker process (``hold``: as a standby, stopped before CUDA until :meth:`wait_ready`)."""
        self.held = hold
        self.tmp.mkdir(parents=True, exist_ok=True)
        rfd, wfd = os.pipe()
        writable = self.writable
        for d in writable:
            d.mkdir(parents=True, exist_ok=True)
        # Allow-list: the service's API keys and tokens never reach a submission (H7 hook 1).
        env = sandbox.worker_environment(
            os.environ,
            self.tmp,
            {
                **self.config.env,
                "CUDA_VISIBLE_DEVICES": self.device if self.device is not None else "",
                "PYTHONUNBUFFERED": "1",
                "KS_SANDBOX_LAUNCHER": self.launcher,
                sandbox.NAMESPACES_ENV: ",".join(sandbox.namespaces(self.launcher)),
                "KS_SANDBOX_NOTES": "\n".join(self._notes),
                "KS_SANDBOX_WRITABLE": os.pathsep.join(str(d) for d in writable),
                "KS_SANDBOX_READABLE": os.pathsep.join(
                    str(d) for d in [*_code_dirs(), *self.config.readable]
                ),
                "KS_SANDBOX_LANDLOCK": "1" if self.config.landlock else "0",
                **({HOLD_ENV: "1"} if hold else {}),
                **self.config.device_env.get(self.device or "", {}),
            },
        )
        self.env = env
        cmd = [
            sys.executable,
            "-m",
            "kernel_service.workers.worker",
            "--result-fd",
            str(wfd),
            "--worker-id",
            self.worker_id,
            "--tmp",
            str(self.tmp),
            "--fsize",
            str(self.config.fsize_bytes),
        ]
        if self.config.nproc is not None:
            cmd += ["--nproc", str(self.config.nproc)]
        if self.config.address_space is not None:
            cmd += ["--address-space", str(self.config.address_space)]
        # bwrap also hides the service's work dir (other workers' temp dirs), binding back only ours.
        prefix = sandbox.launch_prefix(
            self.launcher, writable=[self.tmp, *writable], hidden=[self.config.root]
        )
        cmd = [*prefix, *cmd]
        stderr = open(self.tmp / "worker-stderr.txt", "wb")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(wfd,),
                start_new_session=True,
                env=env,
                cwd=self.tmp,
                # Its own session escapes a kill of the service's process group: the kernel kills it
                # (and, through unshare --kill-child / bwrap, its whole namespace) when the service dies.
                preexec_fn=sandbox.die_with_parent_hook(),
            )
        finally:
            os.close(wfd)
            stderr.close()
        self._rfd = rfd

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> dict[str, Any]:
        """Wait for the worker's start (a standby: until it holds, then until its GPU takes clients, then
        let it start CUDA); any thread may call it, the first does the work."""
        with self._lock:
            if self.ready_info is not None:
                return self.ready_info
            if self.proc is None:
                self.spawn()
            if self.dead:  # killed while starting (by another caller's failed start)
                raise RuntimeError(f"worker {self.worker_id} was killed before it was ready")
            deadline = time.monotonic() + timeout
            if self.held:
                self._expect("standby", deadline)
                if self.device is not None:
                    gpu_ready(self.env, max(0.0, deadline - time.monotonic()))
                try:
                    assert self.proc is not None and self.proc.stdin is not None
                    self.proc.stdin.write(b"go\n")
                    self.proc.stdin.flush()
                except (OSError, ValueError) as exc:  # ValueError: closed by a kill meanwhile
                    self._failed_start(f"go not taken: {exc}")
                self.held = False
            self.ready_info = self._expect("ready", deadline)
            return self.ready_info

    def _expect(self, kind: str, deadline: float) -> dict[str, Any]:
        msg, why = self._read_message(deadline)
        if msg is None or msg.get("type") != kind:
            self._failed_start(str(why or msg))
        assert msg is not None
        return msg

    def _failed_start(self, why: str) -> None:
        log = read_tail(self.tmp / "worker-stderr.txt") or ""
        self.kill()
        raise RuntimeError(f"worker {self.worker_id} failed to start ({why}): {log}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cancel(self, job_id: str) -> None:
        """Ask the worker to stop ``job_id`` at its next phase boundary (its client went away); it
        answers a result ``{"cancelled": phase}`` and stays warm. Any thread may call this."""
        self._cancelled = job_id
        flag = self.tmp / CANCEL_FILE
        part = flag.with_name(f"{CANCEL_FILE}.{os.getpid()}.{threading.get_ident()}")
        try:
            part.write_text(job_id)
            os.replace(part, flag)
        except OSError as exc:  # the worker is gone (its temp dir with it): nothing left to stop
            logger.debug("cannot ask %s to cancel %s: %s", self.worker_id, job_id, exc)

    def run(self, job: dict[str, Any], timeout: float) -> Reply:
        """Send ``job`` and wait for its result at most ``timeout`` s; kill the worker on any fault."""
        with self._lock:
            try:
                self.wait_ready()
            except RuntimeError as exc:  # nothing of the job ran: the caller may run it elsewhere
                return self._fault("startup", str(exc)[:1000], None)
            assert self.proc is not None and self.proc.stdin is not None
            job_id = str(job["job_id"])
            try:
                self.proc.stdin.write((json.dumps(job) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                return self._fault("crash", f"worker pipe broken before the job started: {exc}", None)
            deadline = time.monotonic() + timeout
            phase: str | None = None
            started = False
            while True:
                msg, why = self._read_message(deadline)
                if msg is None:
                    if why == "timeout":
                        return self._fault("timeout", f"exceeded the {timeout:.0f} s limit", phase, started)
                    if why == "eof":
                        return self._fault("crash", "", phase, started)
                    return self._fault("protocol", why or "unreadable message", phase, started)
                kind = msg.get("type")
                if kind == "phase" and msg.get("job_id") == job_id:
                    phase = str(msg.get("phase"))
                elif kind == "candidate" and msg.get("job_id") == job_id:
                    started = True
                elif kind == "result" and msg.get("job_id") == job_id:
                    self.jobs_done += 1
                    if "error" in msg and msg.get("gpu_fault"):  # under MPS: a side's fatal fault
                        first = str(msg["error"]).splitlines()[0][:300]
                        why = f"the GPU context failed under MPS ({first})"
                        return self._fault("gpu_fault", why, phase, started)
                    if "error" in msg:
                        return self._fault("protocol", f"worker error: {msg['error']}", phase, started)
                    result = msg.get("result")
                    if not isinstance(result, dict):
                        return self._fault("protocol", "result is not a JSON object", phase, started)
                    why = result.pop("recycle", None)
                    recycle = bool(why)
                    if not recycle and self.jobs_done >= self.config.max_jobs_per_worker:
                        why = f"served {self.jobs_done} jobs (max_jobs_per_worker)"
                    if why:
                        result["recycled"] = str(why)[:500]
                        self.kill()
                    if "cancelled" in result:
                        if self._cancelled != job_id:
                            why = "the job stopped as cancelled, uncancelled"
                            return self._fault("protocol", why, phase, started)
                        message = f"cancelled before {str(result['cancelled'])[:100]}"
                        return Reply(
                            None, "cancelled", message, phase, worker_id=self.worker_id, recycle=recycle
                        )
                    return Reply(
                        result=result,
                        worker_id=self.worker_id,
                        phase=phase,
                        recycle=recycle,
                        candidate_started=started,
                    )
                else:
                    return self._fault("protocol", f"unexpected message {str(msg)[:200]}", phase, started)

    def _fault(self, failure: str, message: str, phase: str | None, started: bool = False) -> Reply:
        output = read_tail(self.tmp / FAULT_LOG_NAME)
        self.kill()
        if failure == "crash":
            # The exit status is known only after the process is reaped (done by kill()).
            message = self._death_message()
        return Reply(
            result=None,
            failure=failure,
            message=message,
            phase=phase,
            output=output,
            worker_id=self.worker_id,
            recycle=True,
            candidate_started=started,
        )

    def _death_message(self) -> str:
        if self.proc is None:
            return "worker was not running"
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "worker closed its result pipe but did not exit"
        if self.launcher != "none" and code > 128:
            code = -(code - 128)  # unshare --fork / bwrap report a child killed by signal N as 128 + N
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker died with {name}"
        return f"worker exited with status {code}"

    def _read_message(self, deadline: float) -> tuple[dict[str, Any] | None, str | None]:
        assert self._rfd is not None
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, "timeout"
            with selectors.DefaultSelector() as sel:
                sel.register(self._rfd, selectors.EVENT_READ)
                if not sel.select(remaining):
                    return None, "timeout"
            chunk = os.read(self._rfd, 1 << 20)
            if not chunk:
                return None, "eof"
            self._buf += chunk
            if len(self._buf) > MAX_MESSAGE_BYTES and b"\n" not in self._buf:
                return None, f"message longer than {MAX_MESSAGE_BYTES} bytes"
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return None, f"malformed JSON from worker: {exc}"
        if not isinstance(msg, dict):
            return None, "message is not a JSON object"
        return msg, None

    def kill(self) -> None:
        """Kill the worker's whole process group (and, under unshare, its PID namespace)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
        # A thread reading from the worker (a job, a start) keeps the pipe: the worker being dead, it reads
        # EOF and closes it itself. Closed under its wait, the pipe would never wake it before its deadline.
        if self._rfd is not None and self._lock.acquire(blocking=False):
            try:
                os.close(self._rfd)
                self._rfd = None
            finally:
                self._lock.release()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def dead(self) -> bool:
        return self._rfd is None


def _code_dirs() -> list[Path]:
    """Where this package and ``benchmark_runner`` are imported from (the worker must read them)."""
    dirs = [Path(__file__).resolve().parents[2]]  # the directory kernel_service is imported from
    try:
        import benchmark_runner

        dirs.append(Path(benchmark_runner.__file__).resolve().parent.parent)
    except ImportError:  # pragma: no cover - always installed with the service
        pass
    return dirs


class WorkerPool:
    """Idle workers in a queue, one per slot; a job borrows one and gives back a live one."""

    def __init__(self, config: WorkerConfig, devices: list[str | None]) -> None:
        if not devices:
            raise ValueError("a worker pool needs at least one slot")
        self.config = config
        self.devices = devices
        if config.sandbox not in SANDBOX_CHOICES:
            raise ValueError(f"sandbox: expected one of {', '.join(SANDBOX_CHOICES)}, got {config.sandbox!r}")
        self.launcher: Launcher | None = None  # resolved (probed) in start()
        self.launcher_notes: tuple[str, ...] = ()
        #: Idle workers by slot (their index in ``devices``): the lowest free slot is handed out first, so
        #: the jobs of a batch sent again in the same order land on the same workers (which keep what
        #: they cached), where first-in-first-out swapped them whenever the jobs ended in another order.
        self._idle: asyncio.PriorityQueue[tuple[int, int, WorkerProcess]] | None = None
        self._handed = itertools.count()  # ties never compare workers
        self._turns = FairScheduler(len(devices))
        self._all: list[WorkerProcess] = []
        #: Per slot device, its standby (``WorkerConfig.standby``), started beside the slot's worker.
        self._standby: dict[str | None, WorkerProcess] = {}
        self.ready_info: dict[str, Any] | None = None
        #: Set by ``close``: a worker that dies from then on (killed by the close) is not replaced.
        self._closing = False
        self.meter = WorkMeter()  # jobs, worker-seconds, cancellations (the service's metrics)

    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def use_unshare(self) -> bool | None:
        """Kept for callers of the older API: whether workers run under ``unshare``."""
        return None if self.launcher is None else self.launcher == "unshare"

    def _new_worker(self, device: str | None, hold: bool = False) -> WorkerProcess:
        assert self.launcher is not None
        w = WorkerProcess(self.config, device, self.launcher, self.launcher_notes)
        w.spawn(hold)  # starts importing torch now, in parallel with whatever the caller does next
        self._all.append(w)
        return w

    def _keeps_standby(self, device: str | None) -> bool:
        return self.config.standby if self.config.standby is not None else device is not None

    def _replace(self, dead: WorkerProcess) -> WorkerProcess:
        """The dead worker's successor: its slot's standby where one is kept (a new standby started in
        its place), brought up at once on a thread so that the next job finds it ready; the seconds from
        here to ready go to the meter (``replace_s``)."""
        device = dead.device
        w = self._standby.pop(device, None)
        if w is None:
            w = self._new_worker(device, hold=self._keeps_standby(device))
        if self._keeps_standby(device):
            self._standby[device] = self._new_worker(device, hold=True)
        t0 = time.monotonic()

        def bring_up() -> None:
            try:
                w.wait_ready()
            except RuntimeError as exc:  # the job that takes it is answered so, and may be retried
                logger.warning(
                    "%s pool: replacement %s did not start: %s", self.config.role, w.worker_id, exc
                )
                return
            self.meter.replaced(time.monotonic() - t0)

        threading.Thread(target=bring_up, name=f"replace-{w.worker_id}", daemon=True).start()
        return w

    async def start(self) -> None:
        if self.launcher is None:
            self.launcher, self.launcher_notes = await anyio.to_thread.run_sync(
                resolve_launcher, self.config.sandbox
            )
        self._idle = asyncio.PriorityQueue()
        try:
            await self._start_workers()
        except RuntimeError as exc:
            if not self.config.landlock:
                raise
            # A worker that cannot start under Landlock (say, a GPU driver that needs a path outside the
            # allow-list) must not take the service down: start without it, and say so in every
            # answer's isolation report (``fallbacks``) and on stderr.
            await self.close()
            self._closing = False
            self._idle = asyncio.PriorityQueue()
            self.config = dataclasses.replace(self.config, landlock=False)
            note = f"Landlock disabled: a worker failed to start under it ({str(exc)[:500]})"
            self.launcher_notes = (*self.launcher_notes, note)
            logger.warning("%s pool: %s", self.config.role, note)
            await self._start_workers()

    async def _start_workers(self) -> None:
        assert self._idle is not None
        workers = [self._new_worker(d) for d in self.devices]
        for d in self.devices:
            if self._keeps_standby(d) and d not in self._standby:
                self._standby[d] = self._new_worker(d, hold=True)
        for slot, w in enumerate(workers):
            self.ready_info = await anyio.to_thread.run_sync(w.wait_ready)
            self._give_back(slot, w)

    def _give_back(self, slot: int, worker: WorkerProcess) -> None:
        assert self._idle is not None
        self._idle.put_nowait((slot, next(self._handed), worker))

    async def run(
        self, job: dict[str, Any], timeout: float, caller: str | None = None
    ) -> tuple[Reply, float]:
        """Run ``job`` on an idle worker; returns the reply and the seconds spent waiting for one.

        Callers (default: the request's, ``current_caller()``) take turns at the workers (``FairScheduler``).
        Cancelled (the client went away) while it waits, the job never starts; while it runs, the worker
        is asked to stop it at its next phase boundary, and this returns (re-raising the cancellation) once
        it has: the worker stays warm and the slot is free again.
        """
        assert self._idle is not None, "pool not started"
        t0 = time.monotonic()
        started: list[bool] = []
        try:
            async with self._turns.slot(current_caller() if caller is None else caller):
                return await self._run(job, timeout, t0, started)
        except asyncio.CancelledError:
            if not started:
                self.meter.cancelled_queued()
            raise

    async def _run(
        self, job: dict[str, Any], timeout: float, t0: float, started: list[bool]
    ) -> tuple[Reply, float]:
        assert self._idle is not None
        needed = self._grant_build_dir(job)
        slot, _, worker = await self._idle.get()
        waited = time.monotonic() - t0
        cancelled: BaseException | None = None
        try:
            if needed is not None and not worker.can_write(needed):
                # Started before its build cache was granted: replace it by one that may write there.
                self._all.remove(worker)
                await anyio.to_thread.run_sync(worker.close)
                worker = self._new_worker(worker.device)
            started.append(True)
            reply, cancelled = await self._on_worker(worker, job, timeout)
        except BaseException:
            worker.kill()
            raise
        finally:
            with anyio.CancelScope(shield=True):  # a cancelled job gives its slot back all the same
                if worker.dead:
                    with contextlib.suppress(ValueError):  # ``close`` may have let it go already
                        self._all.remove(worker)
                    await anyio.to_thread.run_sync(worker.close)
                # A worker killed by ``close`` gets no successor: one started now would outlive the pool.
                if not (worker.dead and self._closing):
                    self._give_back(slot, self._replace(worker) if worker.dead else worker)
        if cancelled is not None:
            raise cancelled
        return reply, waited

    async def _on_worker(
        self, worker: WorkerProcess, job: dict[str, Any], timeout: float
    ) -> tuple[Reply, BaseException | None]:
        """``worker.run`` in a thread. Cancelled meanwhile: ask the worker to stop the job at its next phase
        boundary, wait for that (shielded), and return the cancellation for the caller to re-raise."""
        job_id = str(job["job_id"])
        self.meter.started(job_id)
        thread = asyncio.ensure_future(anyio.to_thread.run_sync(worker.run, job, timeout))
        try:
            try:
                return await asyncio.shield(thread), None
            except asyncio.CancelledError as exc:
                self.meter.cancel_requested(job_id)
                worker.cancel(job_id)
                with anyio.CancelScope(shield=True):
                    reply = await thread
                return reply, exc
        finally:
            self.meter.finished(job_id)

    def _grant_build_dir(self, job: dict[str, Any]) -> Path | None:
        """The job's build dir if workers must be able to write it, after granting its cache root.

        A service should pass its build cache root in ``WorkerConfig.writable``; when it did not (its
        cache lives elsewhere), the pool grants the build dir's parent (the cache root) to the workers it
        starts from now on, unless that parent also holds the workers' own temp dirs (then the worker
        falls back to a job-local build dir, see ``harness.usable_build_dir``).
        """
        raw = job.get("build_dir")
        if not raw or not self.config.landlock:
            return None
        build_dir = Path(raw).resolve()
        writable = [d.resolve() for d in self.config.writable_dirs()]
        if any(build_dir == d or d in build_dir.parents for d in writable):
            return build_dir
        cache_root = build_dir.parent
        workers_dir = (self.config.root / "workers").resolve()
        if cache_root == workers_dir or cache_root in workers_dir.parents:
            return None
        self.config = dataclasses.replace(self.config, writable=[*self.config.writable_dirs(), cache_root])
        logger.warning(
            "%s pool: build cache %s was not in WorkerConfig.writable; granted to workers started from now on",
            self.config.role,
            cache_root,
        )
        return build_dir

    async def close(self) -> None:
        self._closing = True
        for w in list(self._all):
            await anyio.to_thread.run_sync(w.close)
        self._all.clear()
        self._standby.clear()
