"""The judge's handles on its zygote and on the side processes it forks.

A :class:`SideProcess` is one forked side (the submission's, or the reference's): the judge sends it
pickled requests and reads JSON replies (never unpickling what a side sends), with a deadline on every
reply; a side that dies, overruns or breaks the protocol is killed (its whole process group) and the job
goes on without it. Its stdout/stderr reach the judge through a pipe whose tail alone is kept.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: Longest reply accepted from a side (outputs are descriptions, so anything bigger is hostile).
MAX_REPLY_BYTES = 4 * 1024 * 1024
ZYGOTE_START_S = 180.0
TAIL_BYTES = 4000


class SideFault(Exception):
    """A side died, overran its deadline or broke the protocol (``kind``: crash | timeout | protocol)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Tail:
    """Drains a pipe on a thread, keeping only the last bytes (a side may print gigabytes)."""

    def __init__(self, fd: int, limit: int = TAIL_BYTES) -> None:
        self.limit, self.total, self._tail = limit, 0, b""
        self._fd = fd
        self._thread = threading.Thread(target=self._drain, daemon=True, name="side-output")
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, 1 << 16):
                self.total += len(chunk)
                self._tail = (self._tail + chunk)[-self.limit :]
        except OSError:
            pass
        finally:
            os.close(self._fd)

    def text(self, wait: float = 0.5) -> str | None:
        self._thread.join(timeout=wait)
        if self.total == 0:
            return None
        text = self._tail.decode("utf-8", "replace")
        cut = self.total - len(self._tail)
        return f"[... {cut} bytes of output cut ...]\n{text}" if cut > 0 else text


class Zygote:
    """The judge's fork server (``kernel_service.workers.zygote``), started once per judge."""

    def __init__(self, log: Path, preimport: bool = True) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        flags = [] if preimport else ["--no-preimport"]
        with open(log, "ab") as out:  # never the judge's fds 1/2: they may be a job's capture pipe
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kernel_service.workers.zygote",
                    "--sock",
                    str(theirs.fileno()),
                    *flags,
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        theirs.close()
        self._lock = threading.Lock()
        self._hello: dict[str, Any] | None = None

    def hello(self) -> dict[str, Any]:
        """Wait for the zygote's start (its imports take seconds: the caller may do other work first)."""
        if self._hello is None:
            self._sock.settimeout(ZYGOTE_START_S)
            self._hello = json.loads(self._sock.recv(4096) or b"{}")
            self._sock.settimeout(30.0)
            if not self._hello.get("ready"):
                raise RuntimeError(f"the zygote did not start (exit code {self.proc.poll()})")
        return self._hello

    @property
    def forks_can_use_cuda(self) -> bool:
        """False when an import initialised CUDA in the zygote: its forks could not use the GPU."""
        return bool(self.hello().get("forks_can_use_cuda"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fork(self, request: dict[str, Any]) -> tuple[int, socket.socket, int]:
        self.hello()
        with self._lock:
            self._sock.send(json.dumps(request).encode())
            data, fds, _, _ = socket.recv_fds(self._sock, 4096, 2)
        if len(fds) != 2:
            raise RuntimeError("the zygote answered without the side's file descriptors")
        return int(json.loads(data)["pid"]), socket.socket(fileno=fds[0]), fds[1]

    def status(self, pid: int) -> str | None:
        """How a dead side ended ("killed by SIGSEGV", "exit status 3"), if the zygote saw it."""
        status = self._call({"op": "status", "pid": pid}).get("status")
        return str(status) if status else None

    def kill(self, pid: int) -> None:
        """Kill a side and its process group (the zygote does it: the judge's Landlock domain may not
        signal processes outside it) and return once it is reaped."""
        self._call({"op": "kill", "pid": pid})

    def freeze(self, pid: int) -> int:
        """Stop a side and every process it started; returns once they are stopped (how many)."""
        return int(self._call({"op": "freeze", "pid": pid}).get("frozen", 0))

    def thaw(self, pid: int) -> None:
        self._call({"op": "thaw", "pid": pid})

    def sweep(self) -> int:
        """Kill whatever the zygote still has as children (daemons a side left behind)."""
        return int(self._call({"op": "sweep"}).get("killed", 0))

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.hello()
        with self._lock:
            self._sock.send(json.dumps(msg).encode())
            reply: dict[str, Any] = json.loads(self._sock.recv(4096) or b"{}")
        return reply

    def close(self) -> None:
        self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class SideProcess:
    """One side, forked for one job."""

    def __init__(self, zygote: Zygote, role: str, request: dict[str, Any], deadline: float) -> None:
        self.role = role
        self.zygote = zygote
        self.pid, self.sock, out_fd = zygote.fork(request)
        self.tail = Tail(out_fd)
        self.conn = Connection(os.dup(self.sock.fileno()))
        self.deadline = deadline
        self.alive = True
        hello = self.receive("starting")
        self.isolation: dict[str, Any] = hello.get("isolation") or {}

    def request(self, msg: dict[str, Any], what: str, fd: int | None = None) -> dict[str, Any]:
        """Send ``msg`` (and ``fd``) and return the side's reply; raises :class:`SideFault`."""
        self.send(msg, what, fd)
        return self.receive(what)

    def send(self, msg: dict[str, Any], what: str, fd: int | None = None) -> None:
        """The first half of :meth:`request` (the side starts working on ``msg`` now)."""
        if not self.alive:
            raise SideFault("crash", f"the {self.role} process is not running")
        try:
            self.conn.send_bytes(pickle.dumps(msg))
            if fd is not None:
                socket.send_fds(self.sock, [b"F"], [fd])
        except OSError as exc:
            self.kill()
            raise SideFault("crash", f"the {self.role} process is gone ({what}): {exc}") from exc

    def receive(self, what: str) -> dict[str, Any]:
        """The side's next reply, within the job's deadline; raises :class:`SideFault`."""
        left = self.deadline - time.monotonic()
        try:
            ready = left > 0 and self.conn.poll(left)
            if not ready:
                self.kill()
                raise SideFault("timeout", f"the {self.role} process overran the time limit ({what})")
            raw = self.conn.recv_bytes(MAX_REPLY_BYTES)
        except (EOFError, OSError) as exc:
            status = self._exit_status()
            self.kill()
            raise SideFault("crash", f"the {self.role} process died ({what}){status}") from exc
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            self.kill()
            raise SideFault("protocol", f"the {self.role} process sent a malformed reply ({what})") from exc
        if not isinstance(reply, dict):
            self.kill()
            raise SideFault("protocol", f"the {self.role} process sent a malformed reply ({what})")
        return reply

    def _exit_status(self) -> str:
        status = self.zygote.status(self.pid)
        tail = self.tail.text(wait=0.2) or ""
        return (f": {status}" if status else "") + (f"; its last output: {tail[-300:]}" if tail else "")

    def kill(self) -> None:
        """SIGKILL the side's process group and wait until the side is gone (its CUDA context with it)."""
        if not self.alive:
            return
        self.alive = False
        try:
            self.zygote.kill(self.pid)  # the zygote does it: this process may not signal outside its domain
        except (OSError, ValueError):  # the zygote is gone: its children end at their sockets' EOF
            pass
        for c in (self.conn, self.sock):
            try:
                c.close()
            except OSError:
                pass
