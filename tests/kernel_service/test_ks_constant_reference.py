"""A degenerate problem is named in the answer: its reference returns one output whatever the inputs.

CUDA-L1's first release has such problems (a softmax over a dimension of size 1 is all ones; a max over a
dimension, less its mean over that same size-1 dimension, all zeros): a model that returns the constant is
correct, and timed at ~0 us it read 21,000-32,000x. The verdict stands (the output is right); the answer says
``reference_constant`` so a report can keep such speedups apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import ks_sources as S
from kernel_service.workers.pool import WorkerConfig, WorkerPool

REF_SOFTMAX_OF_MEAN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.mean(dim=1, keepdim=True), dim=1)

def get_inputs():
    return [torch.randn(64, 32)]

def get_init_inputs():
    return []
"""

SOL_ONES = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
"""


def _judge(tmp_path: Path, reference: str, solution: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        pool = WorkerPool(WorkerConfig(role="eval", root=tmp_path), [None])
        await pool.start()
        try:
            job = {"reference": reference, "solution": solution, "backend": "torch", "job_id": "e1",
                   "mode": "eval", "build_dir": str(tmp_path / "build"), "options": S.FAST}  # fmt: skip
            reply, _ = await pool.run(job, 120)
            assert reply.result is not None, reply
            return reply.result
        finally:
            await pool.close()

    return anyio.run(run)


def test_a_reference_whose_output_never_changes_is_named(tmp_path: Path) -> None:
    got = _judge(tmp_path, REF_SOFTMAX_OF_MEAN, SOL_ONES)
    assert got["outcome"] == "correct", got
    assert got["reference_constant"] is True


def test_a_reference_whose_output_follows_its_inputs_is_not(tmp_path: Path) -> None:
    got = _judge(tmp_path, S.REF_ADD, S.SOL_ADD_OK)
    assert got["outcome"] == "correct", got
    assert got["reference_constant"] is False
