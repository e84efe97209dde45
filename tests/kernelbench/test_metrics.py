"""KernelBench metrics against values computed by hand on a fixed set of outcomes."""

from __future__ import annotations

import math

import pytest
from kernel_service.kernelbench.metrics import (
    TaskOutcome,
    fast_p,
    fast_p_curve,
    geomean_speedup,
    kernelbench_metrics,
    metrics_by_level,
    outcome_counts,
    reward_of,
    summarize,
    token_cost,
)

#                     correct speedup reward  outcome                 level
FIXED = [
    TaskOutcome(True, 2.0, 1.0, "correct", 1, "a", 1000, 200),
    TaskOutcome(True, 0.5, -0.5, "correct", 1, "b", 1000, 200),
    TaskOutcome(True, 1.2, 0.2, "correct", 2, "c", 1000, 200),
    TaskOutcome(False, None, -2.0, "incorrect", 2, "d", 1000, 200),
    TaskOutcome(False, None, -5.0, "compilation_failure", 2, "e", 1000, 200),
]


def test_reward_table() -> None:
    assert reward_of("correct", 1.5) == pytest.approx(0.5)
    assert reward_of("correct", None) == 0.0
    assert [
        reward_of(o, None)
        for o in (
            "incorrect",
            "execution_failure",
            "initialization_failure",
            "compilation_failure",
            "unknown_error",
            "timeout",
            "sandbox_error",
        )
    ] == [-2, -3, -4, -5, -6, -7, -7]
    assert reward_of("something new", None) == -6.0
    assert reward_of("no_kernel", None) == -6.0


def test_fast_p_is_strict_and_over_all_tasks() -> None:
    assert fast_p(FIXED, 0) == pytest.approx(3 / 5)
    assert fast_p(FIXED, 1) == pytest.approx(2 / 5)
    assert fast_p(FIXED, 1.5) == pytest.approx(1 / 5)
    assert fast_p(FIXED, 2) == 0.0  # 2.0 is not > 2
    assert fast_p([], 1) == 0.0
    assert fast_p_curve(FIXED, [0.4, 1.9]) == [(0.4, pytest.approx(0.6)), (1.9, pytest.approx(0.2))]


def test_headline_metrics() -> None:
    m = kernelbench_metrics(FIXED)
    assert m["fast_0"] == pytest.approx(0.6)
    assert m["fast_1"] == pytest.approx(0.4)
    assert m["fast_1.5"] == pytest.approx(0.2)
    assert m["fast_2"] == 0.0
    assert m["geomean_speedup"] == pytest.approx(1.2 ** (1 / 3))  # (2 * 0.5 * 1.2) ** (1/3)
    assert m["correct_rate"] == pytest.approx(0.6)
    assert m["mean_reward"] == pytest.approx(-6.3 / 5)
    assert m["n"] == 5
    assert geomean_speedup([TaskOutcome(False, 3.0, -2)]) == 0.0  # incorrect speedups never count


def test_per_level_and_outcomes() -> None:
    levels = metrics_by_level(FIXED)
    assert set(levels) == {"level1", "level2"}
    assert levels["level1"]["fast_1"] == pytest.approx(0.5)
    assert levels["level1"]["geomean_speedup"] == pytest.approx(1.0)
    assert levels["level2"]["fast_0"] == pytest.approx(1 / 3)
    assert levels["level2"]["geomean_speedup"] == pytest.approx(1.2)
    assert levels["level2"]["mean_reward"] == pytest.approx((0.2 - 2 - 5) / 3)
    assert outcome_counts(FIXED) == {"correct": 3, "incorrect": 1, "compilation_failure": 1}


def test_tokens_and_cost() -> None:
    assert token_cost(1000, 1000, None, None) is None
    assert token_cost(2_000_000, 500_000, 1.25, 10.0) == pytest.approx(2.5 + 5.0)
    overall, groups = summarize(FIXED, price_in=2.0, price_out=10.0)
    assert overall["prompt_tokens"] == 5000 and overall["completion_tokens"] == 1000
    assert overall["cost_usd"] == pytest.approx(5000 * 2 / 1e6 + 1000 * 10 / 1e6)
    assert "cost_usd" not in summarize(FIXED)[0]
    assert math.isclose(groups["level1"]["n"], 2)


def test_a_degraded_timing_counts_as_correct_and_never_as_faster() -> None:
    """Issue 30: a speedup read with host time in it is unknown: fast_0 yes, fast_1 and the geomean no."""
    results = [
        TaskOutcome(True, 8.5, 0.0, "correct", timing_degraded=True),
        TaskOutcome(True, 2.0, 1.0, "correct"),
    ]
    m = kernelbench_metrics(results)
    assert m["fast_0"] == 1.0 and m["fast_1"] == 0.5 and m["fast_2"] == 0.0
    assert m["geomean_speedup"] == 2.0
    assert m["timing_degraded"] == 1.0
