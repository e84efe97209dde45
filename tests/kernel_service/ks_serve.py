"""A real ``kernel-service serve`` in a subprocess (CPU only), and raw HTTP over a socket, for the tests
that treat the service as a hostile client or an impatient one would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """``python -m kernel_service.cli serve --gpus none`` on an ephemeral port, its temp dirs under
    ``tmp`` (``TMPDIR``), its log in ``tmp/serve.log``. A context manager: stopped (the whole process
    group) at exit."""

    def __init__(self, tmp: Path, *args: str, startup_s: float = 180.0) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "serve.log"
        env = {**os.environ, "TMPDIR": str(tmp)}
        command = [sys.executable, "-m", "kernel_service.cli", "serve", "--gpus", "none"]
        command += ["--host", "127.0.0.1", "--port", str(self.port), *args]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + startup_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kernel-service serve exited {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kernel-service serve did not start in {startup_s:.0f} s:\n{self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/v1/metrics", timeout=30)
        response.raise_for_status()
        return dict(response.json())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # uvicorn's graceful shutdown stops the workers
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._log.close()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def raw_http(port: int, data: bytes, timeout: float = 60.0) -> tuple[int | None, bytes]:
    """Send ``data`` (a whole HTTP/1.1 request, any bytes) and read the answer until the server closes
    or the ``Content-Length`` of its body has come. Returns (status or None when none came, body).

    Sent from a thread while this one reads: a server that refuses a big body answers before it has
    read it all, and the answer must be read before the connection is reset."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:

        def send() -> None:
            try:
                sock.sendall(data)
            except OSError:
                pass  # the server answered (413) and closed before taking the body whole

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        got = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
            head, sep, body = got.partition(b"\r\n\r\n")
            if sep:
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")[1:]
                        if line.lower().startswith(b"content-length:")
                    ),
                    None,
                )
                if length is not None and len(body) >= length:
                    break
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # ends a send still under way
        sender.join(timeout)
    if not got.startswith(b"HTTP/1."):
        return None, got
    status = int(got.split(b" ", 2)[1])
    return status, got.partition(b"\r\n\r\n")[2]


def post(path: str, body: bytes, content_type: str | None = "application/json", extra: str = "") -> bytes:
    """A POST with ``Content-Length`` and ``Connection: close``."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    head += f"Content-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode("latin-1") + body


def post_chunked(path: str, chunks: list[bytes]) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    body = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks if c) + b"0\r\n\r\n"
    return head + body


def detail(body: bytes) -> str:
    try:
        return json.dumps(json.loads(body).get("detail"))
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", "replace")
