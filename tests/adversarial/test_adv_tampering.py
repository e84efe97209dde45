"""Cheats that tamper with the process they run in (patched timers, harness, torch; background threads).

The submission runs in a candidate process of its own, forked for its job and killed after it: whatever it
patches there reaches neither the judge's clocks and comparison nor the reference, nor any later job.
Each ends incorrect/failed, or correct with no gain, and the next honest job is judged as usual.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from adv_helpers import assert_healthy, evaluate, source

PATCHING: list[Any] = [
    pytest.param("thread_offload", id="thread_offload"),
    pytest.param("patch_perf_counter", id="patch_perf_counter"),
    pytest.param("patch_harness_compare", id="patch_harness_compare"),
    pytest.param("patch_timer", id="patch_timer"),
    pytest.param("slow_reference", id="slow_reference"),
    pytest.param("burn_between_calls", id="burn_between_calls"),
]


@pytest.mark.parametrize("case", PATCHING)
def test_tampering_gains_nothing_and_does_not_outlive_its_job(client: httpx.Client, case: str) -> None:
    res, _ = evaluate(client, source(case))
    if res.outcome == "correct" and (res.speedup or 0) > 1.1:
        # CPU timing on the 2-core box has a tail: honest pairs read 0.96-1.05 over 12 jobs
        # (BENCHMARKS.md, CPU timing) and up to 1.13 in 3 of 12 runs here. These cheats, when
        # they work, gain 2-5x on every job: judged once more, a real gain shows again.
        res, _ = evaluate(client, source(case))
    assert res.outcome != "correct" or (res.speedup or 0) <= 1.1, (
        f"{case}: judged correct with speedup {res.speedup}; "
        f"ref {res.ref_timing and res.ref_timing.median} ms, new {res.new_timing and res.new_timing.median} ms"
    )
    assert res.reward <= 0.1
    assert_healthy(client)
