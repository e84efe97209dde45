"""What both benchmarks' judges share of the kernel service's wire formats: the evaluation options
(:class:`EvalOptions`, which a :class:`~kernel_service.judging.harness.Job` carries), the outcomes and
their rewards, timing statistics, excerpts, and the profile models (re-exported from ``profile_schemas``).

KernelBench's request and response are ``kernelbench/schemas.py``; BackendBench's are
``backendbench/schemas.py``; the union of both requests (``POST /v1/evaluate``) is ``kernel_service/schemas.py``.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import Field, model_validator

from benchmark_runner.schemas import StrictModel

from .bounds import BoundedModel
from .profile_schemas import KernelTime as KernelTime  # re-exported: defined there, for the import cycle
from .profile_schemas import NcuReport as NcuReport
from .profile_schemas import SideProfile as SideProfile

#: Excerpts (compile logs, tracebacks, captured output) are cut to their last this-many characters.
EXCERPT_CHARS = 4000

Backend = Literal["cuda", "triton", "cpp", "torch"]
#: atol, rtol and tolerance at most this: a tolerance of 100 % of the value (or of 1.0 absolute) already
#: calls anything close correct; a larger one (or Infinity) would make every finite output ``correct``.
MAX_TOLERANCE = 1.0
Device = Literal["auto", "cpu", "cuda"]
#: The dtype both sides run at (upstream KernelBench's ``precision``): floating inputs, init inputs and
#: the models' floating parameters and buffers are cast to it; fp32 casts nothing.
Precision = Literal["fp32", "fp16", "bf16"]
#: The mode both models are called in: as built (``train``, upstream KernelBench's) or after ``eval()``.
ModuleMode = Literal["train", "eval"]
#: Default atol = rtol per precision (upstream's: ``get_tolerance_for_precision``).
PRECISION_TOLERANCE: dict[str, float] = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}

#: Backends that cannot run without a CUDA device.
GPU_BACKENDS: frozenset[str] = frozenset({"cuda", "triton"})
#: Backends whose solution calls ``load_inline`` and so benefits from a separate compile step.
COMPILED_BACKENDS: frozenset[str] = frozenset({"cuda", "cpp"})


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str | None:
    """The last ``limit`` characters of ``text``: the end of a log is where the error is."""
    if text is None:
        return None
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]


class EvalOptions(BoundedModel):
    """How to check and time one submission. Every number is finite and bounded (``bounds.py``)."""

    correctness_trials: int = Field(default=5, ge=0, le=100)
    perf_trials: int = Field(default=100, ge=1, le=10_000)
    warmup: int = Field(default=10, ge=0, le=1000)
    perf_precision: float = Field(
        default=0.0025,
        ge=0,
        le=0.5,
        description="GPU timing: a side's timed readings end at perf_trials calls or, after at least 20 "
        "readings, once the standard error of their median is within this share of it; 0: always "
        "perf_trials",
    )
    atol: float | None = Field(
        default=None, ge=0, le=MAX_TOLERANCE, description="None: 1e-4 for fp32, 1e-2 for fp16/bf16"
    )
    rtol: float | None = Field(
        default=None, ge=0, le=MAX_TOLERANCE, description="None: 1e-4 for fp32, 1e-2 for fp16/bf16"
    )
    tolerance: float | None = Field(
        default=None, ge=0, le=MAX_TOLERANCE, description="shortcut: sets atol and rtol both"
    )
    tf32: Literal["default", "off", "on"] = Field(
        default="default",
        description="TF32 for fp32 matmuls and cuDNN convolutions, both sides: 'default' keeps PyTorch's "
        "(cuDNN on, matmul off; what upstream KernelBench runs under), 'off' is IEEE fp32 throughout",
    )
    precision: Precision = Field(
        default="fp32",
        description="dtype of both sides: floating inputs, init inputs and the models' floating parameters "
        "and buffers are cast to it (fp32: nothing is cast); default tolerance 1e-4 fp32, 1e-2 fp16/bf16",
    )
    module_mode: ModuleMode = Field(
        default="train",
        description="the mode both models are called in: 'train', as built (what upstream KernelBench runs: "
        "BatchNorm normalizes by each batch's statistics, dropout is on); 'eval' calls each model's "
        "``eval()`` after building it (CUDA-L1's judge does: BatchNorm by its running statistics)",
    )
    profile: bool = Field(
        default=False,
        description="answer with a profile of one untimed call of each side (kernels, calls, times; ncu "
        "metrics of the candidate's heaviest kernel where ncu runs): advisory, it decides nothing",
    )
    seed: int = Field(default=42, ge=0, lt=2**63)
    timeout_s: float = Field(default=300.0, gt=0, le=3600)
    measure_performance: bool = True
    device: Device = "auto"
    reuse_reference_timing: bool = Field(
        default=False,
        description="opt-in: reuse the service's cached reference timing (faster, but not interleaved with "
        "the candidate's trials, so drift between runs is not cancelled)",
    )
    use_result_cache: bool = Field(
        default=True,
        description="answer an identical earlier submission's verdict from the service's result cache "
        "(false: always evaluate again)",
    )

    @model_validator(mode="after")
    def _tolerance_shortcut(self) -> EvalOptions:
        if self.tolerance is not None:
            if self.atol is None:
                self.atol = self.tolerance
            if self.rtol is None:
                self.rtol = self.tolerance
        return self


class Outcome(str, Enum):
    COMPILED = "compiled"
    CORRECT = "correct"
    INCORRECT = "incorrect"
    EXECUTION_FAILURE = "execution_failure"
    INITIALIZATION_FAILURE = "initialization_failure"
    COMPILATION_FAILURE = "compilation_failure"
    UNKNOWN_ERROR = "unknown_error"
    TIMEOUT = "timeout"
    SANDBOX_ERROR = "sandbox_error"
    REQUIRES_GPU = "requires_gpu"
    UNSUPPORTED_PRECISION = "unsupported_precision"


#: KernelBench-style reward of every outcome except ``correct`` (DESIGN.md). ``compiled`` (correctness
#: not checked), ``requires_gpu`` (the service cannot judge it) and ``unsupported_precision`` (the
#: reference itself does not run at the requested precision) are not the submission's fault: 0.
FIXED_REWARD: dict[Outcome, float] = {
    Outcome.COMPILED: 0.0,
    Outcome.INCORRECT: -2.0,
    Outcome.EXECUTION_FAILURE: -3.0,
    Outcome.INITIALIZATION_FAILURE: -4.0,
    Outcome.COMPILATION_FAILURE: -5.0,
    Outcome.UNKNOWN_ERROR: -6.0,
    Outcome.TIMEOUT: -7.0,
    Outcome.SANDBOX_ERROR: -7.0,
    Outcome.REQUIRES_GPU: 0.0,
    Outcome.UNSUPPORTED_PRECISION: 0.0,
}


def reward_for(outcome: Outcome, speedup: float | None) -> float:
    """``correct``: median speedup - 1 (0 when performance was not measured); else the fixed table."""
    if outcome == Outcome.CORRECT:
        return speedup - 1.0 if speedup is not None else 0.0
    return FIXED_REWARD[outcome]


class TimingStats(StrictModel):
    """Per-trial times in milliseconds."""

    median: float
    mean: float
    std: float
    min: float
    max: float
    n: int = Field(ge=0)

    @classmethod
    def of(cls, times_ms: list[float]) -> TimingStats:
        xs = sorted(times_ms)
        n = len(xs)
        if n == 0:
            raise ValueError("no timing samples")
        mid = n // 2
        median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
        mean = sum(xs) / n
        var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
        return cls(median=median, mean=mean, std=var**0.5, min=xs[0], max=xs[-1], n=n)
