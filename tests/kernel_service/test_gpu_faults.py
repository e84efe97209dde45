"""Faulting submissions beside honest ones (issue 50). Run: pytest -m gpu tests/kernel_service/test_gpu_faults.py.

A fatal GPU fault (an illegal address) ends every CUDA context of its GPU under MPS and leaves a judge
waiting for good without it; neither may reach an honest job, and a fault inside timing must be found in
seconds, not at ``timeout_s``. The kernels are the ones ``kernel-service doctor`` ships (the storm
itself is ``bench/fault_storm.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from kernel_service.doctor import kernels
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.gpu
REF = kernels.source("gpu_ref_add")
OPTS = {"correctness_trials": 3, "perf_trials": 30, "warmup": 3, "timeout_s": 120, "use_result_cache": False}
#: A fault inside timing must be answered within this (the issue's "within seconds", with the job's own
#: loading and checks before it), far under ``timeout_s``.
FOUND_WITHIN_S = 45.0


def _serve(tmp: Path, **config: Any) -> Iterator[RunningServer]:
    service = KernelService(KernelServiceConfig(work_dir=tmp, compile_step=False, **config))
    with start_server(make_app(service), startup_timeout=300) as server:
        server.service = service  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="module")
def every_gpu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    if GPUS < 2:
        pytest.skip(
            f"needs two or more visible GPUs: faults on one beside honest jobs on another (this host has {GPUS})"
        )
    yield from _serve(tmp_path_factory.mktemp("ks-faults"), gpus=None)


@pytest.fixture(scope="module")
def no_mps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    if GPUS < 1:
        pytest.skip("needs a GPU")
    yield from _serve(tmp_path_factory.mktemp("ks-no-mps"), gpus=[0], mps="off")


def _post_all(url: str, jobs: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """``(solution file or "self", backend, reference)`` jobs, all at once; the answers in order."""

    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=url, timeout=900) as ac:

            async def one(i: int, name: str, backend: str) -> dict[str, Any]:
                solution = REF + "\nModelNew = Model\n" if name == "self" else kernels.source(name)
                body = {
                    "reference": REF,
                    "solution": solution,
                    "backend": backend,
                    "options": {**OPTS, "seed": 7 + i},
                }
                got = await ac.post("/v1/evaluate", json=body)
                assert got.status_code == 200, got.text
                return dict(got.json())

            return list(await asyncio.gather(*(one(i, n, b) for i, (n, b, _) in enumerate(jobs))))

    return asyncio.run(run())


def test_faults_on_every_gpu_harm_no_honest_job_beside_them(every_gpu: RunningServer) -> None:
    honest = [("self", "torch", "honest")] * (3 * GPUS) + [
        ("gpu_honest_triton_add", "triton", "honest")
    ] * GPUS
    faults = [
        ("gpu_fault_triton_first", "triton", "fault"),
        ("gpu_fault_triton_timing", "triton", "fault"),
    ] * GPUS
    jobs = [job for i, h in enumerate(honest) for job in [h, *faults[i : i + 1]]]  # faults among the honest
    answers = _post_all(every_gpu.url, jobs)
    for (name, _, kind), res in zip(jobs, answers, strict=True):
        if kind == "honest":
            assert res["outcome"] == "correct", (name, res["worker_id"], res["message"])
            if name == "self":
                assert 0.9 < (res["speedup"] or 0) < 1.1, (res["worker_id"], res["speedup"])
        else:
            assert res["outcome"] == "execution_failure", (name, res["outcome"], res["message"])
            assert res["elapsed"]["total_s"] < FOUND_WITHIN_S, (name, res["elapsed"])
    metrics = httpx.get(f"{every_gpu.url}/v1/metrics").json()
    assert metrics["pools"]["eval"]["replace_s_max"] < 10.0, metrics["pools"]["eval"]


def test_without_mps_a_fault_inside_timing_is_found_in_seconds(no_mps: RunningServer) -> None:
    (fault,) = _post_all(no_mps.url, [("gpu_fault_triton_timing", "triton", "fault")])
    assert fault["outcome"] == "execution_failure", fault["message"]
    assert "illegal memory access" in fault["message"], fault["message"]
    assert fault["elapsed"]["total_s"] < FOUND_WITHIN_S, fault["elapsed"]
    (honest,) = _post_all(no_mps.url, [("gpu_honest_triton_add", "triton", "honest")])
    assert honest["outcome"] == "correct", honest["message"]
