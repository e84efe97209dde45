"""The run loop: tasks -> generate -> evaluate -> artifacts, N tasks at a time; then score.

Each task goes through generate and then evaluate inside one worker, so a task's evaluation starts
as soon as its generation is on disk, and at most ``concurrency`` tasks are in flight. Workers pull
from one shared iterator (no per-task coroutine is created up front), which keeps memory flat for
long datasets.

A task that raises is recorded as an error result and the run goes on; only a service that cannot be
reached at all (after the client's retries) stops the run, since every later task would fail the
same way and a resumed run would redo them anyway.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from .artifacts import RunArtifacts
from .base import BenchmarkRunner
from .checkpoint import ResumePlan, is_failed
from .client import ServiceError
from .progress import ProgressReporter
from .schemas import (
    EvalResult,
    EvalResultData,
    EvalStatus,
    GenerationResult,
    GenerationStatus,
    ScoreResult,
    Task,
)

#: ``generate_fn(task, log_dir)``: the runner's ``generate`` or an offline model, bound to model + config.
GenerateFn = Callable[[Task, Path], Awaitable[GenerationResult]]


class FatalRunError(RuntimeError):
    """The run cannot go on (the benchmark service is unreachable); CLI exit code 4."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _unreachable(exc: BaseException) -> bool:
    """A ServiceError without an HTTP status means no answer at all after every retry."""
    return isinstance(exc, ServiceError) and exc.status_code is None


@dataclass
class RunStats:
    generated: int = 0
    evaluated: int = 0
    failed_ids: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class RunEngine:
    """Drives one run's pending work through the runner and writes every result through ``artifacts``."""

    def __init__(
        self,
        runner: BenchmarkRunner,
        artifacts: RunArtifacts,
        generate_fn: GenerateFn,
        *,
        model: str,
        concurrency: int,
        progress: ProgressReporter,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.runner = runner
        self.artifacts = artifacts
        self.generate_fn = generate_fn
        self.model = model
        self.concurrency = concurrency
        self.progress = progress
        self.stats = RunStats()
        self._generation_version = runner.generation_version()
        self._fatal: FatalRunError | None = None

    async def run(self, plan: ResumePlan) -> RunStats:
        """Generate + evaluate ``plan.to_generate``; evaluate ``plan.to_evaluate``."""
        t0 = time.perf_counter()
        work: Iterator[tuple[Task, GenerationResult | None]] = iter(
            [(t, g) for t, g in plan.to_evaluate] + [(t, None) for t in plan.to_generate]
        )
        self.progress.start(plan.n_todo, len(plan.finished))
        self._fatal = None
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(min(self.concurrency, plan.n_todo)):
                    tg.start_soon(self._worker, work, tg.cancel_scope)
        finally:
            self.progress.close()
            self.stats.wall_s = time.perf_counter() - t0
        if self._fatal is not None:
            raise self._fatal
        return self.stats

    async def _worker(
        self, work: Iterator[tuple[Task, GenerationResult | None]], scope: anyio.CancelScope
    ) -> None:
        try:
            for task, generation in work:  # the iterator is shared: each item goes to one worker
                await self._process(task, generation)
        except FatalRunError as exc:  # stop every worker; what is on disk stays for the resumed run
            if self._fatal is None:
                self._fatal = exc
            scope.cancel()

    async def _process(self, task: Task, generation: GenerationResult | None) -> None:
        if generation is None:
            generation = await self._generate(task)
            self.artifacts.append_generation(generation)
            self.stats.generated += 1
        evaluation = await self.evaluate(task, generation)
        self.artifacts.append_evaluation(evaluation)
        self.stats.evaluated += 1
        failed = is_failed(generation, evaluation)
        if failed:
            self.stats.failed_ids.append(task.id)
        detail = generation.error or evaluation.error or ""
        self.progress.task_finished(task.id, failed, detail.splitlines()[0] if detail else "")

    async def _generate(self, task: Task) -> GenerationResult:
        t0 = time.perf_counter()
        try:
            gen = await self.generate_fn(task, self.artifacts.log_dir(task.id))
            if not isinstance(gen, GenerationResult):
                raise TypeError(f"generate returned {type(gen).__name__}, expected GenerationResult")
            if gen.task_id != task.id:
                raise ValueError(f"generate returned a result for task {gen.task_id!r}, expected {task.id!r}")
        except Exception as exc:
            self._write_traceback(task, "generate", exc)
            return GenerationResult(
                task_id=task.id,
                model=self.model,
                payload_type=self.runner.PAYLOAD_TYPE,
                payload_schema_version=self.runner.PAYLOAD_SCHEMA_VERSION,
                generation_version=self._generation_version,
                status=GenerationStatus.ERROR,
                latency_s=time.perf_counter() - t0,
                error=_describe(exc),
            )
        update: dict[str, object] = {
            "generation_version": self._generation_version,
            "payload_type": self.runner.PAYLOAD_TYPE,
            "payload_schema_version": self.runner.PAYLOAD_SCHEMA_VERSION,
        }
        if not gen.latency_s:
            update["latency_s"] = time.perf_counter() - t0
        return gen.model_copy(update=update)

    async def evaluate(self, task: Task, generation: GenerationResult) -> EvalResult:
        """Evaluate one generation; an exception becomes an error result unless the service is gone."""
        t0 = time.perf_counter()
        try:
            ev = await self.runner.evaluate(task, generation)
        except Exception as exc:
            if _unreachable(exc):
                raise FatalRunError(
                    f"benchmark service unreachable while evaluating {task.id!r}: {exc}"
                ) from exc
            self._write_traceback(task, "evaluate", exc)
            return EvalResult(
                task_id=task.id,
                model=generation.model,
                data=EvalResultData(
                    status=EvalStatus.ERROR, score=0.0, details={"exception": type(exc).__name__}
                ),
                latency_s=time.perf_counter() - t0,
                error=_describe(exc),
            )
        if not ev.latency_s:
            ev = ev.model_copy(update={"latency_s": time.perf_counter() - t0})
        return ev

    def _write_traceback(self, task: Task, step: str, exc: BaseException) -> None:
        """Keep the full traceback next to the task's logs; the result line carries only the message."""
        try:
            path = self.artifacts.log_dir(task.id) / f"{step}_error.txt"
            path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        except OSError:
            pass


async def score_run(
    runner: BenchmarkRunner, artifacts: RunArtifacts, task_ids: list[str], model: str
) -> ScoreResult:
    """Score the latest evaluation of every task in ``task_ids`` (unevaluated ones are left out)."""
    evaluations = artifacts.read_evaluations()
    selected = [evaluations[t] for t in task_ids if t in evaluations]
    try:
        score = await runner.score(selected, model)
    except Exception as exc:
        raise FatalRunError(f"scoring failed: {_describe(exc)}") from exc
    artifacts.write_score(score)
    return score
