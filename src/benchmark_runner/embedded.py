"""Serve a runner's embedded benchmark service on the runner's own event loop, over loopback HTTP.

Why not ``service.server.start_server`` (uvicorn in a thread)? With client and server in one
process, two threads fight for the GIL on every request: measured 3.6 ms per instant evaluation at
32 requests in flight, against 2.5 ms when uvicorn runs as a task on the runner's loop. The price
is that a service which blocks its loop (sync CPU work in ``evaluate``) also stalls the runner;
services doing real work hand it to worker processes anyway, and a remote ``--service-url`` is
unaffected. The listening socket gets ``TCP_NODELAY`` (inherited by accepted connections):
without it, request/response pairs on one loop meet Nagle + delayed ACK and take 40 ms each.

``shared_service_url`` is the other shape, for hosts that own neither the loop nor the process's
lifetime (an RL trainer's environment worker runs many rollouts of a runner's code at once): one
service per runner per process, in a background thread, stopped at interpreter exit;
``open_runner_service`` gives such a host a client for one unit of work (the given URL, else that
shared service), naming its run in every request.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn

from .client import SERVICE_API_KEY_ENV, ServiceClient

STARTUP_TIMEOUT_S = 60.0

if TYPE_CHECKING:
    from .base import BenchmarkRunner
    from .service.server import RunningServer

_shared: dict[str, RunningServer] = {}
_shared_lock = threading.Lock()
_atexit_registered: list[bool] = []  # a list, so registering needs no ``global``


class _LoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: Ctrl-C belongs to the runner, not to the embedded server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_in_loop(app: Any, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Start ``app`` on an ephemeral loopback port as a task of the current loop; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, 0))
    sock.listen(2048)
    server = _LoopServer(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    failure: list[BaseException] = []
    body_error: Exception | None = None

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        except BaseException as exc:  # SystemExit from a failed lifespan startup included
            failure.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            with anyio.move_on_after(STARTUP_TIMEOUT_S):
                while not server.started and not failure and not server.should_exit:
                    await anyio.sleep(0.002)
            if not server.started:
                server.should_exit = True
                why = f"{type(failure[0]).__name__}: {failure[0]}" if failure else "startup did not finish"
                raise RuntimeError(f"embedded service failed to start ({why})")
            try:
                yield f"http://{host}:{sock.getsockname()[1]}"
            except Exception as exc:  # re-raised below, not wrapped in the task group's ExceptionGroup
                body_error = exc
            finally:
                server.should_exit = True
    finally:
        sock.close()
    if body_error is not None:
        raise body_error


def shared_service_url(runner_cls: type[BenchmarkRunner]) -> str:
    """The URL of ``runner_cls``'s embedded service, started on first use and shared by the process.

    Started once per runner name (concurrent first callers wait for the one start), served from a
    background thread by ``service.server.start_server``, stopped by ``stop_shared_services`` or at
    exit, so its worker processes never outlive the host. Raises ``RuntimeError`` for a runner that
    ships no service.
    """
    from .service import make_app, start_server

    with _shared_lock:
        running = _shared.get(runner_cls.NAME)
        if running is not None and running.running:
            return running.url
        service = runner_cls.embedded_service()
        if service is None:
            raise RuntimeError(f"{runner_cls.NAME} ships no embedded service: give it a service URL")
        if not _atexit_registered:
            atexit.register(stop_shared_services)
            _atexit_registered.append(True)
        running = start_server(make_app(service))
        _shared[runner_cls.NAME] = running
        return running.url


def stop_shared_services() -> None:
    """Stop every service ``shared_service_url`` started (their lifespans stop their workers)."""
    with _shared_lock:
        servers = list(_shared.values())
        _shared.clear()
    for server in servers:
        server.stop()


@contextlib.asynccontextmanager
async def open_runner_service(
    runner_cls: type[BenchmarkRunner], url: str | None, run_id: str | None
) -> AsyncIterator[ServiceClient]:
    """A client for ``url``, else for ``runner_cls``'s shared embedded service (started in a worker
    thread: the start blocks). Every request names ``run_id`` (``X-Run-Id``), so a shared service
    takes turns between runs; the API key comes from ``BENCHMARK_SERVICE_API_KEY`` as for the CLI."""
    base = url.rstrip("/") if url else await anyio.to_thread.run_sync(shared_service_url, runner_cls)
    async with ServiceClient(base, os.environ.get(SERVICE_API_KEY_ENV), run_id=run_id) as client:
        yield client
