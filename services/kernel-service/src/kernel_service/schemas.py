"""Wire formats of the kernel service: what a caller submits and what it gets back.

The request names the reference either by source or by a dataset task id (exactly one), the
candidate solution source and its backend. The response carries a KernelBench-style outcome and
reward plus everything needed to trust (or audit) the number: timings of both sides, errors,
tolerance, hardware and versions. ``to_eval_result_data`` maps it onto the generic runner contract.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, RootModel, Tag, model_validator

from benchmark_runner.schemas import EvalResultData, EvalStatus, StrictModel

from .backendbench.schemas import BackendBenchEvalRequest
from .bounds import BoundedModel
from .profile_schemas import EvalProfile
from .profile_schemas import KernelTime as KernelTime  # re-exported: defined there, for the import cycle
from .profile_schemas import NcuReport as NcuReport
from .profile_schemas import SideProfile as SideProfile

#: Excerpts (compile logs, tracebacks, captured output) are cut to their last this-many characters.
EXCERPT_CHARS = 4000

Backend = Literal["cuda", "triton", "cpp", "torch"]
#: atol, rtol and tolerance at most this: a tolerance of 100 % of the value (or of 1.0 absolute) already
#: calls anything close correct; a larger one (or Infinity) would make every finite output ``correct``.
MAX_TOLERANCE = 1.0
#: Longest dataset name or task id.
MAX_NAME_CHARS = 500
Device = Literal["auto", "cpu", "cuda"]
#: The dtype both sides run at (upstream KernelBench's ``precision``): floating inputs, init inputs and
#: the models' floating parameters and buffers are cast to it; fp32 casts nothing.
Precision = Literal["fp32", "fp16", "bf16"]
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


class KernelEvalRequest(StrictModel):
    """Body of ``POST /v1/evaluate`` for the kernel service."""

    kind: Literal["kernelbench"] = "kernelbench"
    dataset: str = Field(default="kernelbench", min_length=1, max_length=MAX_NAME_CHARS)
    reference: str | None = Field(default=None, description="reference source (Model, get_inputs, ...)")
    task_id: str | None = Field(
        default=None, max_length=MAX_NAME_CHARS, description="a task of `dataset` whose code is the reference"
    )
    solution: str = Field(min_length=1, description="candidate source defining ModelNew")
    backend: Backend = "torch"
    options: EvalOptions = Field(default_factory=EvalOptions)

    @model_validator(mode="after")
    def _one_reference(self) -> KernelEvalRequest:
        if (self.reference is None) == (self.task_id is None):
            raise ValueError(
                "give exactly one of `reference` (the reference source) or `task_id` (a dataset task); "
                f"got {'both' if self.reference is not None else 'neither'}"
            )
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

_STATUS: dict[Outcome, EvalStatus] = {
    Outcome.CORRECT: EvalStatus.CORRECT,
    Outcome.INCORRECT: EvalStatus.INCORRECT,
    Outcome.COMPILED: EvalStatus.INCORRECT,  # not shown correct, so it must not count as correct
    Outcome.TIMEOUT: EvalStatus.TIMEOUT,
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


class Elapsed(StrictModel):
    """Wall seconds spent per phase (``queue_s`` waiting for a worker, ``total_s`` end to end)."""

    queue_s: float = 0.0
    compile_s: float = 0.0
    init_s: float = 0.0
    correctness_s: float = 0.0
    timing_s: float = 0.0
    total_s: float = 0.0


class KernelEvalResponse(StrictModel):
    """What the service answers for one evaluation."""

    kind: Literal["kernelbench"] = "kernelbench"
    outcome: Outcome
    reward: float
    message: str = ""
    speedup: float | None = None
    ref_timing: TimingStats | None = None
    new_timing: TimingStats | None = None
    ref_timing_cached: bool = False
    correctness_trials_passed: int = 0
    correctness_trials: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    atol: float | None = None
    rtol: float | None = None
    precision: Precision = Field(default="fp32", description="the dtype both sides ran at")
    tf32: dict[str, bool] | None = Field(
        default=None, description="TF32 in effect during the checks and timing: {'cudnn': ..., 'matmul': ...}"
    )
    compile_log: str | None = None
    traceback: str | None = None
    output: str | None = Field(default=None, description="captured stdout/stderr of the submission (tail)")
    backend: Backend = "torch"
    device: str | None = None
    hardware: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    timing_method: str | None = None
    timing_gate: dict[str, float] | None = Field(
        default=None,
        description="GPU: the timed calls' gate (misses, final length, reply round trip, null call, us)",
    )
    timing_degraded: bool = Field(
        default=False,
        description="GPU: some timed readings hold host time (their host work outlasted the longest gate even "
        "at one call a reading): the speedup is reported but earns no reward and no fast_p credit",
    )
    timing_degraded_reason: str | None = None
    elapsed: Elapsed = Field(default_factory=Elapsed)
    worker_id: str | None = None
    extension_cache_hit: bool | None = None
    cached: bool = Field(
        default=False,
        description="answered from the result cache (an identical earlier submission's verdict)",
    )
    uses_custom_kernel: bool | None = Field(
        default=None, description="whether the solution ran a custom kernel (extension, Triton, custom op)"
    )
    custom_kernels: list[str] = Field(default_factory=list, description="custom kernels the solution ran")
    isolation: dict[str, Any] | None = Field(default=None, description="sandbox layers around the worker")
    phases: dict[str, float] | None = Field(default=None, description="seconds per harness phase")
    profile: EvalProfile | None = Field(
        default=None, description="options.profile: advisory, decides nothing"
    )
    recycled: str | None = Field(
        default=None,
        description="why the worker was replaced after this job (the next job waits for a fresh one)",
    )

    @classmethod
    def failure(cls, outcome: Outcome, message: str, **fields: Any) -> KernelEvalResponse:
        return cls(outcome=outcome, reward=reward_for(outcome, None), message=message, **fields)

    def to_eval_result_data(self) -> EvalResultData:
        """The generic runner contract: status, score = reward, outcome, details = this response."""
        return EvalResultData(
            status=_STATUS.get(self.outcome, EvalStatus.ERROR),
            score=self.reward,
            outcome=self.outcome.value,
            details=self.model_dump(mode="json"),
        )


# ---- one service, both benchmarks -------------------------------------------------------------------

REQUEST_KINDS = ("kernelbench", "backendbench")


def _request_kind(value: Any) -> str:
    """The union's tag: ``kind``, defaulting to KernelBench so clients that never sent it keep working."""
    kind = value.get("kind", "kernelbench") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if isinstance(kind, str) else "kernelbench"


class EvaluateAnyRequest(
    RootModel[
        Annotated[
            Annotated[KernelEvalRequest, Tag("kernelbench")]
            | Annotated[BackendBenchEvalRequest, Tag("backendbench")],
            Discriminator(
                _request_kind,
                custom_error_type="invalid_kind",
                custom_error_message=f"kind must be one of {list(REQUEST_KINDS)} (absent: 'kernelbench')",
            ),
        ]
    ]
):
    """Body of ``POST /v1/evaluate``: a KernelBench or a BackendBench request, chosen by ``kind``."""

    @property
    def dataset(self) -> str:
        """What the tenant allowlist is checked against (the framework reads ``body.dataset``)."""
        return self.root.dataset


class EvaluateAnyResponse(RootModel[KernelEvalResponse | EvalResultData]):
    """Answer of ``POST /v1/evaluate``: a :class:`KernelEvalResponse`, or for BackendBench the generic
    :class:`EvalResultData` (score = overall, the full BackendBench verdict under ``details``)."""
