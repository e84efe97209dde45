"""Models that need no API: the reference itself, ``torch.compile`` of it, and stored solutions.

``reference`` checks the harness end to end (it must come out correct with speedup ~1.0);
``torch-compile`` gives the compiler baseline that KernelBench papers compare against. Both submit a
``ModelNew`` that *subclasses* the reference ``Model``, so construction (and thus the seeded weight
initialisation) is exactly the reference's. ``solutions`` replays the solution each task carries
(``--solutions PATH``, solutions.py): a corpus of existing kernels judged as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import GenerationResult, Task

from .problems import KernelBenchTask

if TYPE_CHECKING:
    from benchmark_runner.base import BenchmarkRunner

REFERENCE_WRAPPER = '''

# ---- baseline: the reference itself, submitted as ModelNew ----
class ModelNew(Model):
    """The unmodified reference (eager PyTorch)."""
'''

TORCH_COMPILE_WRAPPER = '''

# ---- baseline: the reference under torch.compile (inductor, default mode) ----
import torch as _kb_torch


class ModelNew(Model):
    """The reference with its forward compiled by torch.compile; weights identical to Model's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kb_compiled_forward = _kb_torch.compile(super().forward)

    def forward(self, *args, **kwargs):
        return self._kb_compiled_forward(*args, **kwargs)
'''


def reference_solution(reference_code: str) -> str:
    return reference_code.rstrip() + "\n" + REFERENCE_WRAPPER


def torch_compile_solution(reference_code: str) -> str:
    return reference_code.rstrip() + "\n" + TORCH_COMPILE_WRAPPER


def _result(
    runner: BenchmarkRunner,
    task: Task,
    model: str,
    source: str,
    log_dir: Path,
    backend: str = "torch",
    metadata: dict[str, Any] | None = None,
) -> GenerationResult:
    if not isinstance(task, KernelBenchTask):
        raise TypeError(f"{model}: expected a KernelBenchTask, got {type(task).__name__}")
    path = log_dir / "kernels" / "final.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    options = getattr(runner, "settings", None)
    return GenerationResult(
        task_id=task.id,
        model=model,
        payload=source,
        payload_type=runner.PAYLOAD_TYPE,
        payload_schema_version=runner.PAYLOAD_SCHEMA_VERSION,
        generation_version=runner.generation_version(),
        metadata={
            "backend": backend,
            "baseline": model,
            "final_file": "kernels/final.py",
            "eval_options": options.eval_options() if options is not None else {},
            **(metadata or {}),
        },
    )


async def reference_model(
    runner: BenchmarkRunner, task: Task, config: LLMConfig, log_dir: Path
) -> GenerationResult:
    """Submits the reference as its own solution: correct, speedup ~1 (the eager baseline)."""
    assert isinstance(task, KernelBenchTask)
    return _result(runner, task, "reference", reference_solution(task.reference_code), log_dir)


async def torch_compile_model(
    runner: BenchmarkRunner, task: Task, config: LLMConfig, log_dir: Path
) -> GenerationResult:
    """Submits the reference wrapped in ``torch.compile``: the compiler baseline."""
    assert isinstance(task, KernelBenchTask)
    return _result(runner, task, "torch-compile", torch_compile_solution(task.reference_code), log_dir)


async def solutions_model(
    runner: BenchmarkRunner, task: Task, config: LLMConfig, log_dir: Path
) -> GenerationResult:
    """Submits the solution the task carries, unchanged, under its backend (``--solutions PATH``)."""
    assert isinstance(task, KernelBenchTask)
    if task.solution is None:
        raise ValueError(
            f"task {task.id} carries no stored solution: --model solutions judges the solutions that "
            "--solutions PATH names (a folder of level_L_problem_P_sample_S_kernel.py files, or a JSON/JSONL "
            "file of rows with ref_code and custom_code)"
        )
    stored = task.solution
    # the row's numbers (CUDA-L1's score_default...) travel with the verdict; its other code does not
    scores = {k: v for k, v in stored.fields.items() if v is None or isinstance(v, int | float | bool)}
    return _result(
        runner,
        task,
        "solutions",
        stored.code,
        log_dir,
        backend=stored.backend,
        metadata={"solution": {"source": stored.source, "fields": scores}},
    )
