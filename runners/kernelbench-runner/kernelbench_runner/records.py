"""Per-task metric records from stored evaluations: shared by ``score`` and the report."""

from __future__ import annotations

import re
from typing import Any

from benchmark_runner.schemas import EvalResult, EvalStatus
from kernel_service.kernelbench.metrics import TaskOutcome, reward_of


def _level_of(task_id: str, details: dict[str, Any]) -> int | None:
    level = details.get("level")
    if isinstance(level, int):
        return level
    m = re.match(r"^(?:L|level)(\d+)[_/]", task_id)
    return int(m.group(1)) if m else None


def outcomes_from_evaluations(evaluations: list[EvalResult]) -> list[TaskOutcome]:
    """Per-task metric records from stored evaluations (the score step and the report share this)."""
    records = []
    for e in evaluations:
        d = e.data.details or {}
        outcome = e.data.outcome or (
            "no_kernel" if e.data.status == EvalStatus.SKIPPED else e.data.status.value
        )
        speedup = d.get("speedup")
        usage = d.get("usage") or {}
        records.append(
            TaskOutcome(
                correct=e.data.status == EvalStatus.CORRECT,
                speedup=float(speedup) if isinstance(speedup, int | float) else None,
                reward=e.data.score if e.data.status != EvalStatus.SKIPPED else reward_of("no_kernel", None),
                outcome=outcome,
                level=_level_of(e.task_id, d),
                task_id=e.task_id,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                timing_degraded=bool(d.get("timing_degraded")),
            )
        )
    return records


def reported_speedup(evaluation: EvalResult) -> float | None:
    """A stored solution's own speedup (its row's ``score_default``: CUDA-L1's measurement), if any."""
    solution = evaluation.data.details.get("solution")
    fields = solution.get("fields") if isinstance(solution, dict) else None
    value = fields.get("score_default") if isinstance(fields, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def reported_fields(evaluation: EvalResult) -> dict[str, Any]:
    """``{"reported_speedup": x}`` for a score's per-task details, or nothing."""
    value = reported_speedup(evaluation)
    return {} if value is None else {"reported_speedup": value}
