"""KernelBench aggregate metrics: pure functions over a list of per-task outcomes.

Shared by the service's ``/v1/score`` and the kernelbench runner's local ``score`` so both give the
same numbers. Definitions follow upstream KernelBench (``src/kernelbench/score.py``):

- ``fast_p``: share of *all* tasks that are correct and have speedup strictly greater than ``p``
  (``fast_0`` is therefore the correctness rate of tasks with a measured speedup);
- ``geomean_speedup``: geometric mean of the speedups of correct tasks (0.0 when none);
- ``correct_rate``: share of tasks whose final kernel is correct;
- ``mean_reward``: mean of the DESIGN.md per-task reward (correct: speedup - 1; failures: -2 .. -7).

Token usage and cost are summed when the records carry them; cost needs prices in dollars per
million tokens (input and output priced separately, as every API bills them).

``WorkMeter`` (at the end) is the other kind of metric: what a worker pool of the service did.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 1.5, 2.0)

#: The reward of each non-correct outcome (DESIGN.md); ``correct`` is ``speedup - 1``.
OUTCOME_REWARD: dict[str, float] = {
    "incorrect": -2.0,
    "execution_failure": -3.0,
    "initialization_failure": -4.0,
    "compilation_failure": -5.0,
    "unknown_error": -6.0,
    "timeout": -7.0,
    "sandbox_error": -7.0,
    "compiled": 0.0,
    "requires_gpu": 0.0,
    "unsupported_precision": 0.0,  # the reference itself does not run at the requested precision
    # no kernel to evaluate (the model produced none, or generation failed): counted as an unknown error
    "no_kernel": -6.0,
}

#: Order in which outcomes are listed in tables and plots (best first).
OUTCOME_ORDER: tuple[str, ...] = (
    "correct",
    "incorrect",
    "execution_failure",
    "initialization_failure",
    "compilation_failure",
    "unknown_error",
    "timeout",
    "sandbox_error",
    "requires_gpu",
    "unsupported_precision",
    "compiled",
    "no_kernel",
)


@dataclass(frozen=True)
class TaskOutcome:
    """What the metrics need of one evaluated task. Only the first three fields are required."""

    correct: bool
    speedup: float | None
    reward: float
    outcome: str | None = None
    level: int | None = None
    task_id: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: The speedup holds host time (``KernelEvalResponse.timing_degraded``): unknown, so it counts for
    #: ``fast_0`` (the kernel is correct) and for no higher ``p``, nor for the geometric mean.
    timing_degraded: bool = False


def reward_of(outcome: str, speedup: float | None) -> float:
    """Per-task reward of DESIGN.md; an unknown outcome string counts as an unknown error (-6)."""
    if outcome == "correct":
        return speedup - 1.0 if speedup is not None else 0.0
    return OUTCOME_REWARD.get(outcome, -6.0)


def fast_p(results: Sequence[TaskOutcome], p: float) -> float:
    """Share of all tasks that are correct with speedup > ``p`` (0.0 for no tasks)."""
    if not results:
        return 0.0
    hits = sum(
        1
        for r in results
        if r.correct and r.speedup is not None and (r.speedup > p if not r.timing_degraded else p <= 0)
    )
    return hits / len(results)


def fast_p_curve(results: Sequence[TaskOutcome], ps: Iterable[float]) -> list[tuple[float, float]]:
    """``fast_p`` at each threshold: the curve the report plots."""
    return [(p, fast_p(results, p)) for p in ps]


def geomean_speedup(results: Sequence[TaskOutcome]) -> float:
    """Geometric mean speedup over correct tasks with a positive speedup (0.0 when there are none)."""
    speedups = [
        r.speedup
        for r in results
        if r.correct and r.speedup is not None and r.speedup > 0 and not r.timing_degraded
    ]
    if not speedups:
        return 0.0
    return math.exp(sum(math.log(s) for s in speedups) / len(speedups))


def outcome_counts(results: Sequence[TaskOutcome]) -> dict[str, int]:
    """How many tasks ended in each outcome (``correct`` derived from ``correct`` when unset)."""
    counts: Counter[str] = Counter()
    for r in results:
        counts[r.outcome or ("correct" if r.correct else "unknown_error")] += 1
    return dict(counts)


def kernelbench_metrics(results: Sequence[TaskOutcome]) -> dict[str, float]:
    """The headline numbers: fast_0/1/1.5/2, geomean_speedup, correct_rate, mean_reward, n."""
    n = len(results)
    metrics = {f"fast_{p:g}": fast_p(results, p) for p in FAST_P_THRESHOLDS}
    metrics["geomean_speedup"] = geomean_speedup(results)
    metrics["correct_rate"] = sum(1 for r in results if r.correct) / n if n else 0.0
    metrics["mean_reward"] = sum(r.reward for r in results) / n if n else 0.0
    metrics["n"] = float(n)
    metrics["timing_degraded"] = float(sum(1 for r in results if r.timing_degraded))
    return metrics


def metrics_by_level(results: Sequence[TaskOutcome]) -> dict[str, dict[str, float]]:
    """``kernelbench_metrics`` per level, keyed ``level1``, ``level2``...; tasks without a level are skipped."""
    levels = sorted({r.level for r in results if r.level is not None})
    return {f"level{lv}": kernelbench_metrics([r for r in results if r.level == lv]) for lv in levels}


def token_cost(
    prompt_tokens: int, completion_tokens: int, price_in: float | None, price_out: float | None
) -> float | None:
    """Dollars for the given usage at ``price_in``/``price_out`` dollars per 1M tokens; None if unpriced."""
    if price_in is None and price_out is None:
        return None
    return (prompt_tokens * (price_in or 0.0) + completion_tokens * (price_out or 0.0)) / 1_000_000


def usage_metrics(
    results: Sequence[TaskOutcome], price_in: float | None = None, price_out: float | None = None
) -> dict[str, float]:
    """Token totals (and ``cost_usd`` when a price is given) over all tasks."""
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(r.completion_tokens for r in results)
    out = {
        "prompt_tokens": float(prompt),
        "completion_tokens": float(completion),
        "total_tokens": float(prompt + completion),
    }
    cost = token_cost(prompt, completion, price_in, price_out)
    if cost is not None:
        out["cost_usd"] = cost
    return out


def summarize(
    results: Sequence[TaskOutcome], price_in: float | None = None, price_out: float | None = None
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Overall metrics (headline + usage) and per-level metrics, ready for ``ScoreResult``."""
    overall = kernelbench_metrics(results)
    overall.update(usage_metrics(results, price_in, price_out))
    return overall, metrics_by_level(results)


# ---- the service's own work (GET /v1/metrics) ------------------------------------------------------


class WorkMeter:
    """Jobs and worker-seconds of one worker pool, cancellations included (``GET /v1/metrics``).

    ``work_s`` counts the seconds workers spent on jobs, the running ones up to now, so two readings
    give the work done between them. A job cancelled while it waited for a worker never started
    (``cancelled_queued``); one cancelled while it ran (``cancelled_running``) went on to its next phase
    boundary, and ``work_after_cancel_s`` is what that cost. A worker that died or was recycled is replaced
    (``replacements``); ``replace_s_max`` is the longest a slot then stood without a ready worker, waiting
    for its GPU to take clients again included. Touched from the event loop only, except :meth:`replaced`.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._running: dict[str, float] = {}  # job id -> start
        self._cancel_at: dict[str, float] = {}  # running job id -> when its cancel was asked
        self.jobs_done = 0
        self.cancelled_queued_n = 0
        self.cancelled_running_n = 0
        self._work_s = 0.0
        self._after_cancel_s = 0.0
        self._replace_lock = threading.Lock()
        self.replacements = 0
        self.replace_s_max = 0.0
        self.replace_s_total = 0.0

    def replaced(self, seconds: float) -> None:
        """A replacement worker is ready ``seconds`` after its predecessor went (any thread)."""
        with self._replace_lock:
            self.replacements += 1
            self.replace_s_max = max(self.replace_s_max, seconds)
            self.replace_s_total += seconds

    def started(self, job_id: str) -> None:
        self._running[job_id] = self._clock()

    def cancel_requested(self, job_id: str) -> None:
        if job_id in self._running and job_id not in self._cancel_at:
            self._cancel_at[job_id] = self._clock()
            self.cancelled_running_n += 1

    def cancelled_queued(self) -> None:
        self.cancelled_queued_n += 1

    def finished(self, job_id: str) -> None:
        now = self._clock()
        start = self._running.pop(job_id, None)
        if start is not None:
            self._work_s += now - start
            self.jobs_done += 1
        asked = self._cancel_at.pop(job_id, None)
        if asked is not None:
            self._after_cancel_s += now - asked

    def snapshot(self) -> dict[str, float | int]:
        now = self._clock()
        return {
            "jobs_running": len(self._running),
            "jobs_done": self.jobs_done,
            "work_s": self._work_s + sum(now - t for t in self._running.values()),
            "cancelled_queued": self.cancelled_queued_n,
            "cancelled_running": self.cancelled_running_n,
            "work_after_cancel_s": self._after_cancel_s + sum(now - t for t in self._cancel_at.values()),
            "replacements": self.replacements,
            "replace_s_max": round(self.replace_s_max, 3),
            "replace_s_total": round(self.replace_s_total, 3),
        }
