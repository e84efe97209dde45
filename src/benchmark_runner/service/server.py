"""Run an ASGI app with uvicorn: in a background thread (tests, embedded services) or blocking (CLIs).

``start_server`` binds the socket itself before starting uvicorn, so ``port=0`` yields a real
ephemeral port that is known before the first request, and it returns only once the server accepts
connections: callers never race the startup.
"""

from __future__ import annotations

import copy
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

#: How long ``start_server`` waits for the app's lifespan startup before giving up.
STARTUP_TIMEOUT_S = 60.0
#: How long ``stop`` waits for in-flight requests before uvicorn cancels them.
SHUTDOWN_TIMEOUT_S = 5.0
#: How long ``stop`` then waits for the app's own shutdown (a service closing its workers) before it
#: forces the exit.
APP_SHUTDOWN_TIMEOUT_S = 120.0


def _client_host(host: str) -> str:
    """The address a client should use to reach a server bound to ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


class RunningServer:
    """A uvicorn server running in a daemon thread. Use ``with start_server(app) as srv: srv.url``."""

    def __init__(
        self, server: uvicorn.Server, thread: threading.Thread, sock: socket.socket, host: str
    ) -> None:
        self._server = server
        self._thread = thread
        self._sock = sock
        self.port: int = sock.getsockname()[1]
        self.host = host
        self.url: str = f"http://{_client_host(host)}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float | None = None) -> None:
        """Ask uvicorn to exit and wait for it: in-flight requests get the graceful timeout, then the app's
        lifespan shutdown runs to its end. Only after ``timeout`` seconds in all (default: both
        allowances) is the exit forced. Forcing it sooner would skip the lifespan shutdown altogether
        (uvicorn does not run it once ``force_exit`` is set): a service's worker processes, and its MPS
        daemons, would outlive it."""
        if not self._thread.is_alive():
            self._close_socket()
            return
        if timeout is None:
            timeout = (self._server.config.timeout_graceful_shutdown or 0) + 1.0 + APP_SHUTDOWN_TIMEOUT_S
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(SHUTDOWN_TIMEOUT_S)
        self._close_socket()

    def _close_socket(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RunningServer(url={self.url!r}, running={self.running})"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the proto says
    # TCP, and without it every response pays a ~40 ms Nagle/delayed-ACK stall.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot bind {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def start_server(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    log_level: str = "warning",
    startup_timeout: float = STARTUP_TIMEOUT_S,
    graceful_timeout: float = SHUTDOWN_TIMEOUT_S,
) -> RunningServer:
    """Start ``app`` under uvicorn in a daemon thread; return once it accepts connections.

    Raises ``RuntimeError`` if the app's startup (lifespan) fails or does not finish in time.
    ``graceful_timeout``: how long, once asked to stop, in-flight requests may run on (whole seconds).
    """
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=max(1, round(graceful_timeout)),
        access_log=log_level in ("debug", "trace"),
    )
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # SystemExit from a failed lifespan startup included
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"uvicorn-{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            sock.close()
            why = f"{type(failure[0]).__name__}: {failure[0]}" if failure else "the server thread exited"
            raise RuntimeError(f"server on {host}:{bound_port} failed to start ({why}); see the log")
        if time.monotonic() > deadline:
            server.should_exit = True
            thread.join(SHUTDOWN_TIMEOUT_S)
            sock.close()
            raise RuntimeError(f"server did not start within {startup_timeout:.0f} s")
        time.sleep(0.005)
    return RunningServer(server, thread, sock, host)


def serve(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (Ctrl-C / SIGTERM). For CLIs.

    The loggers of the service's package (``app.state.service``'s) print beside uvicorn's, at the same
    level: what the service says at startup (how it isolates submissions, say) reaches the operator.
    """
    log_config = copy.deepcopy(LOGGING_CONFIG)
    service = getattr(getattr(app, "state", None), "service", None)
    if service is not None:
        package = type(service).__module__.split(".")[0]
        level = {"trace": "DEBUG"}.get(log_level, log_level.upper())
        log_config["loggers"][package] = {"handlers": ["default"], "level": level, "propagate": False}
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="on", log_config=log_config)
