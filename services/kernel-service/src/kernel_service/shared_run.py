"""One evaluation that identical requests wait for together, cancelled when the last of them leaves
(its client went away): an agent or an RL trainer that times out and retries must not multiply the work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SharedRun(Generic[T]):
    """One evaluation that identical requests wait for together, in a task of its own.

    Each request ``wait()``s; one that is cancelled (its client went away) stops waiting, and when the
    last one is gone the evaluation is cancelled too (queued: never starts; running: stops at its next
    phase boundary). ``on_abandoned`` then runs (the service forgets it, so a later identical request
    starts afresh instead of joining a run that is stopping).
    """

    def __init__(self, work: Callable[[], Awaitable[T]], on_abandoned: Callable[[], None]) -> None:
        self.waiters = 0
        self.joined = 0  # requests that waited for it without starting it
        self._on_abandoned = on_abandoned
        self._scope = anyio.CancelScope()
        self.task: asyncio.Task[T | None] = asyncio.ensure_future(self._body(work))
        self.task.add_done_callback(_retrieve)

    async def _body(self, work: Callable[[], Awaitable[T]]) -> T | None:
        with self._scope:
            return await work()
        return None  # cancelled: nobody was waiting any more

    async def wait(self) -> T | None:
        """The evaluation's result; None if it was cancelled (only when this service shuts down)."""
        self.waiters += 1
        try:
            return await asyncio.shield(self.task)
        finally:
            self.waiters -= 1
            if self.waiters == 0 and not self.task.done():
                self._scope.cancel()
                self._on_abandoned()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a shared run's exception seen (every waiter may be gone): no 'never retrieved' warning."""
    if not task.cancelled() and task.exception() is not None:
        logger.debug("shared evaluation failed: %r", task.exception())
