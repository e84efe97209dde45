"""The one class a benchmark author subclasses.

A runner says how to load tasks and how to ask a model; evaluation and scoring default to the
benchmark service over HTTP, so most benchmarks write only ``load_tasks`` and ``generate``.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ValidationError

from .client import ServiceClient
from .llm import LLMConfig
from .schemas import (
    EvalResult,
    EvalResultData,
    EvalStatus,
    GenerationResult,
    LegacyEvaluateResponse,
    LegacyScoreResponse,
    ScoreRequest,
    ScoreResult,
    Task,
    TaskList,
    TaskScore,
    describe_validation_error,
)

if TYPE_CHECKING:
    import click

    from .service import BenchmarkService

#: A built-in model that needs no API: given the runner, the task and the config, it produces a result.
OfflineModel = Callable[["BenchmarkRunner", Task, LLMConfig, Path], Awaitable[GenerationResult]]


#: Tasks in flight when ``--concurrency`` is not given (and the runner does not choose otherwise).
DEFAULT_CONCURRENCY = 8


class TaskValidationError(ValueError):
    """A task from a file or a service does not match the runner's ``TASK_MODEL``."""


class BenchmarkRunner(ABC):
    """Subclass and set the class attributes; implement ``load_tasks`` and ``generate``."""

    NAME: ClassVar[str] = "benchmark"
    PAYLOAD_TYPE: ClassVar[str] = "text"
    PAYLOAD_SCHEMA_VERSION: ClassVar[int] = 1
    #: Environment variable whose value versions the generation logic (prompts, agent); a resumed
    #: run refuses to mix generations made under different versions.
    GENERATION_VERSION_ENV: ClassVar[str] = "BENCHMARK_GENERATION_VERSION"
    TASK_MODEL: ClassVar[type[Task]] = Task
    #: Text benchmarks may talk to an older service through ``/evaluate-response/`` + ``/final-score/``.
    LEGACY_API: ClassVar[bool] = False
    #: Models selectable by ``--model NAME`` that run without any API (baselines, oracles).
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {}
    #: Non-file values ``--dataset-file`` accepts and ``load_tasks`` understands: ``"hub"`` lets
    #: ``hub`` and ``hub:<name>`` through (the runner downloads them) instead of "path does not exist".
    DATASET_SOURCES: ClassVar[tuple[str, ...]] = ()
    #: What ``load_tasks`` is given when no dataset is named (the bundled sample): ``benchmark_runner.run``
    #: uses it, and ``make_cli`` unless given another, so both record the same dataset identity.
    DEFAULT_DATASET_FILE: ClassVar[Path | None] = None

    def __init__(self, service: ServiceClient | None = None, dataset_name: str | None = None) -> None:
        self.service = service
        self.dataset_name = dataset_name or self.NAME
        self.options: dict[str, Any] = {}

    # ---- hooks the author writes -----------------------------------------------------------

    @abstractmethod
    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        """Read tasks from a file (``None``: the runner's bundled default)."""

    @abstractmethod
    async def generate(
        self, task: Task, model: str, llm_config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        """Ask ``model`` to solve ``task``; write anything worth keeping under ``log_dir``."""

    @classmethod
    def is_dataset_source(cls, value: Path | str) -> bool:
        """Whether ``value`` names one of :attr:`DATASET_SOURCES` rather than a file."""
        text = str(value)
        return any(text == s or text.startswith(s + ":") for s in cls.DATASET_SOURCES)

    # ---- optional hooks ---------------------------------------------------------------------

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:
        """A service to start in-process when no ``--service-url`` is given (``None``: required)."""
        return None

    def generation_version(self) -> str:
        return os.environ.get(self.GENERATION_VERSION_ENV, "1")

    async def aclose(self) -> None:
        """Release what ``generate`` kept open across tasks (e.g. a shared chat client); called once per run."""
        return None

    @classmethod
    def cli_options(cls) -> list[click.Option]:
        """Extra ``run`` flags of this benchmark (e.g. ``--backend``).

        Their values land in ``LLMConfig.extra`` under the option's name and are part of the run's
        identity, so resuming with a different value is refused like a different model would be.
        """
        return []

    def default_concurrency(self, model_calls: bool) -> int:
        """Tasks in flight when ``--concurrency`` is not given. ``model_calls``: each task calls a model
        (False for an offline model, and for ``evaluate``, which re-evaluates stored generations: then
        only the service's load is at stake, which a runner whose service batches may let grow)."""
        return DEFAULT_CONCURRENCY

    def configure(self, options: dict[str, Any]) -> None:
        """Receive the values of :meth:`cli_options` before any task is loaded.

        ``run`` passes the flags given now; ``evaluate``/``score`` pass the ones the run was started
        with, so ``load_tasks`` and ``score`` see the same options as ``generate`` (which also gets
        them in ``LLMConfig.extra``).
        """
        self.options = dict(options)

    def load_problem(self, path: Path) -> Task:
        """One task from ``--problem FILE``: a JSON object, or a JSONL file holding exactly one task.

        Override for problem files in another format (e.g. a bare ``.py`` reference kernel).
        """
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix == ".jsonl":
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            else:
                rows = [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise TaskValidationError(f"{path}: not valid JSON ({exc})") from exc
        if len(rows) != 1 or not isinstance(rows[0], dict):
            raise TaskValidationError(f"{path}: expected exactly one task object, found {len(rows)} rows")
        return self.parse_tasks(rows, str(path))[0]

    def build_evaluate_request(self, task: Task, generation: GenerationResult) -> dict[str, Any]:
        """The JSON body of ``POST /v1/evaluate``; override when the service expects another shape."""
        return {
            "dataset": self.dataset_name,
            "task": task.model_dump(mode="json"),
            "generation": generation.model_dump(mode="json"),
        }

    def parse_tasks(self, rows: list[dict[str, Any]], source: str) -> list[Task]:
        """Validate raw task rows against ``TASK_MODEL``, naming the row and field that is wrong."""
        tasks = []
        for i, row in enumerate(rows):
            try:
                tasks.append(self.TASK_MODEL.model_validate(row))
            except ValidationError as exc:
                raise TaskValidationError(
                    f"{source}: task #{i} does not match {self.TASK_MODEL.__name__}: {describe_validation_error(exc)}"
                ) from exc
        return tasks

    # ---- service-backed defaults --------------------------------------------------------------

    def _require_service(self) -> ServiceClient:
        if self.service is None:
            raise RuntimeError(f"{self.NAME}: no benchmark service configured (pass --service-url)")
        return self.service

    async def load_tasks_from_service(self, dataset_name: str) -> list[Task]:
        body = await self._require_service().get(f"/v1/datasets/{dataset_name}/tasks")
        listing = TaskList.model_validate(body)
        return self.parse_tasks(listing.tasks, f"service dataset {dataset_name!r}")

    async def evaluate(self, task: Task, generation: GenerationResult) -> EvalResult:
        if generation.error is not None or generation.payload is None:
            data = EvalResultData(status=EvalStatus.SKIPPED, score=0.0, details={"reason": generation.error})
            return EvalResult(task_id=task.id, model=generation.model, data=data)
        service = self._require_service()
        if self.LEGACY_API:
            body = await service.post(
                "/evaluate-response/",
                {"question": task.question, "response": str(generation.payload), "task_id": task.id},
            )
            legacy = LegacyEvaluateResponse.model_validate(body)
            data = EvalResultData(status=legacy.status, score=legacy.score)
        else:
            body = await service.post("/v1/evaluate", self.build_evaluate_request(task, generation))
            data = EvalResultData.model_validate(body)
        return EvalResult(task_id=task.id, model=generation.model, data=data)

    async def score(self, evaluations: list[EvalResult], model: str) -> ScoreResult:
        service = self._require_service()
        if self.LEGACY_API:
            body = await service.post("/final-score/", {"scores": [e.data.score for e in evaluations]})
            legacy = LegacyScoreResponse.model_validate(body)
            return ScoreResult(
                model=model,
                n_tasks=len(evaluations),
                metrics={"score": legacy.score},
                per_task=[
                    TaskScore(
                        task_id=e.task_id, status=e.data.status, score=e.data.score, outcome=e.data.outcome
                    )
                    for e in evaluations
                ],
            )
        request = ScoreRequest(dataset=self.dataset_name, model=model, evaluations=evaluations)
        body = await service.post("/v1/score", request.model_dump(mode="json"))
        return ScoreResult.model_validate(body)
