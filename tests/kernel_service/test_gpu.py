"""GPU tests (H100): real CUDA and Triton kernels through the real service. Run: pytest -m gpu tests/kernel_service."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import ks_gpu_sources as G
import pytest
from kernel_service.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

pytestmark = pytest.mark.gpu

OPTS = {"correctness_trials": 5, "perf_trials": 50, "warmup": 5, "timeout_s": 240}


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    service = KernelService(KernelServiceConfig(gpus=None, work_dir=tmp_path_factory.mktemp("ks-gpu")))
    with start_server(make_app(service), startup_timeout=300) as server:
        yield server


def _submit_all(url: str, subs: list[tuple[str, str, dict]]) -> list[KernelEvalResponse]:
    async def run() -> list[KernelEvalResponse]:
        async with httpx.AsyncClient(base_url=url, timeout=900) as ac:
            posts = [
                ac.post(
                    "/v1/evaluate",
                    json={"reference": G.REF_FUSED, "solution": sol, "backend": be, "options": {**OPTS, **o}},
                )
                for sol, be, o in subs
            ]
            answers = await asyncio.gather(*posts)
            for a in answers:
                assert a.status_code == 200, a.text
            return [KernelEvalResponse.model_validate(a.json()) for a in answers]

    return asyncio.run(run())


def test_gpu_kernels_outcomes_and_recovery(gpu_server: RunningServer) -> None:
    # Submitted together: the four CUDA builds run in parallel on the CPU compile pool.
    ok, tri, wrong, oob, hang = _submit_all(
        gpu_server.url,
        [
            (G.CUDA_OK, "cuda", {}),
            (G.TRITON_OK, "triton", {}),
            (G.CUDA_WRONG, "cuda", {}),
            (G.CUDA_OOB, "cuda", {}),
            (G.CUDA_HANG, "cuda", {"timeout_s": 30}),
        ],
    )
    for res in (ok, tri):
        assert res.outcome == "correct", f"{res.message}\n{res.compile_log}\n{res.traceback}"
        assert res.device and res.device.startswith("cuda") and res.hardware and "H100" in res.hardware
        assert res.speedup is not None and res.speedup > 1.2, res.speedup  # 1 fused kernel vs 3
        assert res.timing_method and "cuda_events" in res.timing_method
    assert wrong.outcome == "incorrect", wrong.message
    assert oob.outcome == "execution_failure", oob.message
    assert hang.outcome == "timeout", hang.message
    # The service goes on: the same good kernel again (cached build) is still correct.
    again = _submit_all(gpu_server.url, [(G.CUDA_OK, "cuda", {})])[0]
    assert again.outcome == "correct" and again.extension_cache_hit is True
    assert again.elapsed.compile_s < 15, again.elapsed


def test_reference_as_its_own_solution_on_gpu(gpu_server: RunningServer) -> None:
    res = _submit_all(
        gpu_server.url, [(G.REF_FUSED + "\nModelNew = Model\n", "torch", {"perf_trials": 100})]
    )[0]
    assert res.outcome == "correct"
    assert res.speedup is not None and 0.97 < res.speedup < 1.03, res.speedup
