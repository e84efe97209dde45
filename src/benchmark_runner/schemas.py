"""The data that crosses every boundary: dataset -> Task -> GenerationResult -> EvalResult -> ScoreResult.

Every model forbids unknown fields so a typo in a dataset or a payload fails loudly, naming the
field, instead of being silently dropped. Benchmarks subclass :class:`Task` to add their own fields;
those flow untouched from ``load_tasks`` to ``generate``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class StrictModel(BaseModel):
    """Base for every boundary model: unknown fields are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Task(StrictModel):
    """One unit of work for the model. Subclass it to add benchmark-specific fields."""

    id: str = Field(min_length=1)
    question: str
    timeout: float = Field(default=300.0, gt=0, description="seconds allowed to evaluate this task")


class EvalStatus(str, Enum):
    """Outcome of evaluating one generation. Benchmarks put finer outcomes in ``EvalResultData.outcome``."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    ERROR = "error"  # the submission failed to build or run
    TIMEOUT = "timeout"
    SKIPPED = "skipped"  # nothing to evaluate (generation failed)


class GenerationStatus(str, Enum):
    OK = "ok"
    ERROR = "error"


class ToolCall(StrictModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any = None


class TokenUsage(StrictModel):
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class Turn(StrictModel):
    """One model call in a (possibly multi-turn) generation, with what the tools answered."""

    index: int = Field(ge=0)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    response: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    latency_s: float = Field(default=0.0, ge=0)


class GenerationResult(StrictModel):
    task_id: str
    model: str
    payload: Any = None
    payload_type: str = "text"
    payload_schema_version: int = 1
    generation_version: str = "1"
    status: GenerationStatus = GenerationStatus.OK
    turns: list[Turn] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    latency_s: float = Field(default=0.0, ge=0)
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EvalResultData(StrictModel):
    """What a benchmark service answers for one evaluation."""

    status: EvalStatus
    score: float = 0.0
    outcome: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class EvalResult(StrictModel):
    task_id: str
    model: str
    data: EvalResultData
    latency_s: float = Field(default=0.0, ge=0)
    error: str | None = None


class TaskScore(StrictModel):
    task_id: str
    status: EvalStatus
    score: float
    outcome: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class ScoreResult(StrictModel):
    model: str
    n_tasks: int = Field(ge=0)
    metrics: dict[str, float] = Field(default_factory=dict)
    groups: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="metrics per group (e.g. per level or suite)"
    )
    per_task: list[TaskScore] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)


# ---- service wire formats ---------------------------------------------------------------------


class EvaluateRequest(StrictModel):
    """Body of ``POST /v1/evaluate`` for a generic benchmark service."""

    dataset: str
    task: dict[str, Any]
    generation: GenerationResult


class ScoreRequest(StrictModel):
    """Body of ``POST /v1/score``."""

    dataset: str
    model: str
    evaluations: list[EvalResult]


class TaskList(StrictModel):
    """Answer of ``GET /v1/datasets/{name}/tasks``."""

    dataset: str
    tasks: list[dict[str, Any]]


class LegacyEvaluateRequest(StrictModel):
    """Body of the legacy ``POST /evaluate-response/`` used by text benchmarks."""

    question: str
    response: str
    task_id: str | None = None
    dataset: str | None = None


class LegacyEvaluateResponse(StrictModel):
    score: float
    status: EvalStatus


class LegacyScoreRequest(StrictModel):
    scores: list[float]


class LegacyScoreResponse(StrictModel):
    score: float
    n: int


def describe_validation_error(exc: ValidationError) -> str:
    """One line per bad field: ``field.path: what was expected (got ...)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        got = err.get("input")
        got_s = repr(got)
        if len(got_s) > 80:
            got_s = got_s[:77] + "..."
        lines.append(f"{loc}: {err['msg']} (got {got_s})")
    return "; ".join(lines)
