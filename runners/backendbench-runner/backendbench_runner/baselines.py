"""Offline models: ``reference`` (correct without calling the op) and ``aten`` (calls the op: a cheat).

``reference`` writes, per op, a kernel in plain torch that never calls the op under test: the kernel
service's reference kernels (``kernel_service.backendbench.references``: hand-written ones, or PyTorch's
own Python decomposition from ``torch._decomp`` where that passes the judge's checks). It is the
harness's sanity check: every op should come out correct. ``aten`` returns the op itself and must come
out as ``calls_original_op``: the check that the cheat detector works.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import GenerationResult, GenerationStatus, Task
from kernel_service.backendbench import references
from kernel_service.backendbench.catalog import installed_torch

from .agent import save_kernel
from .options import RunOptions
from .prompts import function_name


def reference_source(op: str) -> str:
    """A kernel for ``op`` that is correct without calling the op itself (the kernel service's
    reference kernels: ``kernel_service.backendbench.references``)."""
    source = references.reference_source(op)
    if source is None:
        raise ValueError(f"no reference kernel for op {op!r} in this torch ({installed_torch()})")
    return source


def aten_source(op: str) -> str:
    """A 'kernel' that is the op itself: the detector must score it incorrect."""
    packet, _, overload = op.partition(".")
    target = f"torch.ops.aten.{packet}.{overload}" if overload else f"torch.ops.aten.{packet}"
    return f"""import torch


def {function_name(op)}(*args, **kwargs):
    return {target}(*args, **kwargs)
"""


def _offline(name: str, make_source: Callable[[str], str]) -> OfflineModel:
    async def model(
        runner: BenchmarkRunner, task: Task, config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        started = time.perf_counter()
        op = getattr(task, "op", task.question)
        source = make_source(op)
        save_kernel(log_dir, RunOptions.parse(config.extra), op, 0, source)
        return GenerationResult(
            task_id=task.id,
            model=name,
            payload=source,
            payload_type="code",
            status=GenerationStatus.OK,
            latency_s=time.perf_counter() - started,
            metadata={"op": op, "offline": True},
        )

    return model


reference_model = _offline("reference", reference_source)
aten_model = _offline("aten", aten_source)
