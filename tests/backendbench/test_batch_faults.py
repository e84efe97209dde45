"""Faults in the middle of a batch, through the real kernel service over HTTP (sandboxed CPU worker): an
op whose every input the reference process rejects must cost only its own verdict, as an explicit one
(never ``incorrect`` on zero inputs), and leave the ops after it judged."""

from __future__ import annotations

from typing import Any

import pytest
from kernel_service.backendbench.references import reference_source
from kernel_service.backendbench.schemas import BackendBenchEvalRequest
from kernel_service.backendbench.traces import parse_upstream_trace

from benchmark_runner.client import ServiceClient

FAST = {"perf_trials": 3, "warmup": 1}

#: aten.mm on operands whose shapes never match: the op rejects every input of this trace
REJECTED_EVERYWHERE = parse_upstream_trace(
    "Operator: aten.mm.default\n"
    "cnt: 1, ((T([6, 4], f32), T([3, 5], f32)), {})\n"
    "cnt: 1, ((T([2, 7], f32), T([3, 2], f32)), {})\n"
)


def body(op: str, suite: str = "opinfo", **options: Any) -> dict[str, Any]:
    source = reference_source(op)
    assert source is not None
    request = BackendBenchEvalRequest(
        dataset=f"backendbench-{suite}", op=op, suite=suite, source=source, options={**FAST, **options}
    )
    return {"kind": "backendbench", **request.model_dump(mode="json")}


async def batch(url: str, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with ServiceClient(url, retries=0, timeout=600) as client:
        results = (await client.post("/v1/evaluate-batch", {"requests": requests}))["results"]
    assert len(results) == len(requests)
    return [r["details"] for r in results]


@pytest.mark.anyio
async def test_an_op_judged_on_no_input_is_never_an_incorrect_verdict(backendbench_service_url: str) -> None:
    """Every input of the op is one the op itself rejects: nothing is judged. That is said as such
    (``no_inputs``, naming why), alone and in a batch, and the ops after it are judged as usual."""
    zero = body("mm", "torchbench", trace=REJECTED_EVERYWHERE)
    after = [body("abs.default"), body("neg.default")]
    alone = await batch(backendbench_service_url, [zero])
    batched = await batch(backendbench_service_url, [body("add.Tensor"), zero, *after])
    for verdict in (alone[0], batched[1]):
        assert verdict["outcome"] == "no_inputs", verdict["feedback"]
        assert "rejected all 4 of its inputs" in verdict["feedback"]  # 2 correctness + 2 performance
        assert verdict["correctness"] == 0.0
    assert [v["outcome"] for v in batched] == ["correct", "no_inputs", "correct", "correct"]
    assert all(v["n_correctness_inputs"] > 0 for v in (batched[0], *batched[2:]))
