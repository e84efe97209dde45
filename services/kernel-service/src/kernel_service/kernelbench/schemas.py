"""KernelBench's wire formats: what a caller submits (:class:`KernelEvalRequest`) and what it gets back
(:class:`KernelEvalResponse`).

The request names the reference either by source or by a dataset task id (exactly one), the
candidate solution source and its backend. The response carries a KernelBench-style outcome and
reward plus everything needed to trust (or audit) the number: timings of both sides, errors,
tolerance, hardware and versions. ``to_eval_result_data`` maps it onto the generic runner contract.
The options, outcomes and timing statistics both benchmarks' judges share are ``judging/schemas.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from benchmark_runner.schemas import EvalResultData, EvalStatus, StrictModel

from ..judging.profile_schemas import EvalProfile
from ..judging.schemas import Backend, EvalOptions, ModuleMode, Outcome, Precision, TimingStats, reward_for

#: Longest dataset name or task id.
MAX_NAME_CHARS = 500


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


_STATUS: dict[Outcome, EvalStatus] = {
    Outcome.CORRECT: EvalStatus.CORRECT,
    Outcome.INCORRECT: EvalStatus.INCORRECT,
    Outcome.COMPILED: EvalStatus.INCORRECT,  # not shown correct, so it must not count as correct
    Outcome.TIMEOUT: EvalStatus.TIMEOUT,
}


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
    reference_constant: bool = Field(
        default=False,
        description="the reference returned the same output for every correctness trial's random inputs (a "
        "degenerate problem, e.g. a softmax over a dimension of size 1): returning that constant is correct, "
        "and the speedup says nothing about a kernel for the problem's work",
    )
    reference_stateful: bool = Field(
        default=False,
        description="the reference answered the last correctness trial's inputs differently when called with "
        "them again: it keeps state from call to call (an RNN's hidden state) or draws randomness. Its "
        "answer then depends on the calls before, so only the correctness trials (both models called in "
        "lock step, as upstream KernelBench judges) decide; the timed calls' outputs are not checked",
    )
    atol: float | None = None
    rtol: float | None = None
    precision: Precision = Field(default="fp32", description="the dtype both sides ran at")
    module_mode: ModuleMode = Field(default="train", description="the mode both models ran in")
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
    retries: list[str] = Field(
        default_factory=list,
        description="why the job was run again on another worker, once a try: something outside the "
        "submission failed before its code ran (a worker that could not start, a GPU refusing clients)",
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
