"""GPU tests of issue 31 (H100): bf16 evaluations and the advisory profile of real CUDA and Triton kernels.
Run: pytest -m gpu tests/kernel_service/test_gpu_precision.py."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import ks_gpu_sources as G
import pytest
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

pytestmark = pytest.mark.gpu

OPTS = {"correctness_trials": 5, "perf_trials": 100, "warmup": 5, "timeout_s": 300}

#: A tensor-core matmul at bf16 (fp32 weights drawn, then rounded on both sides).
REF_MATMUL = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) / n ** 0.5)
    def forward(self, x):
        return x @ self.weight
def get_inputs():
    return [torch.randn(4096, 4096)]
def get_init_inputs():
    return [4096]
"""


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    service = KernelService(KernelServiceConfig(gpus=None, work_dir=tmp_path_factory.mktemp("ks-gpu-31")))
    with start_server(make_app(service), startup_timeout=300) as server:
        yield server


def _submit(url: str, subs: list[tuple[str, str, str, dict[str, Any]]]) -> list[KernelEvalResponse]:
    """``(reference, solution, backend, options)`` each, one after another (timings stay undisturbed)."""

    async def run() -> list[KernelEvalResponse]:
        async with httpx.AsyncClient(base_url=url, timeout=900) as ac:
            out = []
            for ref, sol, backend, opts in subs:
                body = {"reference": ref, "solution": sol, "backend": backend, "options": {**OPTS, **opts}}
                r = await ac.post("/v1/evaluate", json=body)
                assert r.status_code == 200, r.text
                out.append(KernelEvalResponse.model_validate(r.json()))
            return out

    return asyncio.run(run())


def test_bf16_reference_against_itself_reads_1x(gpu_server: RunningServer) -> None:
    subs = [(ref, ref + "\nModelNew = Model\n", "torch", {"precision": p}) for ref in (REF_MATMUL, G.REF_FUSED)
            for p in ("bf16", "fp16")]  # fmt: skip
    for res in _submit(gpu_server.url, subs):
        assert res.outcome == "correct", f"{res.message}\n{res.traceback}"
        assert res.precision in ("bf16", "fp16") and res.atol == res.rtol == 1e-2
        # the same cast inputs and weights, the same kernels (cuBLAS may pick another algorithm per process)
        assert res.max_abs_error is not None and res.max_abs_error < 1e-2, res.max_abs_error
        assert res.speedup is not None and 0.97 < res.speedup < 1.03, (res.precision, res.speedup)
        assert res.profile is None and res.phases is not None and "profile" not in res.phases


def test_bf16_is_faster_than_fp32_for_the_reference_matmul(gpu_server: RunningServer) -> None:
    """The cast reaches the reference's own process: its bf16 matmul runs on tensor cores."""
    own = REF_MATMUL + "\nModelNew = Model\n"
    fp32, bf16 = _submit(
        gpu_server.url, [(REF_MATMUL, own, "torch", {}), (REF_MATMUL, own, "torch", {"precision": "bf16"})]
    )
    assert fp32.outcome == bf16.outcome == "correct"
    assert fp32.ref_timing is not None and bf16.ref_timing is not None
    assert bf16.ref_timing.median < 0.8 * fp32.ref_timing.median, (fp32.ref_timing, bf16.ref_timing)


def test_an_fp32_only_cuda_kernel_gets_bf16_inputs(gpu_server: RunningServer) -> None:
    """The CUDA kernel reads ``data_ptr<float>()``: given the bf16 inputs the reference gets, it fails."""
    (res,) = _submit(gpu_server.url, [(G.REF_FUSED, G.CUDA_OK, "cuda", {"precision": "bf16"})])
    assert res.outcome == "execution_failure", res.message
    assert "BFloat16" in (res.message + (res.traceback or "")), res.message


def test_cuda_and_triton_profiles_name_their_kernels(gpu_server: RunningServer) -> None:
    plain, cuda, triton = _submit(
        gpu_server.url,
        [
            (G.REF_FUSED, G.CUDA_OK, "cuda", {}),
            (G.REF_FUSED, G.CUDA_OK, "cuda", {"profile": True}),
            (G.REF_FUSED, G.TRITON_OK, "triton", {"profile": True}),
        ],
    )
    assert plain.outcome == "correct" and plain.profile is None and "profile" not in (plain.phases or {})
    for res, kernel in ((cuda, "fused_kernel"), (triton, "fused_kernel")):
        assert res.outcome == "correct", f"{res.message}\n{res.traceback}"
        prof = res.profile
        assert prof is not None and prof.device.startswith("cuda") and "CUPTI" in prof.source
        assert prof.candidate is not None and prof.candidate.error is None, prof.candidate
        top = prof.candidate.kernels[0]
        assert kernel in top.name and top.calls == 1 and top.time_us > 0, prof.candidate.kernels
        assert prof.candidate.call_us and prof.candidate.outside_share is not None
        assert prof.reference is not None and prof.reference.kernel_count >= 2, (
            prof.reference
        )  # mul, add, relu
        assert prof.ncu is not None
        if shutil.which("ncu") is None:
            assert prof.ncu.error and "PATH" in prof.ncu.error
        else:  # measured, or the reason it could not be (counters not permitted in this sandbox...)
            assert prof.ncu.metrics or prof.ncu.error, prof.ncu
            if prof.ncu.metrics:
                assert kernel in (prof.ncu.kernel or "")
                assert {"sm_throughput_pct", "dram_throughput_pct", "registers_per_thread"} <= set(
                    prof.ncu.metrics
                )
    # profiling comes after the timing, in a process of its own: the profiled answer's speedup is the
    # plain one's, within the run-to-run spread
    assert plain.speedup and cuda.speedup and abs(cuda.speedup / plain.speedup - 1) < 0.05, (
        plain.speedup,
        cuda.speedup,
    )
