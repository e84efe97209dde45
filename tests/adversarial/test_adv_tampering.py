"""Cheats that tamper with the warm worker itself (patched timers, harness, torch; background threads).

They get their own service (the ``adv`` fixture is module-scoped): until the worker recycles itself after a
job that left patches behind (hook 13), they would distort every later evaluation in that worker.
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
]


@pytest.mark.parametrize("case", PATCHING)
def test_tampering_cheat_is_caught_and_does_not_outlive_its_job(client: httpx.Client, case: str) -> None:
    res, _ = evaluate(client, source(case))
    assert res.outcome != "correct", (
        f"{case}: judged correct with speedup {res.speedup}; "
        f"ref {res.ref_timing and res.ref_timing.median} ms, new {res.new_timing and res.new_timing.median} ms"
    )
    assert res.reward < 0
    assert_healthy(client)
