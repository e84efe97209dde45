"""The service the doctor judges with: one started here in-process with ``serve``'s settings (a
``KernelService`` behind ``start_server(make_app(service))``, as the GPU tests run it), or a running one
at ``--url``. Either way every job goes through ``POST /v1/evaluate``, so the doctor sees exactly what a
runner would.

A job's device comes from its worker id (``eval-<CUDA_VISIBLE_DEVICES entry>-<n>``, ``eval-cpu-<n>``):
``on_every_device`` sends one copy of a job per device at once, so each device's idle worker takes one,
and sends again for a device none landed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from .report import JobRecord

#: Copies of the first job sent at once to find a remote service's devices (``--url``).
DISCOVERY_JOBS = 8
#: Rounds of resending for devices that no copy of a job landed on.
COVERAGE_TRIES = 3


def device_of(worker_id: str | None) -> str:
    """``eval-0-3`` -> ``gpu0``; ``eval-cpu-1`` -> ``cpu``; unknown -> ``?``."""
    if not worker_id:
        return "?"
    parts = worker_id.split("-")
    if len(parts) < 3:
        return "?"
    dev = "-".join(parts[1:-1])
    return "cpu" if dev == "cpu" else f"gpu{dev}"


@dataclass
class Job:
    kernel: str  # a label: "honest:matmul_4096", "cheat:side_stream", ...
    reference: str
    solution: str
    backend: str = "torch"
    options: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        seed = int.from_bytes(os.urandom(7), "big")  # every job its own: no two identical requests
        options = {"seed": seed, "use_result_cache": False, **self.options}
        return {
            "reference": self.reference,
            "solution": self.solution,
            "backend": self.backend,
            "options": options,
        }


@dataclass
class Answer:
    job: Job
    body: dict[str, Any]
    seconds: float

    @property
    def device(self) -> str:
        return device_of(self.body.get("worker_id"))

    @property
    def outcome(self) -> str | None:
        return self.body.get("outcome")

    @property
    def speedup(self) -> float | None:
        value = self.body.get("speedup")
        return float(value) if value is not None else None

    def record(self, ok: bool = True) -> JobRecord:
        b = self.body
        return JobRecord(
            kernel=self.job.kernel,
            outcome=b.get("outcome"),
            speedup=self.speedup,
            reward=b.get("reward"),
            device=self.device,
            worker_id=b.get("worker_id"),
            seconds=round(self.seconds, 2),
            timing_degraded=b.get("timing_degraded"),
            message=str(b.get("message") or "")[:500],
            ok=ok,
        )


class Target:
    """Posts jobs to one service; ``devices`` is what the doctor covers (set by the caller)."""

    def __init__(self, url: str, api_key: str | None = None, service: Any = None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"X-API-Key": api_key} if api_key else {}
        self.service = service  # the in-process KernelService, else None
        self.devices: list[str] = []
        self.timing_methods: set[str] = set()  # as the answers name them (``--url``: MPS or not)
        self._client: httpx.AsyncClient | None = None

    @property
    def in_process(self) -> bool:
        return self.service is not None

    async def __aenter__(self) -> Target:
        self._client = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=1800)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def evaluate(self, job: Job) -> Answer:
        assert self._client is not None, "use Target as an async context manager"
        t0 = time.perf_counter()
        try:
            r = await self._client.post("/v1/evaluate", json=job.body())
            if r.status_code != 200:
                body: dict[str, Any] = {"outcome": f"http_{r.status_code}", "message": r.text[:500]}
            else:
                body = dict(r.json())
                if body.get("timing_method"):
                    self.timing_methods.add(str(body["timing_method"]))
        except httpx.HTTPError as exc:
            body = {"outcome": "http_error", "message": f"{exc.__class__.__name__}: {exc}"}
        return Answer(job, body, time.perf_counter() - t0)

    async def all_at_once(self, jobs: list[Job]) -> list[Answer]:
        return list(await asyncio.gather(*(self.evaluate(j) for j in jobs)))

    async def on_every_device(self, job: Job) -> tuple[dict[str, Answer], list[Answer]]:
        """One copy of ``job`` per device, all at once; again for devices none landed on. Returns the
        first answer from each device and every answer (answers from a device already covered count too:
        they were judged at the same time as the others)."""
        wanted = list(self.devices) or ["?"]
        got: dict[str, Answer] = {}
        every: list[Answer] = []
        for _ in range(COVERAGE_TRIES):
            missing = [d for d in wanted if d not in got]
            if not missing:
                break
            answers = await self.all_at_once([job] * (len(wanted) if not got else len(missing)))
            every += answers
            for a in answers:
                got.setdefault(a.device, a)
            if wanted == ["?"]:
                break
        return got, every


@contextlib.contextmanager
def in_process(config: Any, startup_timeout: float = 900.0) -> Iterator[Target]:
    """A ``KernelService`` with ``config`` behind a real HTTP server on 127.0.0.1, for as long as the
    block runs; its workers and MPS daemons are stopped after."""
    from benchmark_runner.service.app import make_app
    from benchmark_runner.service.server import start_server

    from ..service import KernelService

    service = KernelService(config)
    with start_server(make_app(service), startup_timeout=startup_timeout) as server:
        yield Target(server.url, service=service)
