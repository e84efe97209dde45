"""BackendBench as a verifiers taskset: the runner's ops, prompt, agent loop and scoring.

Nothing here re-implements the benchmark. ``load`` asks ``backendbench_runner`` for the tasks of
``suite`` (``ops``, a ``dataset_file``) and for the opening prompt; the harness (harness.py) runs the
runner's multi-turn loop (the service's verdict fed back until the kernel is correct); ``finalize``
evaluates the final kernel as ``backendbench-runner`` evaluates it (a fresh service evaluation), and
the reward is the runner's task score: ``w_c*correctness + w_p*performance + w_o*overall`` with
``weights`` (default overall = correctness x performance), correctness in {0, 1} and performance the
kernel's geometric-mean speedup.

Each task's data carries everything a rollout needs (op, runner flags, service URL, rollout group),
because a trainer ships task data to environment workers that never see this config.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import verifiers.v1 as vf
from backendbench_runner.agent import extract_code
from backendbench_runner.benchmark import BackendBenchRunner, BackendBenchTask
from backendbench_runner.options import RunOptions
from backendbench_runner.prompts import function_name, initial_messages
from backendbench_runner.scoring import components, parse_weights
from pydantic import Field, field_validator

from benchmark_runner.api import open_runner
from benchmark_runner.client import SERVICE_URL_ENV
from benchmark_runner.schemas import EvalResult, GenerationResult


def weights_flag(weights: dict[str, float]) -> str:
    """The runner's ``--weights`` text for a weights mapping."""
    return ",".join(f"{name}={value!r}" for name, value in weights.items())


class BackendBenchTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: the runner's ``run`` flags, under the same names."""

    suite: Literal["smoke", "opinfo", "torchbench", "facto"] = "smoke"
    """The ops and their inputs."""
    ops: list[str] = Field(default_factory=list)
    """Only these ops of the suite (empty: all of them)."""
    task_ids: list[str] = Field(default_factory=list)
    """Only these tasks (``smoke/relu``)."""
    dataset_file: str | None = None
    """Rows ``{"id", "question", "op", "suite"}`` instead of the suite's op list."""
    backend: Literal["triton", "torch", "cpp"] = "triton"
    """What the prompt asks for (the service runs any Python module)."""
    max_turns: int = Field(default=5, ge=1, le=100)
    """Turns per rollout; each is evaluated and its verdict fed back (``until_correct``)."""
    feedback: Literal["until_correct", "none", "profile"] = "until_correct"
    """until_correct: feed failures back until the kernel is correct; none: one answer; profile: every
    turn evaluated (a correct kernel optimised further), a correct kernel's feedback with a profile of its
    call and the op's (advisory), the best correct kernel scored."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Task score = weighted sum of ``correctness``, ``performance``, ``overall`` (empty: overall=1),
    as ``--weights correctness=0.5,overall=0.5``."""
    trace_file: str | None = None
    """torchbench: a larger trace file (read on both sides)."""
    service_url: str | None = None
    """Kernel service base URL (default: ``$BENCHMARK_SERVICE_URL``, else one embedded per worker)."""
    run_id: str | None = None
    """Prefix of each rollout group's ``X-Run-Id`` (default: a fresh one per load)."""

    @field_validator("weights")
    @classmethod
    def _known_weights(cls, value: dict[str, float]) -> dict[str, float]:
        if value:
            parse_weights(weights_flag(value))  # the runner's own check names a bad component
        return value

    def runner_flags(self) -> dict[str, Any]:
        """The raw flag values the runner's ``configure`` takes (as a run's config.json stores them)."""
        return {
            "suite": self.suite,
            "ops": ",".join(self.ops) or None,
            "feedback": self.feedback,
            "weights": weights_flag(self.weights) if self.weights else None,
            "backend": self.backend,
            "trace_file": self.trace_file,
        }


class BackendBenchData(vf.TaskData):
    """One op with the flags that shape its rollouts (all of it lands on the trace)."""

    problem: BackendBenchTask
    flags: dict[str, Any]
    """The runner's flags (``RunOptions.parse`` reads them)."""
    max_turns: int
    service_url: str | None = None
    run_group: str
    """``X-Run-Id`` of this op's rollouts: a rollout group is one run to the service."""


def generation_of(trace: vf.Trace, data: BackendBenchData) -> GenerationResult:
    """What the harness recorded, else (another harness, or a stopped rollout) the transcript's
    last kernel, as the runner's loop keeps the last one it extracted."""
    recorded = trace.info.get("generation")
    if isinstance(recorded, dict):
        return GenerationResult.model_validate(recorded)
    function = function_name(data.problem.op)
    replies = [m.content for m in reversed(trace.assistant_messages) if isinstance(m.content, str)]
    code = next((c for text in replies if (c := extract_code(text, function))), None)
    return GenerationResult(
        task_id=data.problem.id,
        model=trace.agent.config.model or "",
        payload=code,
        error=None if code else "no kernel produced",
    )


class BackendBenchRLTask(vf.Task[BackendBenchData, vf.State, vf.TaskConfig]):
    """Scores one rollout: the final kernel through the kernel service, as the runner evaluates it."""

    @property
    def key(self) -> str:
        return self.data.problem.id  # the data holds a per-load run group: its hash is not durable

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        data = self.data
        generation = generation_of(trace, data)
        async with open_runner(
            BackendBenchRunner, service_url=data.service_url, run_id=data.run_group, options=data.flags
        ) as runner:
            evaluation = await runner.evaluate(data.problem, generation)
        trace.info["evaluation"] = evaluation.model_dump(mode="json")

    def _components(self, trace: vf.Trace) -> tuple[float, float, float]:
        return components(EvalResult.model_validate(trace.info["evaluation"]))

    @vf.reward
    async def task_score(self, trace: vf.Trace) -> float:
        """The runner's task score: the weighted sum of correctness, performance and overall."""
        weights = RunOptions.parse(self.data.flags).weights
        c, p, o = self._components(trace)
        return weights["correctness"] * c + weights["performance"] * p + weights["overall"] * o

    @vf.metric
    async def correctness(self, trace: vf.Trace) -> float:
        return self._components(trace)[0]

    @vf.metric
    async def performance(self, trace: vf.Trace) -> float:
        """Geometric-mean speedup over the perf inputs (1 when the kernel failed)."""
        return self._components(trace)[1]

    @vf.metric
    async def overall(self, trace: vf.Trace) -> float:
        return self._components(trace)[2]

    @vf.metric
    async def timing_degraded(self, trace: vf.Trace) -> float:
        """1 when the kernel's timing held host time: its performance is then 1 (no speed reward)."""
        details = EvalResult.model_validate(trace.info["evaluation"]).data.details or {}
        return float(bool(details.get("timing_degraded")))


class BackendBenchTaskset(vf.Taskset[BackendBenchRLTask, BackendBenchTasksetConfig]):
    """One task per op of the suite (smoke by default)."""

    def load(self) -> Iterator[BackendBenchRLTask]:
        cfg = self.config
        flags = cfg.runner_flags()
        runner = BackendBenchRunner()
        runner.configure(flags)
        tasks = runner.load_tasks(Path(cfg.dataset_file) if cfg.dataset_file else None)
        unknown = sorted(set(cfg.task_ids) - {t.id for t in tasks})
        if unknown:
            raise ValueError(f"task_ids: {', '.join(unknown)} not among the loaded tasks")
        run_id = cfg.run_id or f"vf-backendbench-{uuid.uuid4().hex[:8]}"
        url = cfg.service_url or os.environ.get(SERVICE_URL_ENV) or None
        for problem in tasks:
            if not isinstance(problem, BackendBenchTask) or (cfg.task_ids and problem.id not in cfg.task_ids):
                continue
            system, user = initial_messages(problem.op, problem.suite, cfg.backend, cfg.feedback == "profile")
            fields: dict[str, Any] = {
                "id": problem.id,
                "name": problem.op,
                "system_prompt": system["content"],
                "prompt": user["content"],
                "problem": problem,
                "flags": flags,
                "max_turns": cfg.max_turns,
                "service_url": url,
                "run_group": f"{run_id}/{problem.id}",
            }
            yield BackendBenchRLTask(BackendBenchData(**fields), cfg.task)
