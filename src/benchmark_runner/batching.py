"""Evaluations that arrive together go to the service together: one ``POST /v1/evaluate-batch``.

:class:`BatchingClient` wraps a :class:`~benchmark_runner.client.ServiceClient`. Each ``POST
/v1/evaluate`` waits a moment for others (``gap_s`` after the latest arrival, ``max_wait_s`` at most);
then the first of them sends them all as one batch and hands every caller its own answer, so a run with
many tasks in flight costs the service a few requests (and, for a service that judges a batch in one
worker job, a few jobs) instead of one per task. Everything else passes through unchanged.

What a batch cannot serve is sent one by one: a service without the batch route (404/405: batching is
then off for good), or a batch the service refused (say one malformed request: each then gets its own
answer or error). A service that cannot be reached fails every caller of the batch with that error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from .client import ServiceClient, ServiceError

EVALUATE = "/v1/evaluate"
EVALUATE_BATCH = "/v1/evaluate-batch"


@dataclass
class _Waiting:
    body: Any
    wake: anyio.Event = field(default_factory=anyio.Event)
    lead: bool = False
    done: bool = False
    answer: Any = None
    error: BaseException | None = None


class BatchingClient:
    """A ServiceClient whose concurrent ``POST /v1/evaluate`` calls travel as batches."""

    def __init__(
        self, inner: ServiceClient, *, gap_s: float = 0.05, max_wait_s: float = 1.0, max_batch: int = 512
    ) -> None:
        self.inner = inner
        self.gap_s = gap_s
        self.max_wait_s = max_wait_s
        self.max_batch = max_batch
        #: False once the service answered that it has no batch route
        self.batch_route = True
        #: how many batch requests were sent, and how many evaluations they held (for reports and tests)
        self.batches_sent = 0
        self.batched_evaluations = 0
        self._waiting: list[_Waiting] = []
        self._leading = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def post(self, path: str, body: Any) -> Any:
        if path != EVALUATE or not self.batch_route:
            return await self.inner.post(path, body)
        me = _Waiting(body)
        self._waiting.append(me)
        if not self._leading:
            self._leading = True
            await self._lead()
        while not me.done:
            await me.wake.wait()
            if me.lead and not me.done:  # promoted: the previous batch left this one waiting
                me.lead = False
                me.wake = anyio.Event()
                await self._lead()
        if me.error is not None:
            raise me.error
        return me.answer

    async def _lead(self) -> None:
        """Gather the waiting evaluations, hand the lead on if more are left, send what was gathered."""
        started = time.monotonic()
        seen = 0
        while (
            len(self._waiting) != seen
            and len(self._waiting) < self.max_batch
            and time.monotonic() - started < self.max_wait_s
        ):
            seen = len(self._waiting)
            await anyio.sleep(self.gap_s)
        batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
        if self._waiting:
            nxt = self._waiting[0]
            nxt.lead = True
            nxt.wake.set()
        else:
            self._leading = False
        await self._send(batch)

    async def _send(self, batch: list[_Waiting]) -> None:
        try:
            if len(batch) == 1 or not self.batch_route:
                await self._one_by_one(batch)
                return
            try:
                answer = await self.inner.post(EVALUATE_BATCH, {"requests": [w.body for w in batch]})
            except ServiceError as exc:
                if exc.status_code is None:  # unreachable: every caller fails the same way
                    for w in batch:
                        w.error = exc
                    return
                if exc.status_code in (404, 405):
                    self.batch_route = False
                await self._one_by_one(batch)
                return
            results = answer.get("results") if isinstance(answer, dict) else None
            if not isinstance(results, list) or len(results) != len(batch):
                await self._one_by_one(batch)
                return
            self.batches_sent += 1
            self.batched_evaluations += len(batch)
            for w, result in zip(batch, results, strict=True):
                w.answer = result
        finally:
            for w in batch:
                w.done = True
                w.wake.set()

    async def _one_by_one(self, batch: list[_Waiting]) -> None:
        async def one(w: _Waiting) -> None:
            try:
                w.answer = await self.inner.post(EVALUATE, w.body)
            except Exception as exc:  # noqa: BLE001 - handed to the caller that owns this evaluation
                w.error = exc

        async with anyio.create_task_group() as tg:
            for w in batch:
                tg.start_soon(one, w)
