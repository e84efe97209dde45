"""Fair turns at a pool's slots between the runs that share a service.

With a plain FIFO, a run that puts 64 tasks in flight holds the GPU for all 64 before a second run's
first task starts. Here each caller (``benchmark_runner.service.current_caller``: tenant and run id)
has its own FIFO, and a freed slot goes to the callers in rotation: with two runs waiting, they
alternate; a newcomer waits at most one turn of every other waiting caller.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator


class FairScheduler:
    """``slots`` concurrent holders; waiting callers served round-robin, each caller's requests in order."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots: expected at least 1, got {slots}")
        self._free = slots
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> dict[str, int]:
        """Requests waiting for a slot, per caller."""
        return {caller: len(q) for caller, q in self._waiting.items()}

    @contextlib.asynccontextmanager
    async def slot(self, caller: str) -> AsyncIterator[None]:
        await self._acquire(caller)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, caller: str) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(caller, deque()).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # granted just as it was cancelled: pass the slot on
            else:
                queue = self._waiting.get(caller)
                if queue is not None and granted in queue:
                    queue.remove(granted)
                    if not queue:
                        del self._waiting[caller]
            raise

    def _release(self) -> None:
        while self._waiting:
            caller, queue = next(iter(self._waiting.items()))
            granted = queue.popleft()
            if queue:
                self._waiting.move_to_end(caller)  # its next request waits for everyone else's turn
            else:
                del self._waiting[caller]
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1
