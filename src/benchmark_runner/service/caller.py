"""Who the request being served comes from: its tenant (API key) and its run (``X-Run-Id``).

A service shares its workers between everyone who calls it; to take turns fairly it must know whose
request a coroutine is serving. The app sets this per request, and code deeper down (a worker pool)
reads it without every signature in between carrying it: a ``ContextVar`` follows the request's task.
"""

from __future__ import annotations

from contextvars import ContextVar

#: ``tenant/run``; ``-`` for a part the request did not give (auth off, or a client that sends no run id).
_caller: ContextVar[str] = ContextVar("benchmark_service_caller", default="-/-")


def current_caller() -> str:
    """The caller of the request this task serves (``-/-`` outside a request)."""
    return _caller.get()


def set_caller(tenant: str | None, run_id: str | None) -> None:
    """Called by the app at the start of each request (the value lives in that request's context)."""
    _caller.set(f"{tenant or '-'}/{(run_id or '-')[:200]}")
