"""benchmark-runner: run LLM benchmarks (tasks -> generate -> evaluate -> score) with resumable artifacts.

``run``, ``evaluate`` and ``score`` (and their async twins) are the Python API of ``NAME-runner run``,
``evaluate`` and ``score``: see :mod:`benchmark_runner.api`. They are loaded on first use, so a process
that only needs the schemas (a kernel service worker) does not import the run machinery.
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .api import (
        RunError,
        RunFatalError,
        RunRefusedError,
        RunResult,
        RunUsageError,
        aevaluate,
        arun,
        ascore,
        evaluate,
        open_runner,
        run,
        score,
    )

_API = frozenset(
    {
        "RunError",
        "RunFatalError",
        "RunRefusedError",
        "RunResult",
        "RunUsageError",
        "aevaluate",
        "arun",
        "ascore",
        "evaluate",
        "open_runner",
        "run",
        "score",
    }
)


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BenchmarkRunner",
    "EvalResult",
    "EvalResultData",
    "EvalStatus",
    "GenerationResult",
    "LLMConfig",
    "RunError",
    "RunFatalError",
    "RunRefusedError",
    "RunResult",
    "RunUsageError",
    "ScoreResult",
    "Task",
    "aevaluate",
    "arun",
    "ascore",
    "evaluate",
    "open_runner",
    "run",
    "score",
]
__version__ = "0.2.0"
