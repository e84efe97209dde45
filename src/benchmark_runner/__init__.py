"""benchmark-runner: run LLM benchmarks (tasks -> generate -> evaluate -> score) with resumable artifacts."""

from .base import BenchmarkRunner
from .llm import LLMConfig
from .schemas import (
    EvalResult,
    EvalResultData,
    EvalStatus,
    GenerationResult,
    ScoreResult,
    Task,
)

__all__ = [
    "BenchmarkRunner",
    "EvalResult",
    "EvalResultData",
    "EvalStatus",
    "GenerationResult",
    "LLMConfig",
    "ScoreResult",
    "Task",
]
__version__ = "0.2.0"
