"""Batches through the real kernel service over HTTP (sandboxed CPU worker): the whole opinfo suite's
correctness pass as one ``POST /v1/evaluate-batch`` against one request per op, a worker that dies in the
middle of a batch job, and ``backendbench-runner run`` sending a whole suite as one batch."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from backendbench_runner.cli import cli
from click.testing import CliRunner
from kernel_service.backendbench.references import reference_source
from kernel_service.backendbench.schemas import BackendBenchEvalRequest
from kernel_service.backendbench.suites import suite_ops
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.artifacts import RunArtifacts
from benchmark_runner.client import ServiceClient
from benchmark_runner.service import make_app
from benchmark_runner.service.server import start_server

#: Every this-many-th op of the suite is also judged with one request of its own.
SAMPLE_EVERY = 12


class CountingKernelService(KernelService):
    """The kernel service, counting the evaluations that reached it one by one and in batches."""

    def __init__(self, config: KernelServiceConfig) -> None:
        super().__init__(config)
        self.single = 0
        self.batches: list[int] = []

    async def evaluate(self, request: Any) -> Any:
        self.single += 1
        return await super().evaluate(request)

    async def evaluate_batch(self, requests: list[Any]) -> Any:
        self.batches.append(len(requests))
        return await super().evaluate_batch(requests)


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[str, CountingKernelService]]:
    svc = CountingKernelService(KernelServiceConfig(cpu_workers=1, compile_step=False))
    with start_server(make_app(svc)) as server:
        yield server.url, svc


def body(op: str, source: str | None = None, **options: Any) -> dict[str, Any]:
    text = reference_source(op) if source is None else source
    assert text is not None
    request = BackendBenchEvalRequest(
        dataset="backendbench-opinfo", op=op, suite="opinfo", source=text, options=options
    )
    return {"kind": "backendbench", **request.model_dump(mode="json")}


@pytest.mark.anyio
async def test_the_whole_opinfo_suite_in_one_batch_is_much_faster_than_a_request_per_op(
    service: tuple[str, CountingKernelService],
) -> None:
    url, svc = service
    ops = suite_ops("opinfo")
    sample = ops[::SAMPLE_EVERY]
    async with ServiceClient(url, retries=0, timeout=1800) as client:
        await client.post(
            "/v1/evaluate-batch", {"requests": [body(o) for o in ops[:2]]}
        )  # warm: op_db, zygote
        t0 = time.perf_counter()
        batch = (await client.post("/v1/evaluate-batch", {"requests": [body(op) for op in ops]}))["results"]
        batch_s = time.perf_counter() - t0
        single_s: list[float] = []
        single = []
        for op in sample:
            t0 = time.perf_counter()
            single.append(await client.post("/v1/evaluate", body(op)))
            single_s.append(time.perf_counter() - t0)
    assert len(batch) == len(ops)
    failed = [(op, r["outcome"]) for op, r in zip(ops, batch, strict=True) if r["outcome"] != "correct"]
    assert not failed
    by_op = dict(zip(ops, batch, strict=True))
    for op, alone in zip(sample, single, strict=True):  # the same verdict either way
        assert alone["outcome"] == by_op[op]["outcome"]
        assert alone["details"]["n_correct"] == by_op[op]["details"]["n_correct"] > 0
    # The same ops both ways: each sampled op's time in the batch job (the worker's own measure), plus its
    # share of what the batch cost beyond its ops (HTTP, the job, the side processes' start).
    in_jobs = [r["details"]["duration_s"] for r in batch]
    overhead = max(batch_s - sum(in_jobs), 0.0) / len(ops)
    sample_batched = sum(by_op[op]["details"]["duration_s"] + overhead for op in sample)
    speedup = sum(single_s) / sample_batched
    print(
        f"\nopinfo suite, {len(ops)} ops, correctness pass through the kernel service (one CPU worker):"
        f"\n  one batch request: {batch_s:.1f} s ({1000 * batch_s / len(ops):.0f} ms/op; slowest op"
        f" {max(in_jobs):.1f} s)"
        f"\n  a request per op ({len(sample)} ops, every {SAMPLE_EVERY}th): {1000 * statistics.mean(single_s):.0f}"
        f" ms/op (median {1000 * statistics.median(single_s):.0f}); the same ops in the batch:"
        f" {1000 * sample_batched / len(sample):.0f} ms/op"
        f"\n  speed-up {speedup:.1f}x: the suite one request per op would take ~{batch_s * speedup:.0f} s"
    )
    assert speedup > 3
    assert svc.batches[-1] == len(ops)


@pytest.mark.anyio
async def test_a_worker_that_dies_in_a_batch_job_costs_no_verdict(
    service: tuple[str, CountingKernelService],
) -> None:
    """The worker is killed while it judges a batch: each kernel of the job is then judged alone, so the
    innocent ones still come out correct (and the hanging one times out on its own)."""
    url, svc = service
    hang = "def relu__default_kernel_impl(x):\n    while True:\n        pass\n"
    requests = [body("add.Tensor"), body("relu.default", hang, timeout_s=4.0), body("neg.default")]
    pool = svc.eval_pool
    assert pool is not None
    killed = threading.Event()

    def kill_the_busy_worker() -> None:
        time.sleep(2.5)  # the job is on the hanging kernel by now
        workers = [w for w in pool._all if w.alive]  # type: ignore[attr-defined]
        assert len(workers) == 1
        # SIGKILL to the process group of the worker this test's service started (as the OOM killer
        # would end it): the pool learns of it from its result pipe, as of any death
        os.killpg(workers[0].proc.pid, signal.SIGKILL)
        killed.set()

    async with ServiceClient(url, retries=0, timeout=600) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, kill_the_busy_worker)
            results = (await client.post("/v1/evaluate-batch", {"requests": requests}))["results"]
    assert killed.is_set()
    assert [r["outcome"] for r in results] == ["correct", "timeout", "correct"]


def test_the_runner_sends_a_whole_suite_as_one_batch(
    service: tuple[str, CountingKernelService], tmp_path: Path
) -> None:
    url, svc = service
    before = (svc.single, len(svc.batches))
    args = [
        "run",
        "--model",
        "reference",
        "--run-id",
        "b",
        "--service-url",
        url,
        "--output-dir",
        str(tmp_path),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    evals = RunArtifacts(tmp_path / "b").read_evaluations()
    assert len(evals) == 6 and all(e.data.outcome == "correct" for e in evals.values())
    assert svc.single == before[0] and svc.batches[before[1] :] == [6]  # one request for the six ops
