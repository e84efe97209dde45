"""Core reservation: on a GPU host the eval workers get cores of their own (``split_cpus``), and a worker
started with ``KS_CPUS`` really runs (with everything the solution starts) on those cores only."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernel_service.service import split_cpus
from kernel_service.workers.pool import WorkerConfig, WorkerPool

REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x + 1

def get_inputs():
    return [torch.randn(8)]

def get_init_inputs():
    return []
"""
SOL = """
import os, subprocess, sys
import torch.nn as nn
print("AFFINITY", sorted(os.sched_getaffinity(0)))
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True).stdout.strip()
print("CHILD", child)

class ModelNew(nn.Module):
    def forward(self, x):
        return x + 1
"""


def test_split_cpus_reserves_two_cores_per_gpu_at_most_half() -> None:
    cores = list(range(16))
    assert split_cpus(cores, 1) == ([14, 15], list(range(14)))
    assert split_cpus(cores, 8) == (list(range(8, 16)), list(range(8)))  # capped at half
    assert split_cpus(cores, 0) == ([], cores)  # CPU host: nothing reserved
    assert split_cpus([0], 1) == ([], [0])  # one core: nothing to spare


def test_worker_runs_on_the_cores_it_was_given(tmp_path: Path) -> None:
    async def main() -> dict:
        pool = WorkerPool(WorkerConfig(root=tmp_path / "w", env={"KS_CPUS": "0"}), [None])
        await pool.start()
        try:
            job = {
                "job_id": "cpus",
                "mode": "eval",
                "reference": REF,
                "solution": SOL,
                "backend": "torch",
                "options": {"correctness_trials": 1, "perf_trials": 2, "warmup": 0},
                "build_dir": str(tmp_path / "w" / "build-cache" / "b"),
            }
            reply, _ = await pool.run(job, 60)
        finally:
            await pool.close()
        assert reply.result is not None, (reply.failure, reply.message)
        return reply.result

    result = asyncio.run(main())
    assert result["outcome"] == "correct", result.get("message")
    assert "AFFINITY [0]" in result["output"] and "CHILD [0]" in result["output"], result["output"]
