"""Wire formats of a BackendBench evaluation: what the runner sends and what the worker answers.

Both cross a process boundary as JSON (the worker never unpickles), so they are strict pydantic models.
The response converts to the framework's generic :class:`EvalResultData` so the HTTP API keeps one shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from benchmark_runner.schemas import EvalResultData, EvalStatus, StrictModel

from ..judging.bounds import BoundedModel
from ..judging.profile_schemas import EvalProfile

SUITES = ("smoke", "opinfo", "torchbench", "facto")
Suite = Literal["smoke", "opinfo", "torchbench", "facto"]
DTYPES = ("float32", "float16", "bfloat16", "float64")

#: Outcomes and the :class:`EvalStatus` each maps to.
OUTCOME_STATUS: dict[str, EvalStatus] = {
    "correct": EvalStatus.CORRECT,
    "incorrect": EvalStatus.INCORRECT,
    "calls_original_op": EvalStatus.INCORRECT,
    "load_error": EvalStatus.ERROR,
    "missing_function": EvalStatus.ERROR,
    "no_inputs": EvalStatus.ERROR,
    "timeout": EvalStatus.TIMEOUT,
    "sandbox_error": EvalStatus.ERROR,
    "requires_gpu": EvalStatus.ERROR,
}


#: atol and rtol at most this (a larger tolerance, or Infinity, would call any finite output correct).
MAX_TOLERANCE = 1.0
MAX_NAME_CHARS = 500


class BackendBenchOptions(BoundedModel):
    """How to evaluate. Defaults follow upstream BackendBench where it has one; tolerances are per dtype.
    Every number is finite and bounded (``bounds.py``)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtypes: list[str] | None = Field(
        default=None,
        max_length=len(DTYPES),
        description="dtypes to test; None: float32 + bfloat16 on CPU, + float16 on CUDA",
    )
    atol: float | None = Field(
        default=None, gt=0, le=MAX_TOLERANCE, description="override every dtype's absolute tolerance"
    )
    rtol: float | None = Field(
        default=None, gt=0, le=MAX_TOLERANCE, description="override every dtype's relative tolerance"
    )
    max_inputs: int = Field(default=32, gt=0, le=10_000, description="correctness inputs per op at most")
    perf_trials: int = Field(default=20, gt=0, le=10_000)
    warmup: int = Field(default=3, ge=0, le=1000)
    perf_processes: int | None = Field(
        default=None,
        ge=1,
        le=8,
        description="fresh pairs of side processes the performance inputs are timed in, each with its share "
        "of the readings (one process reads an op steadily up to ~2.5% off another); None: 5 on a GPU, 1 on "
        "the CPU",
    )
    measure_performance: bool = True
    seed: int = Field(default=0, ge=0, lt=2**63)
    trace_file: str | None = Field(
        default=None,
        max_length=4096,
        description="torchbench suite: a trace file (upstream text, or JSON) the worker can read",
    )
    trace: dict[str, list[dict[str, Any]]] | None = Field(
        default=None,
        description="torchbench suite: this op's inputs from a trace, overload -> [{cnt, args, kwargs}] as "
        "JSON arg specs (traces.op_entries); the runner sends them from --trace-file, so the worker reads "
        "no file of the caller's",
    )
    detect_original_op: bool = True
    timeout_s: float = Field(
        default=300.0,
        gt=0,
        le=3600,
        description="wall clock for the whole evaluation; then the worker is killed",
    )
    feedback_chars: int = Field(
        default=4000, gt=200, le=100_000, description="feedback text is trimmed to this length"
    )
    profile: bool = Field(
        default=False,
        description="a correct kernel's answer carries a profile of one untimed call of the kernel and of "
        "the op on one performance input, taken in side processes after the verdict and timing "
        "(advisory: it changes no verdict, score or time)",
    )

    @field_validator("dtypes")
    @classmethod
    def _known_dtypes(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        bad = [d for d in value if d not in DTYPES]
        if bad or not value:
            raise ValueError(f"dtypes must be a non-empty subset of {list(DTYPES)}, got {value}")
        return value


class BackendBenchEvalRequest(StrictModel):
    """Body of an evaluation: one op's kernel source, checked on one suite's inputs for that op."""

    kind: Literal["backendbench"] = "backendbench"
    dataset: str = Field(
        max_length=MAX_NAME_CHARS,
        description='"backendbench-<suite>" (the tenant allowlist is checked against it)',
    )
    op: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$")
    suite: Suite = "smoke"
    source: str = Field(description="Python source defining `<op>_kernel_impl(*args, **kwargs)`")
    task_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    options: BackendBenchOptions = Field(default_factory=BackendBenchOptions)

    @model_validator(mode="after")
    def _dataset_matches_suite(self) -> BackendBenchEvalRequest:
        if self.dataset != f"backendbench-{self.suite}":
            raise ValueError(
                f"dataset must be 'backendbench-{self.suite}' for suite {self.suite!r}, got {self.dataset!r}"
            )
        return self

    @property
    def function_name(self) -> str:
        """``add`` -> ``add_kernel_impl``; an overload ``add.Tensor`` -> ``add__Tensor_kernel_impl`` (upstream)."""
        return self.op.replace(".", "__") + "_kernel_impl"


class InputResult(StrictModel):
    """One sample input: did the kernel match the op, how far off was it, how fast was it."""

    index: int
    kind: Literal["correctness", "performance"]
    overload: str
    args: str = Field(description="shapes/dtypes of the arguments, upstream's T([2, 3], f32) notation")
    dtype: str | None = None
    correct: bool = False
    error: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    atol: float | None = None
    rtol: float | None = None
    ref_ms: float | None = None
    kernel_ms: float | None = None
    speedup: float | None = None


class BackendBenchProfile(EvalProfile):
    """``options.profile``: KernelBench's :class:`EvalProfile` (the candidate is the kernel, the reference
    the aten op), with the input it was taken on."""

    input: str | None = Field(
        default=None, description="the input profiled: its overload and upstream's T([2, 3], f32) notation"
    )


class BackendBenchEvalResponse(StrictModel):
    """Per-op verdict: correctness in {0,1}, performance = geomean speedup (1 when failed), overall = product."""

    kind: Literal["backendbench"] = "backendbench"
    op: str
    suite: str
    outcome: str
    correctness: float = Field(ge=0, le=1)
    performance: float = Field(default=1.0, gt=0)
    overall: float = Field(default=0.0, ge=0)
    n_correctness_inputs: int = 0
    n_correct: int = 0
    n_perf_inputs: int = 0
    inputs: list[InputResult] = Field(default_factory=list)
    feedback: str = ""
    aten_ops_called: list[str] = Field(default_factory=list, description="aten ops the kernel dispatched")
    device: str = "cpu"
    timing_method: str = ""
    timing_gate: dict[str, float] | None = Field(
        default=None,
        description="GPU: the timed calls' gate (misses, final length, reply round trip, null call, us)",
    )
    timing_degraded: bool = Field(
        default=False,
        description="GPU: some timed readings hold host time (they missed the longest gate): performance is "
        "then 1 (speed unknown), the measured speedups stay in inputs",
    )
    tolerances: dict[str, list[float]] = Field(default_factory=dict, description="dtype -> [atol, rtol]")
    torch_version: str = ""
    duration_s: float = 0.0
    startup_s: float = Field(
        default=0.0,
        description="of duration_s, the seconds spent starting side processes for this op (a candidate or "
        "reference process forked and set up: its CUDA context on a GPU); in a batch, the ops after the "
        "first share processes and mostly spend none",
    )
    worker_id: str | None = Field(
        default=None,
        description="the service's worker that judged it (``eval-<gpu>-<n>``, ``eval-cpu-<n>``); None in-process",
    )
    profile: BackendBenchProfile | None = Field(
        default=None,
        description="options.profile: one untimed call of each side on one performance input (advisory)",
    )

    @property
    def status(self) -> EvalStatus:
        return OUTCOME_STATUS.get(self.outcome, EvalStatus.ERROR)

    def to_eval_result_data(self) -> EvalResultData:
        """The framework's generic answer: score = overall, the full verdict under ``details``."""
        details: dict[str, Any] = self.model_dump(mode="json")
        return EvalResultData(status=self.status, score=self.overall, outcome=self.outcome, details=details)

    @classmethod
    def failure(
        cls, request: BackendBenchEvalRequest, outcome: str, message: str
    ) -> BackendBenchEvalResponse:
        """A verdict for an evaluation that never produced per-input results (timeout, crash, bad source)."""
        return cls(
            op=request.op,
            suite=request.suite,
            outcome=outcome,
            correctness=0.0,
            performance=1.0,
            overall=0.0,
            feedback=f"{outcome}: {message}"[: request.options.feedback_chars],
        )
