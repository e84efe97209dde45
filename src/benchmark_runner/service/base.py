"""What a benchmark service implements; ``make_app`` turns it into an HTTP API."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel

from ..schemas import (
    EvalResultData,
    EvalStatus,
    EvaluateRequest,
    LegacyEvaluateRequest,
    LegacyEvaluateResponse,
    ScoreRequest,
    ScoreResult,
    TaskScore,
)


class BenchmarkService(ABC):
    """Subclass, set the request/response models if the benchmark has its own, implement ``evaluate``.

    Every request model must carry a ``dataset`` field: the tenant allowlist is checked against it.
    """

    name: ClassVar[str] = "benchmark"
    evaluate_request_model: ClassVar[type[BaseModel]] = EvaluateRequest
    evaluate_response_model: ClassVar[type[BaseModel]] = EvalResultData

    async def startup(self) -> None:  # noqa: B027 (optional hook)
        """Called once before the first request (start worker pools here)."""

    async def shutdown(self) -> None:  # noqa: B027 (optional hook)
        """Called once when the server stops."""

    @abstractmethod
    async def evaluate(self, request: Any) -> BaseModel:
        """Evaluate one submission; ``request`` is an instance of ``evaluate_request_model``."""

    async def evaluate_batch(self, requests: list[Any]) -> Sequence[BaseModel]:
        """Evaluate many submissions (``POST /v1/evaluate-batch``), one answer each, in order.

        The default runs :meth:`evaluate` on each, concurrently; a service that can judge several at
        once more cheaply (one worker job for many) overrides it.
        """
        results: list[BaseModel | None] = [None] * len(requests)

        async def one(i: int, request: Any) -> None:
            results[i] = await self.evaluate(request)

        async with anyio.create_task_group() as tg:
            for i, request in enumerate(requests):
                tg.start_soon(one, i, request)
        return [r for r in results if r is not None]

    async def score(self, request: ScoreRequest) -> ScoreResult:
        """Aggregate evaluations; the default is the mean score and the share marked correct."""
        evals = request.evaluations
        n = len(evals)
        correct = sum(1 for e in evals if e.data.status == EvalStatus.CORRECT)
        return ScoreResult(
            model=request.model,
            n_tasks=n,
            metrics={
                "mean_score": sum(e.data.score for e in evals) / n if n else 0.0,
                "correct_rate": correct / n if n else 0.0,
            },
            per_task=[
                TaskScore(task_id=e.task_id, status=e.data.status, score=e.data.score, outcome=e.data.outcome)
                for e in evals
            ],
        )

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        """Tasks of a dataset this service hosts. Not implemented -> the route answers 501."""
        raise NotImplementedError

    async def metrics(self) -> dict[str, Any]:
        """Counters for ``GET /v1/metrics`` (work done, queued, cancelled...); the default has none."""
        return {}

    async def info(self) -> dict[str, Any]:
        """What ``GET /v1/info`` tells an operator about this service (its hardware, how it isolates
        submissions...); the default tells nothing more than its name."""
        return {}

    async def legacy_evaluate(self, request: LegacyEvaluateRequest) -> LegacyEvaluateResponse:
        """``POST /evaluate-response/`` for text benchmarks. Not implemented -> 501."""
        raise NotImplementedError
