"""Serve a runner's embedded benchmark service on the runner's own event loop, over loopback HTTP.

Why not ``service.server.start_server`` (uvicorn in a thread)? With client and server in one
process, two threads fight for the GIL on every request: measured 3.6 ms per instant evaluation at
32 requests in flight, against 2.5 ms when uvicorn runs as a task on the runner's loop. The price
is that a service which blocks its loop (sync CPU work in ``evaluate``) also stalls the runner;
services doing real work hand it to worker processes anyway, and a remote ``--service-url`` is
unaffected. The listening socket gets ``TCP_NODELAY`` (inherited by accepted connections):
without it, request/response pairs on one loop meet Nagle + delayed ACK and take 40 ms each.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import uvicorn

STARTUP_TIMEOUT_S = 60.0


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
