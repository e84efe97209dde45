"""BackendBench over HTTP: run the evaluator in the kernel service's sandboxed worker subprocesses.

``run_in_pool`` is the one call a service needs (KernelService can call it with its own eval pool for
requests whose ``kind`` is "backendbench"); ``run_batch_in_pool`` judges many kernels of one run in a
few worker jobs (``POST /v1/evaluate-batch``). ``BackendBenchService`` is a complete service on its own:
``POST /v1/evaluate`` takes a :class:`BackendBenchEvalRequest` and answers the framework's generic
``EvalResultData`` (score = overall, the full verdict in ``details``), ``GET /v1/datasets/backendbench-<suite>/tasks``
lists one task per op. A kernel that hangs, segfaults or floods output costs only its own worker.
"""

from __future__ import annotations

import math
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

import anyio
from pydantic import ValidationError

from benchmark_runner.schemas import EvalResultData
from benchmark_runner.service import BenchmarkService

from .backendbench.schemas import SUITES, BackendBenchEvalRequest, BackendBenchEvalResponse
from .backendbench.suites import UnknownOpError, suite_ops
from .workers.executor import JobRunner
from .workers.pool import KILL_GRACE_S, WorkerConfig, WorkerPool, detect_gpus


async def run_in_pool(pool: JobRunner, request: BackendBenchEvalRequest) -> BackendBenchEvalResponse:
    """Evaluate ``request`` on a worker of ``pool``; a timeout or a dead worker becomes a verdict."""
    job = {
        "job_id": uuid.uuid4().hex[:12],
        "kind": "backendbench",
        "request": request.model_dump(mode="json"),
    }
    reply, _waited = await pool.run(job, request.options.timeout_s + KILL_GRACE_S)
    if reply.result is None:
        # under MPS a side's fatal fault ends the judge's context too (``gpu_fault``): the op's runs on
        # the GPU were the kernel's and the op's (trusted aten), so it is the kernel's execution failure
        outcome = {"timeout": "timeout", "gpu_fault": "execution_failure"}.get(
            reply.failure or "", "sandbox_error"
        )
        detail = reply.message or reply.failure or "no result"
        if reply.output:
            detail += f"; output tail: {reply.output[-500:]}"
        return _on(BackendBenchEvalResponse.failure(request, outcome, detail), reply.worker_id)
    result = {k: v for k, v in reply.result.items() if k not in ("output", "recycled")}
    try:
        return _on(BackendBenchEvalResponse.model_validate(result), reply.worker_id)
    except ValidationError as exc:
        return _on(
            BackendBenchEvalResponse.failure(
                request, "sandbox_error", f"the worker answered an invalid verdict: {exc}"
            ),
            reply.worker_id,
        )


def _on(verdict: BackendBenchEvalResponse, worker_id: str) -> BackendBenchEvalResponse:
    """``verdict`` naming the worker that judged it (none: the pool named none)."""
    verdict.worker_id = worker_id or None
    return verdict


#: Kernels one worker job judges at most: a batch is split into at least one job per worker, and into
#: jobs of at most this many ops, so other runs get turns at a worker between them. Above the opinfo
#: suite's 284-287 ops: each job starts its own candidate process (its CUDA context ~0.5 s on an H200),
#: and at 256 the suite on one GPU was two jobs, one after the other (``startup_s`` of their first ops).
MAX_OPS_PER_JOB = 384


def split_batch(n: int, workers: int, max_per_job: int = MAX_OPS_PER_JOB) -> list[range]:
    """``range(n)`` in nearly equal chunks, one per worker at least and none over ``max_per_job``, each
    every ``k``-th index (chunk ``i``: ``i, i + k, ...``) rather than a contiguous run.

    Why strided: a suite's ops come in name order, and its costly ones sit together (``_adaptive_*``,
    ``cumprod``, ``erf``, ``fmod``, ``grid_sampler_*``): in halves, one GPU's chunk of the opinfo suite took
    6.3-6.8 s and the other's 4.0-4.4 s (2x H200), the suite waiting on the first. The same batch still
    gives the same chunks, so each op stays on its worker run after run."""
    if n <= 0:
        return []
    chunks = min(n, max(workers, math.ceil(n / max_per_job)))
    return [range(i, n, chunks) for i in range(chunks)]


async def run_batch_in_pool(
    pool: JobRunner, requests: list[BackendBenchEvalRequest]
) -> list[BackendBenchEvalResponse]:
    """Judge ``requests`` (one run's kernels) in a few worker jobs (see :func:`split_batch`), one verdict
    each, in order. A job that fails as a whole (its worker died or overran the job's time) is not a
    verdict on its kernels: each of them is judged again alone.

    The chunks ask for workers in order, and the pool hands idle workers out by slot, so the same batch
    again lands each chunk on the worker that judged it before, which keeps its ops' inputs, the
    reference's answers and the NVRTC kernels its reference compiled (on another worker each op is cold:
    seconds on a GPU for ops such as ``prod`` or ``digamma``)."""
    verdicts: list[BackendBenchEvalResponse | None] = [None] * len(requests)

    async def one_job(chunk: range) -> None:
        reqs = [requests[i] for i in chunk]
        for i, verdict in zip(chunk, await _batch_job(pool, reqs), strict=True):
            verdicts[i] = verdict

    async with anyio.create_task_group() as tg:
        for chunk in split_batch(len(requests), pool.size):
            tg.start_soon(one_job, chunk)
    return [v for v in verdicts if v is not None]


async def _batch_job(
    pool: JobRunner, requests: list[BackendBenchEvalRequest]
) -> list[BackendBenchEvalResponse]:
    if len(requests) == 1:
        return [await run_in_pool(pool, requests[0])]
    job = {
        "job_id": uuid.uuid4().hex[:12],
        "kind": "backendbench_batch",
        "requests": [r.model_dump(mode="json") for r in requests],
    }
    # Each kernel may be judged twice (again alone when a shared process failed it) within its timeout.
    timeout = 2 * sum(r.options.timeout_s for r in requests) + KILL_GRACE_S
    reply, _waited = await pool.run(job, timeout)
    answers = (reply.result or {}).get("verdicts")
    if isinstance(answers, list) and len(answers) == len(requests):
        out = []
        for request, answer in zip(requests, answers, strict=True):
            try:
                verdict = BackendBenchEvalResponse.model_validate(answer)
            except ValidationError as exc:
                verdict = BackendBenchEvalResponse.failure(
                    request, "sandbox_error", f"the worker answered an invalid verdict: {exc}"
                )
            out.append(_on(verdict, reply.worker_id))
        return out
    verdicts: list[BackendBenchEvalResponse] = []
    for request in requests:  # the job failed as a whole: each kernel alone
        verdicts.append(await run_in_pool(pool, request))
    return verdicts


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

    async def evaluate_batch(self, requests: list[BackendBenchEvalRequest]) -> list[EvalResultData]:
        """Many kernels of one run in a few worker jobs (``POST /v1/evaluate-batch``)."""
        if self.pool is None:
            raise RuntimeError("BackendBenchService.startup() was not called")
        return [v.to_eval_result_data() for v in await run_batch_in_pool(self.pool, requests)]

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        return suite_tasks(dataset)
