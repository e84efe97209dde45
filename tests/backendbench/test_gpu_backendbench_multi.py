"""BackendBench on every GPU of a host (issue 52): the runner's kernel service (its defaults: every
visible GPU, MPS where the host runs it) in this process over real HTTP, batches judged on two GPUs at
once. Run: pytest -m gpu tests/backendbench/test_gpu_backendbench_multi.py (a host of two or more GPUs).

Each smoke op is timed against itself (its kernel is the op) in rounds of one batch, so both GPUs time at
the same time: every op must be correct and read 1 within +-2% in every round, and both GPUs must judge.
A batch judged again sends each op back to the worker that judged it (the pool hands idle workers out by
slot, and the batch's chunks ask in order): that worker kept
the op's inputs, the reference's answers and its NVRTC kernels, so the second batch costs none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch
from backendbench_runner.baselines import aten_source
from backendbench_runner.service import make_service
from kernel_service.backendbench.references import reference_source
from kernel_service.backendbench.schemas import BackendBenchEvalRequest
from kernel_service.backendbench.suites import suite_ops

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS < 2, reason=f"needs two or more visible GPUs (this host has {GPUS})"),
]

#: The self-check's band and rounds (issue 52: within 0.98-1.02 for all 6 ops in each of 3 rounds).
BAND = 0.02
ROUNDS = 3
#: opinfo ops whose reference compiles NVRTC kernels at first use (seconds each on a GPU: cold on a
#: worker that never judged them), and a few plain ones.
COLD_OPS = ("digamma.default", "i0.default", "sinc.default", "prod.default")
PLAIN_OPS = ("abs.default", "add.Tensor", "relu.default", "argmax.default", "erfc.default", "exp2.default")


@pytest.fixture(scope="module")
def service() -> Iterator[RunningServer]:
    with start_server(make_app(make_service()), startup_timeout=300) as server:
        yield server


def _gpu_of(verdict: dict[str, Any]) -> str:
    """The GPU an op was judged on, from its worker's id (``eval-<CUDA_VISIBLE_DEVICES>-<n>``)."""
    worker = verdict.get("worker_id")
    assert worker and worker.startswith("eval-"), verdict.get("worker_id")
    return str(worker).split("-")[1]


def _body(op: str, suite: str, source: str, **options: Any) -> dict[str, Any]:
    request = BackendBenchEvalRequest(
        dataset=f"backendbench-{suite}",
        op=op,
        suite=suite,
        source=source,
        options={"device": "cuda", **options},
    )
    return {"kind": "backendbench", **request.model_dump(mode="json")}


def _batch(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with httpx.Client(base_url=url, timeout=1800) as client:
        answer = client.post("/v1/evaluate-batch", json={"requests": bodies})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert len(results) == len(bodies)
    return [r["details"] for r in results]


def test_smoke_self_check_on_two_gpus_reads_one_in_every_round(service: RunningServer) -> None:
    ops = suite_ops("smoke")
    bodies = [_body(op, "smoke", aten_source(op), detect_original_op=False, perf_trials=20) for op in ops]
    rounds = [_batch(service.url, bodies) for _ in range(ROUNDS)]
    readings = [{v["op"]: (round(v["performance"], 4), v.get("worker_id")) for v in r} for r in rounds]
    print("bb multi self-check", readings)
    for verdicts in rounds:
        for v in verdicts:
            assert v["outcome"] == "correct", (v["worker_id"], v["feedback"])
            assert v["device"] == "cuda" and v["n_perf_inputs"] >= 1, v["op"]
        gpus = {_gpu_of(v) for v in verdicts}
        assert gpus == {str(g) for g in range(min(GPUS, len(ops)))}, readings
    outside = [
        (k + 1, v["op"], v["performance"], v["worker_id"])
        for k, verdicts in enumerate(rounds)
        for v in verdicts
        if abs(v["performance"] - 1.0) > BAND
    ]
    assert not outside, (outside, [{v["op"]: v.get("timing_gate") for v in r} for r in rounds])


def test_an_opinfo_batch_judged_again_stays_on_its_workers_and_is_warm(service: RunningServer) -> None:
    ops = [*COLD_OPS, *PLAIN_OPS]
    bodies = [_body(op, "opinfo", str(reference_source(op))) for op in ops]
    first, second = _batch(service.url, bodies), _batch(service.url, bodies)
    for v in first + second:
        assert v["outcome"] == "correct", (v["worker_id"], v["feedback"])
        assert v["device"] == "cuda", v["op"]
    assert len({_gpu_of(v) for v in first}) == 2, [(v["op"], v["worker_id"]) for v in first]
    assert [v["worker_id"] for v in second] == [v["worker_id"] for v in first], [
        (v["op"], a["worker_id"], v["worker_id"]) for v, a in zip(second, first, strict=True)
    ]
    took = {
        v["op"]: (round(a["duration_s"], 3), round(v["duration_s"], 3))
        for a, v in zip(first, second, strict=True)
    }
    print("bb multi opinfo (first, second) s", took)
    # judged where its NVRTC kernels and the reference's answers were kept, no op pays for them again
    assert sum(v["duration_s"] for v in second) < 0.5 * sum(v["duration_s"] for v in first), took
