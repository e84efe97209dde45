"""BackendBench scores: per op correctness x performance, a weighted sum, aggregates per suite.

Per op: ``correctness`` in {0, 1}, ``performance`` = geometric-mean speedup over the perf inputs (1 when
the kernel failed or the suite has no perf inputs), ``overall = correctness x performance``. The task
score is ``w_c*correctness + w_p*performance + w_o*overall`` (default: overall only).
"""

from __future__ import annotations

import math
from collections import defaultdict

from benchmark_runner.schemas import EvalResult, EvalStatus, ScoreResult, TaskScore

DEFAULT_WEIGHTS = {"correctness": 0.0, "performance": 0.0, "overall": 1.0}


def parse_weights(text: str | None) -> dict[str, float]:
    """``"correctness=0.5,overall=0.5"`` -> weights; unnamed components get 0 (all default: overall=1)."""
    if not text:
        return dict(DEFAULT_WEIGHTS)
    weights = {k: 0.0 for k in DEFAULT_WEIGHTS}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in weights:
            raise ValueError(f"--weights: expected name=value with name in {sorted(weights)}, got {part!r}")
        try:
            weights[key] = float(value)
        except ValueError:
            raise ValueError(f"--weights: {key} needs a number, got {value!r}") from None
    return weights


def components(ev: EvalResult) -> tuple[float, float, float]:
    d = ev.data.details
    correctness = float(d.get("correctness", 1.0 if ev.data.status == EvalStatus.CORRECT else 0.0))
    performance = float(d.get("performance", 1.0))
    overall = float(d.get("overall", correctness * performance))
    return correctness, performance, overall


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def _metrics(rows: list[tuple[float, float, float, float]]) -> dict[str, float]:
    n = len(rows)
    if not n:
        return {"n": 0.0}
    correct_perf = [p for c, p, _, _ in rows if c == 1.0]
    return {
        "n": float(n),
        "correctness": sum(r[0] for r in rows) / n,
        "performance": sum(r[1] for r in rows) / n,
        "overall": sum(r[2] for r in rows) / n,
        "score": sum(r[3] for r in rows) / n,
        "geomean_speedup_correct": _geomean(correct_perf),
        "faster_rate": sum(1 for c, p, _, _ in rows if c == 1.0 and p > 1.0) / n,
    }


def score(
    evaluations: list[EvalResult], model: str, weights: dict[str, float], suites: dict[str, str]
) -> ScoreResult:
    """``suites`` maps task id -> suite (for per-suite groups)."""
    per_task = []
    rows: list[tuple[float, float, float, float]] = []
    groups: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for ev in evaluations:
        c, p, o = components(ev)
        s = weights["correctness"] * c + weights["performance"] * p + weights["overall"] * o
        row = (c, p, o, s)
        rows.append(row)
        groups[suites.get(ev.task_id, ev.task_id.split("/")[0])].append(row)
        per_task.append(
            TaskScore(
                task_id=ev.task_id,
                status=ev.data.status,
                score=s,
                outcome=ev.data.outcome,
                details={"correctness": c, "performance": p, "overall": o},
            )
        )
    return ScoreResult(
        model=model,
        n_tasks=len(evaluations),
        metrics=_metrics(rows),
        groups={name: _metrics(g) for name, g in sorted(groups.items())},
        per_task=per_task,
        details={"weights": weights},
    )
