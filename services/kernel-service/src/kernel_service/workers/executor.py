"""What the service needs from whatever runs its jobs: the local :class:`~kernel_service.workers.pool.WorkerPool`
or the Ray actor pool (:mod:`kernel_service.workers.ray_executor`) — same jobs in, same :class:`Reply` out."""

from __future__ import annotations

from typing import Any, Protocol

from .pool import Reply


class JobRunner(Protocol):
    """A set of warm workers that run JSON jobs with a hard timeout."""

    @property
    def ready_info(self) -> dict[str, Any] | None:
        """The first worker's ready message (hardware, versions, isolation)."""

    @property
    def size(self) -> int:
        """How many jobs run at once."""

    async def start(self) -> None: ...

    async def run(self, job: dict[str, Any], timeout: float) -> tuple[Reply, float]:
        """Run ``job``; returns the reply and the seconds spent waiting for a free worker."""

    async def close(self) -> None: ...
