"""White-box attacks on KernelBench evaluations (issue #16): hostile submissions written by an attacker who
has read this repository's source, through the real service over HTTP, on the CPU.

Each case in ``cases/wb_*.py`` really tries its attack against what its process can reach: the evaluator
state on its stack and in ``gc`` (frames), evaluator functions rewritten through ``__code__`` (code
objects), raw ``ctypes`` writes into its own and other processes' memory, a native thread of a C++
extension that keeps writing after ``forward`` returned, and patches that exist only inside one call.
The submission runs in a candidate process of its own; what it changes there must not matter: each case
ends ``incorrect`` or ``execution_failure``, or ``correct`` with no gain, and the service then judges an
honest submission as usual. Each case prints ``WB-CHEAT`` when it reached its cheating step (a case that
never did would prove nothing) and ``WB-REACHED`` if it got into another process's memory.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from adv_helpers import assert_healthy, evaluate, source

CASES: list[Any] = [
    pytest.param("wb_frames_gc", {}, id="frames_gc"),
    pytest.param("wb_code_objects", {}, id="code_objects"),
    pytest.param("wb_ctypes_memory", {}, id="ctypes_memory"),
    pytest.param("wb_native_thread", {}, id="native_thread"),
    pytest.param("wb_patch_restore", {}, id="patch_restore"),
]


@pytest.mark.parametrize(("case", "options"), CASES)
def test_whitebox_attack_gains_nothing(client: httpx.Client, case: str, options: dict[str, Any]) -> None:
    res, _ = evaluate(client, source(case), **options)
    out = res.output or ""
    detail = (
        f"{case}: {res.outcome} (speedup {res.speedup}): {res.message}\n"
        f"ref {res.ref_timing and res.ref_timing.median} ms, new {res.new_timing and res.new_timing.median} ms\n"
        f"submission output:\n{out[-1500:]}"
    )
    assert "WB-CHEAT" in out, f"the attack never reached its cheating step: {detail}"
    assert "WB-REACHED" not in out, f"the submission reached another process's memory: {detail}"
    assert res.outcome in ("incorrect", "execution_failure") or (
        res.outcome == "correct" and (res.speedup or 0) <= 1.1
    ), detail
    assert res.reward <= 0.1, detail
    assert_healthy(client)
