"""An op of a batch sent again goes back to the worker that judged it (issue 52), through the real
kernel service over HTTP with two (CPU) workers.

A worker keeps what it made for an op (its inputs, the reference's answers, the NVRTC kernels its
reference compiled); an op judged on the other worker pays for all of it again. The pool handed idle
workers out first in, first out: the chunk that ended last in one batch went, in the next, to the worker
that had the other chunk's ops, so on two GPUs every second run of a suite was cold on both. It now hands
out the lowest idle slot first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kernel_service.backendbench.references import reference_source
from kernel_service.backendbench.schemas import BackendBenchEvalRequest
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.client import ServiceClient
from benchmark_runner.service import make_app
from benchmark_runner.service.server import start_server

#: The first chunk of the batch (every other op from the first: ``split_batch``) ends last: one kernel
#: sleeps as it loads.
FIRST = ("abs.default", "cos.default", "floor.default")
SECOND = ("ceil.default", "exp.default", "neg.default")
SLOW_LOAD = "import time\ntime.sleep(3)\n"


@pytest.fixture(scope="module")
def two_workers() -> Iterator[str]:
    svc = KernelService(KernelServiceConfig(cpu_workers=2, compile_step=False))
    with start_server(make_app(svc), startup_timeout=300) as server:
        yield server.url


def body(op: str) -> dict[str, Any]:
    source = reference_source(op)
    assert source is not None
    if op == FIRST[0]:
        source = SLOW_LOAD + source
    options = {"device": "cpu", "measure_performance": False, "max_inputs": 4}
    request = BackendBenchEvalRequest(
        dataset="backendbench-opinfo", op=op, suite="opinfo", source=source, options=options
    )
    return {"kind": "backendbench", **request.model_dump(mode="json")}


@pytest.mark.anyio
async def test_each_op_of_a_batch_is_judged_again_on_the_worker_that_judged_it(two_workers: str) -> None:
    ops = [op for pair in zip(FIRST, SECOND, strict=True) for op in pair]
    rounds: list[dict[str, str]] = []
    async with ServiceClient(two_workers, retries=0, timeout=900) as client:
        for _ in range(3):
            answer = await client.post("/v1/evaluate-batch", {"requests": [body(op) for op in ops]})
            verdicts = [r["details"] for r in answer["results"]]
            for v in verdicts:
                assert v["outcome"] == "correct", v["feedback"]
            rounds.append({v["op"]: v["worker_id"] for v in verdicts})
    first = rounds[0]
    assert all(w and w.startswith("eval-cpu-") for w in first.values()), first
    # the first batch is split as before: one chunk a worker, both workers busy
    assert len({first[op] for op in FIRST}) == 1 and len({first[op] for op in SECOND}) == 1, first
    assert first[FIRST[0]] != first[SECOND[0]], first
    # and every later batch sends each op back where it was judged (though the first chunk ended last)
    for later in rounds[1:]:
        assert later == first, rounds
