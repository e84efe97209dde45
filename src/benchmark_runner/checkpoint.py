"""What makes two invocations "the same run", and what a resumed run still has to do.

A run's identity is the runner, the model, the dataset's content, the generation version, the
payload schema and the generation options (temperature, token and turn limits, runner-specific
flags). Mixing generations made under different identities would make the score meaningless, so a
mismatch is refused (``--overwrite`` starts over). Task selection (``--limit``, ``--task-id``) and
plumbing (``--concurrency``, URLs, timeouts) are not identity: a run may be continued with more
tasks, less parallelism or another endpoint for the same model.

The dataset is identified by a hash of its parsed task list, not by its path: moving a run or its
data file elsewhere does not break resumption, while an edited task does. The path is kept in the
config for the reader.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import Field, ValidationError

from .schemas import (
    EvalResult,
    GenerationResult,
    GenerationStatus,
    StrictModel,
    Task,
    describe_validation_error,
)

#: Bumped when config.json's shape changes incompatibly.
CONFIG_FORMAT = 1


class DatasetIdentity(StrictModel):
    kind: Literal["file", "name", "problem"]
    name: str = Field(description="dataset name (kind=name) or file name")
    sha256: str = Field(description="hash of the parsed task list (every task, before selection)")
    path: str | None = Field(default=None, description="where the file was read from (not compared)")
    n_tasks: int = Field(default=0, ge=0, description="tasks in the dataset (not compared)")


class RunConfig(StrictModel):
    """Stored as ``config.json``. Everything but ``created_at`` and ``info`` must match to resume."""

    format: int = CONFIG_FORMAT
    runner: str
    model: str
    dataset: DatasetIdentity
    generation_version: str
    payload_type: str
    payload_schema_version: int
    generation_options: dict[str, Any] = Field(default_factory=dict)
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    info: dict[str, Any] = Field(default_factory=dict, description="context for humans; not compared")

    def identity(self) -> dict[str, Any]:
        """The compared keys, flattened to dotted names (``dataset.sha256``, ``generation_options.x``)."""
        raw = self.model_dump(mode="json", exclude={"created_at", "info"})
        raw["dataset"].pop("path", None)
        raw["dataset"].pop("n_tasks", None)
        return _flatten(raw)


class ConfigMismatch(RuntimeError):
    """The stored run was made with another configuration."""

    def __init__(self, message: str, keys: list[str]) -> None:
        super().__init__(message)
        self.keys = keys


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def hash_tasks(tasks: Iterable[Task]) -> str:
    """A content hash of a task list that ignores key order and formatting of the source file."""
    h = hashlib.sha256()
    for task in tasks:
        h.update(json.dumps(task.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def parse_stored_config(raw: dict[str, Any], where: str) -> RunConfig:
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigMismatch(
            f"{where} is not a run config this version understands: {describe_validation_error(exc)}",
            ["<format>"],
        ) from exc


def check_compatible(
    stored: RunConfig, current: RunConfig, run_dir: str, defaults: dict[str, Any] | None = None
) -> None:
    """Raise ``ConfigMismatch`` listing every differing identity key, stored vs. now. ``defaults``: values
    of identity keys (``generation_options.precision``) that a stored config made before the option
    existed lacks; such a run ran as the default, so it resumes under it and under nothing else."""
    a, b = {**(defaults or {}), **stored.identity()}, current.identity()
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    if not keys:
        return
    lines = [f"  {k}: stored {a.get(k, '<unset>')!r}, now {b.get(k, '<unset>')!r}" for k in keys]
    raise ConfigMismatch(
        f"run {run_dir} was started with a different configuration:\n"
        + "\n".join(lines)
        + "\nUse the same settings to resume it, pick another --run-id, or pass --overwrite to DELETE the old"
        " run and start over.",
        keys,
    )


def is_failed(generation: GenerationResult | None, evaluation: EvalResult | None) -> bool:
    """A task failed when the framework could not get a verdict: generate or evaluate raised.

    A verdict of ``error`` from the service (the submission did not build) is *not* a failure: it is
    the benchmark's answer, scored like any other.
    """
    if generation is not None and (
        generation.status == GenerationStatus.ERROR or generation.error is not None
    ):
        return True
    return evaluation is not None and evaluation.error is not None


@dataclass
class ResumePlan:
    """Which selected tasks still need a generation, which only an evaluation, which are finished."""

    to_generate: list[Task] = field(default_factory=list)
    to_evaluate: list[tuple[Task, GenerationResult]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    @property
    def n_todo(self) -> int:
        return len(self.to_generate) + len(self.to_evaluate)


def plan_resume(
    tasks: list[Task], generations: dict[str, GenerationResult], evaluations: dict[str, EvalResult]
) -> ResumePlan:
    """Split ``tasks`` by what is already on disk.

    * evaluated and not failed -> finished (skipped);
    * generated fine but not evaluated, or evaluation raised -> evaluate only (never re-generated);
    * not generated, or generation failed -> generate (a failed task is retried by a resumed run).
    """
    plan = ResumePlan()
    for task in tasks:
        gen = generations.get(task.id)
        ev = evaluations.get(task.id)
        gen_ok = gen is not None and not is_failed(gen, None)
        if gen_ok and ev is not None and ev.error is None:
            plan.finished.append(task.id)
        elif gen_ok:
            assert gen is not None
            plan.to_evaluate.append((task, gen))
        else:
            plan.to_generate.append(task)
    return plan
