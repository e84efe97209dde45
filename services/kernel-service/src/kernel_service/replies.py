"""How a worker's reply to a KernelBench job becomes the service's answer, and which failures are not the
submission's (those are run again: ``KernelService._run_retrying``)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .judging.schemas import Outcome, excerpt
from .kernelbench.schemas import KernelEvalRequest, KernelEvalResponse
from .workers.pool import Reply

#: A crash during a phase is charged to the submission as this outcome (else: sandbox_error).
PHASE_OUTCOME: dict[str, Outcome] = {
    "compile": Outcome.COMPILATION_FAILURE,
    "load_solution": Outcome.COMPILATION_FAILURE,
    "init_solution": Outcome.INITIALIZATION_FAILURE,
    "correctness": Outcome.EXECUTION_FAILURE,
    "timing": Outcome.EXECUTION_FAILURE,
}
#: How many times a job is run again after failing before the submission's code ran (``environment_fault``).
ENVIRONMENT_RETRIES = 2


def response_from(reply: Reply, base: dict[str, Any], request: KernelEvalRequest) -> KernelEvalResponse:
    """A worker's reply as the answer: a result validated, or a dead, late or broken worker charged by
    the phase it was in (``PHASE_OUTCOME``)."""
    if reply.result is None:
        if reply.failure == "timeout":
            outcome = Outcome.TIMEOUT
            msg = f"evaluation exceeded timeout_s={request.options.timeout_s:g} (during {reply.phase or 'startup'}); worker killed"
        elif reply.failure in ("crash", "gpu_fault"):
            outcome = PHASE_OUTCOME.get(reply.phase or "", Outcome.SANDBOX_ERROR)
            if reply.phase == "load" and reply.candidate_started:  # its import or ``__init__`` took it down
                outcome = Outcome.INITIALIZATION_FAILURE
            msg = f"{reply.message} during {reply.phase or 'startup'}; worker replaced"
        elif reply.failure == "startup":
            outcome = Outcome.SANDBOX_ERROR
            msg = reply.message
        else:
            outcome = Outcome.SANDBOX_ERROR
            msg = f"worker protocol error: {reply.message}"
        return KernelEvalResponse.failure(
            outcome, msg, output=excerpt(reply.output), worker_id=reply.worker_id, **base
        )
    fields = {k: v for k, v in reply.result.items() if k != "environment_fault"}
    try:
        response = KernelEvalResponse.model_validate({**fields, "worker_id": reply.worker_id})
    except ValidationError as exc:
        return KernelEvalResponse.failure(
            Outcome.SANDBOX_ERROR,
            f"worker answered an invalid result: {exc.errors()[:3]}",
            worker_id=reply.worker_id,
            **base,
        )
    return response


def environment_fault(reply: Reply) -> str | None:
    """Why a KernelBench job failed before the submission's code ran, if it did: a worker that could not
    start or died before then, or the judge's own report (``environment_fault``: a side's CUDA context
    refused while the sides were set up). None when the submission ran (its failure is its own), or the
    job failed where it is the problem's own code (the reference's module in the judge)."""
    if reply.result is not None:
        why = reply.result.get("environment_fault")
        return str(why) if why else None
    if reply.failure == "startup":
        return reply.message or "the worker did not start"
    if reply.failure in ("crash", "gpu_fault") and not reply.candidate_started:
        if reply.phase in (None, "startup", "load_reference", "load"):
            return f"the worker {reply.message or 'died'} during {reply.phase or 'startup'}"
    return None
