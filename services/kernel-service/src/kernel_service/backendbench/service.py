"""BackendBench over HTTP: run the evaluator in the kernel service's sandboxed worker subprocesses.

``run_in_pool`` is the one call a service needs (KernelService can call it with its own eval pool for
requests whose ``kind`` is "backendbench"). ``BackendBenchService`` is a complete service on its own:
``POST /v1/evaluate`` takes a :class:`BackendBenchEvalRequest` and answers the framework's generic
``EvalResultData`` (score = overall, the full verdict in ``details``), ``GET /v1/datasets/backendbench-<suite>/tasks``
lists one task per op. A kernel that hangs, segfaults or floods output costs only its own worker.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from benchmark_runner.schemas import EvalResultData
from benchmark_runner.service import BenchmarkService

from ..executor import JobRunner
from ..pool import KILL_GRACE_S, WorkerConfig, WorkerPool
from .schemas import SUITES, BackendBenchEvalRequest, BackendBenchEvalResponse
from .suites import UnknownOpError, suite_ops


async def run_in_pool(pool: JobRunner, request: BackendBenchEvalRequest) -> BackendBenchEvalResponse:
    """Evaluate ``request`` on a worker of ``pool``; a timeout or a dead worker becomes a verdict."""
    job = {
        "job_id": uuid.uuid4().hex[:12],
        "kind": "backendbench",
        "request": request.model_dump(mode="json"),
    }
    reply, _waited = await pool.run(job, request.options.timeout_s + KILL_GRACE_S)
    if reply.result is None:
        outcome = "timeout" if reply.failure == "timeout" else "sandbox_error"
        detail = reply.message or reply.failure or "no result"
        if reply.output:
            detail += f"; output tail: {reply.output[-500:]}"
        return BackendBenchEvalResponse.failure(request, outcome, detail)
    result = {k: v for k, v in reply.result.items() if k not in ("output", "recycled")}
    try:
        return BackendBenchEvalResponse.model_validate(result)
    except ValidationError as exc:
        return BackendBenchEvalResponse.failure(
            request, "sandbox_error", f"the worker answered an invalid verdict: {exc}"
        )


def suite_tasks(dataset: str) -> list[dict[str, Any]]:
    """One task per op of ``backendbench-<suite>``; KeyError for any other name."""
    suite = dataset.removeprefix("backendbench-")
    if not dataset.startswith("backendbench-") or suite not in SUITES:
        raise KeyError(dataset)
    try:
        ops = suite_ops(suite)
    except UnknownOpError as exc:
        raise KeyError(dataset) from exc
    return [{"id": f"{suite}/{op}", "question": op, "op": op, "suite": suite} for op in ops]


class BackendBenchService(BenchmarkService):
    """A BackendBench-only service; pass ``pool`` to share an existing (started) worker pool."""

    name: ClassVar[str] = "backendbench"
    evaluate_request_model = BackendBenchEvalRequest
    evaluate_response_model = EvalResultData

    def __init__(
        self,
        pool: WorkerPool | None = None,
        workers: int = 1,
        sandbox: str = "auto",
        gpus: list[int] | None = None,
    ) -> None:
        """``gpus=None``: one worker per visible GPU (``workers`` CPU workers when there is none)."""
        self._shared = pool is not None
        self.pool = pool
        self.workers = workers
        self.sandbox = sandbox
        self.gpus = gpus
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    async def startup(self) -> None:
        if self.pool is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="backendbench-service-")
            env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            config = WorkerConfig(role="eval", root=Path(self._tmp.name), sandbox=self.sandbox, env=env)
            from ..service import detect_gpus

            gpus = detect_gpus() if self.gpus is None else self.gpus
            devices: list[str | None] = [str(g) for g in gpus] if gpus else [None] * self.workers
            self.pool = WorkerPool(config, devices)
            await self.pool.start()

    async def shutdown(self) -> None:
        if self.pool is not None and not self._shared:
            await self.pool.close()
            self.pool = None
        if self._tmp is not None:
            self._tmp.cleanup()

    async def evaluate(self, request: BackendBenchEvalRequest) -> EvalResultData:
        if self.pool is None:
            raise RuntimeError("BackendBenchService.startup() was not called")
        return (await run_in_pool(self.pool, request)).to_eval_result_data()

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        return suite_tasks(dataset)
