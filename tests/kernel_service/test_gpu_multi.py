"""Every GPU judges correctly (issue 29): one service on every visible GPU, each round of jobs spread over
all of them at once, the last GPU included. Run: pytest -m gpu tests/kernel_service/test_gpu_multi.py.

Why concurrent rounds: a worker judged alone on any GPU was right; two workers on two GPUs at once gave
false verdicts (their PID namespaces had the same PIDs, and the CUDA driver's inter-process events, named by
PID in the shared /dev/shm, were each other's). So every round here keeps every GPU busy at the same time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import ks_gpu_sources as G
import pytest
import torch
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS < 2, reason=f"needs two or more visible GPUs (this host has {GPUS})"),
]

OPTS = {"correctness_trials": 3, "perf_trials": 50, "warmup": 5, "timeout_s": 240}
CASES = Path(__file__).resolve().parents[2] / "bench" / "adversarial" / "cases"
#: Inputs written before every timed call take long enough for a side that starts early to be seen.
REF_BIG_MATMUL = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
    def forward(self, x):
        return x @ self.weight
def get_inputs():
    return [torch.randn(4096, 4096)]
def get_init_inputs():
    return [4096]
"""
REF_ELEMENTWISE = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x) * 2.0 + x
def get_inputs():
    return [torch.randn(64, 1 << 18)]
def get_init_inputs():
    return []
"""
REF_REDUCTION = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1).sum(dim=0)
def get_inputs():
    return [torch.randn(8192, 2048)]
def get_init_inputs():
    return []
"""
WRONG_ELEMENTWISE = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x) * 2.0 + x * 1.01
"""


@pytest.fixture(scope="module")
def all_gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    service = KernelService(KernelServiceConfig(gpus=None, work_dir=tmp_path_factory.mktemp("ks-gpus")))
    with start_server(make_app(service), startup_timeout=300) as server:
        yield server


def _gpu_of(res: KernelEvalResponse) -> str:
    """The GPU a job ran on, from its worker's id (``eval-<CUDA_VISIBLE_DEVICES>-<n>``)."""
    assert res.worker_id, res
    return res.worker_id.split("-")[1]


def _round(url: str, reference: str, solution: str) -> list[KernelEvalResponse]:
    """As many copies of one job as there are GPUs, at once (each with a seed of its own: no result is
    shared), so every GPU's worker takes one."""

    async def run() -> list[KernelEvalResponse]:
        async with httpx.AsyncClient(base_url=url, timeout=900) as ac:
            posts = [
                ac.post(
                    "/v1/evaluate",
                    json={"reference": reference, "solution": solution, "options": {**OPTS, "seed": 100 + i}},
                )
                for i in range(GPUS)
            ]
            answers = await asyncio.gather(*posts)
            for a in answers:
                assert a.status_code == 200, a.text
            return [KernelEvalResponse.model_validate(a.json()) for a in answers]

    return asyncio.run(run())


@pytest.mark.parametrize("reference", [REF_BIG_MATMUL, REF_ELEMENTWISE, REF_REDUCTION, G.REF_FUSED])
def test_honest_jobs_on_every_gpu_at_once_are_correct_at_about_1x(
    all_gpus: RunningServer, reference: str
) -> None:
    answers = _round(all_gpus.url, reference, reference + "\nModelNew = Model\n")
    assert {_gpu_of(r) for r in answers} == {str(g) for g in range(GPUS)}, [r.worker_id for r in answers]
    for res in answers:
        assert res.outcome == "correct", f"{res.worker_id}: {res.message}"
        assert res.speedup is not None and 0.95 < res.speedup < 1.05, (res.worker_id, res.speedup)


def test_a_wrong_kernel_is_incorrect_on_every_gpu(all_gpus: RunningServer) -> None:
    answers = _round(all_gpus.url, REF_ELEMENTWISE, WRONG_ELEMENTWISE)
    assert {_gpu_of(r) for r in answers} == {str(g) for g in range(GPUS)}, [r.worker_id for r in answers]
    for res in answers:
        assert res.outcome == "incorrect", (res.worker_id, res.outcome, res.message)


def test_a_side_stream_kernel_gains_nothing_on_any_gpu(all_gpus: RunningServer) -> None:
    answers = _round(all_gpus.url, REF_BIG_MATMUL, (CASES / "side_stream.py").read_text())
    assert {_gpu_of(r) for r in answers} == {str(g) for g in range(GPUS)}, [r.worker_id for r in answers]
    for res in answers:
        assert res.outcome != "correct" or (res.speedup or 0) <= 1.1, (
            res.worker_id,
            res.speedup,
            res.message,
        )
