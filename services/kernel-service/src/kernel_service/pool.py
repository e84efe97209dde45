"""Parent side of the workers: spawn, talk JSON over a pipe, time out, kill, replace.

A :class:`WorkerProcess` is one persistent ``kernel_service.worker`` subprocess (warm: torch imported
once) in its own session, optionally inside fresh PID + network namespaces (``unshare``), so a kill of
its process group, or the death of its PID 1, takes every process the submission started with it.
A :class:`WorkerPool` hands out idle workers to jobs; a worker that timed out, crashed, broke the
protocol or reported a poisoned CUDA context is killed and replaced, and the next job gets a fresh one.
Nothing a worker sends is unpickled: it is JSON, and the caller validates it with pydantic.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .worker import FAULT_LOG_NAME, read_tail

#: Longest JSON line accepted from a worker; results are excerpts, so anything bigger is a broken worker.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
STARTUP_TIMEOUT_S = 180.0
#: Extra seconds past a job's timeout_s before the parent kills the worker (the worker's own budget
#: logic stops timing early; this is the hard wall).
KILL_GRACE_S = 2.0

_ids = itertools.count(1)


def unshare_available() -> bool:
    """Whether ``unshare`` can give a worker its own PID and network namespaces here."""
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        res = subprocess.run([*_unshare_prefix(exe), "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0


def _unshare_prefix(exe: str) -> list[str]:
    # A new PID namespace needs its own /proc: without it cuInit fails (CUDA_ERROR_OPERATING_SYSTEM, 304)
    # and torch silently sees no GPU (measured on the H100 host, bench/results/unshare_cuda_probe.txt).
    prefix = [exe, "--pid", "--fork", "--kill-child", "--net", "--mount", "--mount-proc"]
    if os.geteuid() != 0:
        prefix.append("--map-root-user")  # an unprivileged user needs a user namespace for the others
    return prefix


@dataclass
class WorkerConfig:
    """How workers are started; one config per pool."""

    role: str = "eval"  # "eval" (times; owns a device) | "compile" (CPU only, fills the build cache)
    root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kernel-service")
    fsize_bytes: int = 1 << 30
    nproc: int | None = None
    address_space: int | None = None
    max_jobs_per_worker: int = 50
    sandbox: str = "auto"  # "auto" | "unshare" | "none"
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Reply:
    """What came back for one job: a result dict, or why there is none."""

    result: dict[str, Any] | None
    failure: str | None = None  # "timeout" | "crash" | "protocol"
    message: str = ""
    phase: str | None = None
    output: str | None = None
    worker_id: str = ""
    recycle: bool = False


class WorkerProcess:
    """One warm worker subprocess. Blocking API: call it from a thread."""

    def __init__(self, config: WorkerConfig, device: str | None, use_unshare: bool) -> None:
        self.config = config
        self.device = device  # a GPU index for CUDA_VISIBLE_DEVICES, or None (no GPU)
        self.worker_id = f"{config.role}-{device if device is not None else 'cpu'}-{next(_ids)}"
        self.tmp = config.root / "workers" / self.worker_id
        self.jobs_done = 0
        self.ready_info: dict[str, Any] | None = None
        self._use_unshare = use_unshare
        self._buf = b""
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self._rfd: int | None = None

    def spawn(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        rfd, wfd = os.pipe()
        env = dict(os.environ)
        env.update(self.config.env)
        env["CUDA_VISIBLE_DEVICES"] = self.device if self.device is not None else ""
        env["TMPDIR"] = str(self.tmp)
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [
            sys.executable,
            "-m",
            "kernel_service.worker",
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
        if self._use_unshare:
            exe = shutil.which("unshare")
            assert exe is not None
            cmd = [*_unshare_prefix(exe), *cmd]
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
            )
        finally:
            os.close(wfd)
            stderr.close()
        self._rfd = rfd

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> dict[str, Any]:
        if self.ready_info is not None:
            return self.ready_info
        if self.proc is None:
            self.spawn()
        msg, why = self._read_message(time.monotonic() + timeout)
        if msg is None or msg.get("type") != "ready":
            log = read_tail(self.tmp / "worker-stderr.txt") or ""
            self.kill()
            raise RuntimeError(f"worker {self.worker_id} failed to start ({why or msg}): {log}")
        self.ready_info = msg
        return msg

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, job: dict[str, Any], timeout: float) -> Reply:
        """Send ``job`` and wait for its result at most ``timeout`` s; kill the worker on any fault."""
        with self._lock:
            self.wait_ready()
            assert self.proc is not None and self.proc.stdin is not None
            job_id = str(job["job_id"])
            try:
                self.proc.stdin.write((json.dumps(job) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                return self._fault("crash", f"worker pipe broken before the job started: {exc}", None)
            deadline = time.monotonic() + timeout
            phase: str | None = None
            while True:
                msg, why = self._read_message(deadline)
                if msg is None:
                    if why == "timeout":
                        return self._fault("timeout", f"exceeded the {timeout:.0f} s limit", phase)
                    if why == "eof":
                        return self._fault("crash", "", phase)
                    return self._fault("protocol", why or "unreadable message", phase)
                kind = msg.get("type")
                if kind == "phase" and msg.get("job_id") == job_id:
                    phase = str(msg.get("phase"))
                elif kind == "result" and msg.get("job_id") == job_id:
                    self.jobs_done += 1
                    if "error" in msg:
                        return self._fault("protocol", f"worker error: {msg['error']}", phase)
                    result = msg.get("result")
                    if not isinstance(result, dict):
                        return self._fault("protocol", "result is not a JSON object", phase)
                    recycle = bool(result.pop("recycle", False))
                    if recycle or self.jobs_done >= self.config.max_jobs_per_worker:
                        self.kill()
                    return Reply(result=result, worker_id=self.worker_id, phase=phase, recycle=recycle)
                else:
                    return self._fault("protocol", f"unexpected message {str(msg)[:200]}", phase)

    def _fault(self, failure: str, message: str, phase: str | None) -> Reply:
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
        )

    def _death_message(self) -> str:
        if self.proc is None:
            return "worker was not running"
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "worker closed its result pipe but did not exit"
        if self._use_unshare and code > 128:
            code = -(code - 128)  # unshare --fork reports a child killed by signal N as 128 + N
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
        if self._rfd is not None:
            os.close(self._rfd)
            self._rfd = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def dead(self) -> bool:
        return self._rfd is None


class WorkerPool:
    """Idle workers in a queue, one per slot; a job borrows one and gives back a live one."""

    def __init__(self, config: WorkerConfig, devices: list[str | None]) -> None:
        if not devices:
            raise ValueError("a worker pool needs at least one slot")
        self.config = config
        self.devices = devices
        self.use_unshare = {"auto": None, "unshare": True, "none": False}[config.sandbox]
        self._idle: asyncio.Queue[WorkerProcess] | None = None
        self._all: list[WorkerProcess] = []
        self.ready_info: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        return len(self.devices)

    def _new_worker(self, device: str | None) -> WorkerProcess:
        assert self.use_unshare is not None
        w = WorkerProcess(self.config, device, self.use_unshare)
        w.spawn()  # starts importing torch now, in parallel with whatever the caller does next
        self._all.append(w)
        return w

    async def start(self) -> None:
        if self.use_unshare is None:
            self.use_unshare = await anyio.to_thread.run_sync(unshare_available)
        self._idle = asyncio.Queue()
        workers = [self._new_worker(d) for d in self.devices]
        for w in workers:
            self.ready_info = await anyio.to_thread.run_sync(w.wait_ready)
            self._idle.put_nowait(w)

    async def run(self, job: dict[str, Any], timeout: float) -> tuple[Reply, float]:
        """Run ``job`` on an idle worker; returns the reply and the seconds spent waiting for one."""
        assert self._idle is not None, "pool not started"
        t0 = time.monotonic()
        worker = await self._idle.get()
        waited = time.monotonic() - t0
        try:
            reply = await anyio.to_thread.run_sync(worker.run, job, timeout)
        except BaseException:
            worker.kill()
            raise
        finally:
            if worker.dead:
                self._all.remove(worker)
                await anyio.to_thread.run_sync(worker.close)
                worker = self._new_worker(worker.device)
            self._idle.put_nowait(worker)
        return reply, waited

    async def close(self) -> None:
        for w in list(self._all):
            await anyio.to_thread.run_sync(w.close)
        self._all.clear()
