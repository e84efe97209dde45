"""KernelBench's score over a run's evaluations: metrics over all tasks and per level."""

from __future__ import annotations

import math
from typing import Any

from benchmark_runner.schemas import EvalStatus, ScoreRequest, ScoreResult, TaskScore

from .metrics import TaskOutcome, kernelbench_metrics


def kernelbench_score(request: ScoreRequest) -> ScoreResult:
    """Metrics over all tasks, and per level (task ids ``levelN/...``)."""
    outcomes: list[tuple[str, TaskOutcome]] = []
    per_task = []
    for e in request.evaluations:
        speedup = _positive(e.data.details.get("speedup") if isinstance(e.data.details, dict) else None)
        correct = e.data.status == EvalStatus.CORRECT
        degraded = isinstance(e.data.details, dict) and bool(e.data.details.get("timing_degraded"))
        outcomes.append((e.task_id, TaskOutcome(correct, speedup, e.data.score, timing_degraded=degraded)))
        per_task.append(
            TaskScore(task_id=e.task_id, status=e.data.status, score=e.data.score, outcome=e.data.outcome)
        )
    groups: dict[str, list[TaskOutcome]] = {}
    for task_id, o in outcomes:
        if task_id.startswith("level") and "/" in task_id:
            groups.setdefault(task_id.split("/", 1)[0], []).append(o)
    return ScoreResult(
        model=request.model,
        n_tasks=len(outcomes),
        metrics=kernelbench_metrics([o for _, o in outcomes]),
        groups={g: kernelbench_metrics(v) for g, v in sorted(groups.items())},
        per_task=per_task,
    )


def _positive(value: Any) -> float | None:
    """A speedup a client reported, if it is one (a finite positive number); else None (not measured)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) and x > 0 else None
