"""White-box attacks on BackendBench evaluations (issue #16): hostile kernels for ``aten.relu.default``
(suite smoke), written by an attacker who has read this repository's source, sent as ``kind:
"backendbench"`` requests to the real kernel service over HTTP, on the CPU.

Each case in ``cases/wb_bb_*.py`` passes the correctness checks (calling the op itself and hiding it from
the candidate process's own dispatch recorder, where it can) and cheats once timed, through its
mechanism: the evaluator's state on its stack and in ``gc``, evaluator functions rewritten through
``__code__``, ``ctypes`` writes into its own and other processes' memory, patches that exist only inside
one call. None may gain anything: each ends ``incorrect`` (its timed output caught) or
``execution_failure``, or ``correct`` with no gain, and the service then judges an honest kernel as usual.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from adv_helpers import source

from benchmark_runner.schemas import EvalResultData

HONEST_RELU = (
    "import torch\n\n\n"
    "def relu_kernel_impl(x):\n"
    "    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)\n"
)
FAST = {"perf_trials": 10, "warmup": 1, "timeout_s": 60}


def evaluate_bb(client: httpx.Client, kernel: str, **options: Any) -> dict[str, Any]:
    body = {
        "kind": "backendbench",
        "dataset": "backendbench-smoke",
        "suite": "smoke",
        "op": "relu",
        "source": kernel,
        "options": {**FAST, **options},
    }
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 200, r.text
    return EvalResultData.model_validate(r.json()).details


def describe(verdict: dict[str, Any]) -> str:
    timed = [
        f"#{i['index']} ref {i['ref_ms']} ms, kernel {i['kernel_ms']} ms, speedup {i['speedup']}, error {i['error']}"
        for i in verdict.get("inputs", [])
        if i["kind"] == "performance"
    ]
    return (
        f"{verdict['outcome']} (correctness {verdict['correctness']}, performance {verdict['performance']}): "
        f"{'; '.join(timed)}\n{verdict.get('feedback', '')[:1500]}"
    )


def assert_bb_healthy(client: httpx.Client) -> None:
    """An honest relu kernel is still judged correct after the attack."""
    verdict = evaluate_bb(client, HONEST_RELU, perf_trials=3)
    assert verdict["outcome"] == "correct", f"honest kernel after the attack: {describe(verdict)}"


CASES: list[Any] = [
    pytest.param("wb_bb_frames_gc", id="frames_gc"),
    pytest.param("wb_bb_code_objects", id="code_objects"),
    pytest.param("wb_bb_ctypes_memory", id="ctypes_memory"),
    pytest.param("wb_bb_patch_restore", id="patch_restore"),
]


@pytest.mark.parametrize("case", CASES)
def test_whitebox_kernel_gains_nothing(client: httpx.Client, case: str) -> None:
    verdict = evaluate_bb(client, source(case))
    detail = f"{case}: {describe(verdict)}"
    outcome = verdict["outcome"]
    assert outcome in ("incorrect", "calls_original_op", "execution_failure") or (
        outcome == "correct" and verdict["performance"] <= 1.1
    ), detail
    assert verdict["overall"] <= 1.1, detail
    if outcome == "incorrect":  # it passed the correctness checks: its timed cheat ran and was caught
        assert "timed call" in verdict["feedback"], f"the attack never reached its timed step: {detail}"
    assert_bb_healthy(client)


def test_repeated_timed_inputs_cannot_be_answered_from_a_cache(client: httpx.Client) -> None:
    """Each timed call gets fresh values and every timed output is checked: a cache keyed on the input's
    place and a sample of its values misses, and a stale answer would be caught."""
    verdict = evaluate_bb(client, source("wb_bb_repeat_cache"), perf_trials=30)
    detail = f"wb_bb_repeat_cache: {describe(verdict)}"
    assert verdict["outcome"] != "correct" or verdict["performance"] <= 1.1, detail
