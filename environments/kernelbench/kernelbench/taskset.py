"""KernelBench as a verifiers taskset: the runner's problems, prompts, agent loop and reward.

Nothing here re-implements the benchmark. ``load`` asks ``kernelbench_runner`` for the problems
(``--dataset-file``, ``--level``, ``--task-id`` as the runner reads them) and for the opening prompt;
the harness (harness.py) runs the runner's agent with its ``run_kernel`` / ``finish`` tools through the
trainer's model proxy; ``finalize`` scores the final kernel the way ``kernelbench-runner`` evaluates it
(a fresh service measurement by default), so a rollout's reward is the number the runner records for
the same transcript: ``speedup - 1`` when correct, else -2 .. -7 by outcome (DESIGN.md's table).

Each task's data carries everything a rollout needs (problem, runner options, service URL, rollout
group), because a trainer ships task data to environment workers that never see this config.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import verifiers.v1 as vf
from kernelbench_runner import prompts
from kernelbench_runner.benchmark import KernelBenchOptions, KernelBenchRunner, response_to_eval_data
from kernelbench_runner.problems import KernelBenchTask, select
from pydantic import Field

from benchmark_runner.api import open_runner
from benchmark_runner.client import SERVICE_URL_ENV
from benchmark_runner.schemas import EvalResult, EvalStatus, GenerationResult


class KernelBenchTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: the runner's ``run`` flags, under the same names."""

    dataset_file: str | None = None
    """A KernelBench checkout, a .jsonl of problems, or ``hub[:NAME]`` (default: the bundled sample)."""
    level: list[int] = Field(default_factory=list)
    """Keep only these levels (empty: all)."""
    task_ids: list[str] = Field(default_factory=list)
    """Keep only these problems (``L1_19_ReLU``, ``L1_19``, ``level1/19_ReLU``)."""
    backend: Literal["cuda", "triton", "cpp", "torch"] = "cuda"
    """What the model writes and the service compiles (CPU workers judge ``torch`` and ``cpp`` only)."""
    max_turns: int = Field(default=5, ge=1, le=100)
    """Model calls per rollout (with feedback)."""
    feedback: Literal["until_correct", "none", "always", "profile"] = "until_correct"
    """until_correct: stop at the first correct kernel; none: single-shot, no tools; always: go on to
    ``finish`` or ``max_turns``; profile: as always, with a profile of each correct kernel and the
    reference (kernels, calls, times, ncu metrics where ncu runs) in its feedback."""
    tolerance: float | None = Field(default=None, gt=0)
    """atol = rtol for correctness (default: upstream's 1e-4 fp32, 1e-2 fp16/bf16)."""
    tf32: Literal["default", "off", "on"] = "default"
    """TF32 for fp32 matmuls and convolutions, both sides alike."""
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    """The dtype both sides run at: floating inputs, init inputs, parameters and buffers cast to it."""
    prompt_source: Literal["full", "model"] = "full"
    """full: the whole problem file, as upstream prompts; model: ``Model`` and imports only."""
    service_url: str | None = None
    """Kernel service base URL (default: ``$BENCHMARK_SERVICE_URL``, else one embedded per worker)."""
    run_id: str | None = None
    """Prefix of each rollout group's ``X-Run-Id`` (default: a fresh one per load)."""
    reevaluate: bool = True
    """Score the final kernel with a fresh measurement, as the runner's evaluate step does; False
    reuses the verdict it got during the rollout (one service call fewer per rollout)."""

    def runner_options(self) -> KernelBenchOptions:
        """The runner's typed options, validated by the runner itself."""
        return KernelBenchOptions.model_validate(
            {
                "backend": self.backend,
                "feedback": self.feedback,
                "level": self.level,
                "tolerance": self.tolerance,
                "tf32": self.tf32,
                "precision": self.precision,
                "prompt_source": self.prompt_source,
            }
        )


class KernelBenchData(vf.TaskData):
    """One problem with the options that shape its rollouts (all of it lands on the trace)."""

    problem: KernelBenchTask
    options: KernelBenchOptions
    max_turns: int
    service_url: str | None = None
    run_group: str
    """``X-Run-Id`` of this problem's rollouts: a rollout group is one run to the service."""
    reevaluate: bool = True


def generation_of(trace: vf.Trace, data: KernelBenchData) -> GenerationResult:
    """What the harness recorded, else (another harness ran the task) the last reply's kernel."""
    recorded = trace.info.get("generation")
    if isinstance(recorded, dict):
        return GenerationResult.model_validate(recorded)
    code = prompts.extract_code(trace.last_reply)
    return GenerationResult(
        task_id=data.problem.id,
        model=trace.agent.config.model or "",
        payload=code,
        error=None if code else "the model produced no kernel",
        metadata={"backend": data.options.backend, "eval_options": data.options.eval_options()},
    )


class KernelBenchRLTask(vf.Task[KernelBenchData, vf.State, vf.TaskConfig]):
    """Scores one rollout: the final kernel through the kernel service, as the runner evaluates it."""

    @property
    def key(self) -> str:
        return self.data.problem.id  # the data holds a per-load run group: its hash is not durable

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        data = self.data
        generation = generation_of(trace, data)
        async with open_runner(
            KernelBenchRunner,
            service_url=data.service_url,
            run_id=data.run_group,
            options=data.options.model_dump(),
        ) as runner:
            best = generation.metadata.get("best_result")
            if not data.reevaluate and isinstance(best, dict) and generation.payload is not None:
                verdict = response_to_eval_data(best, data.problem, generation)
                evaluation = EvalResult(task_id=data.problem.id, model=generation.model, data=verdict)
            else:
                evaluation = await runner.evaluate(data.problem, generation)
        trace.info["evaluation"] = evaluation.model_dump(mode="json")

    @staticmethod
    def _evaluation(trace: vf.Trace) -> EvalResult:
        return EvalResult.model_validate(trace.info["evaluation"])

    @vf.reward
    async def kernel_reward(self, trace: vf.Trace) -> float:
        """KernelBench's reward of the final kernel: speedup - 1 if correct, else -2 .. -7."""
        return float(self._evaluation(trace).data.score)

    @vf.metric
    async def correct(self, trace: vf.Trace) -> float:
        return float(self._evaluation(trace).data.status == EvalStatus.CORRECT)

    @vf.metric
    async def speedup(self, trace: vf.Trace) -> float:
        """The final kernel's speedup over the reference (0 when it is not correct)."""
        evaluation = self._evaluation(trace)
        value = evaluation.data.details.get("speedup")
        correct = evaluation.data.status == EvalStatus.CORRECT
        return float(value) if correct and isinstance(value, int | float) else 0.0

    @vf.metric
    async def timing_degraded(self, trace: vf.Trace) -> float:
        """1 when the final kernel's timing held host time: its reward then has no speed part (0 if correct)."""
        return float(bool(self._evaluation(trace).data.details.get("timing_degraded")))

    @vf.metric
    async def kernels(self, trace: vf.Trace) -> float:
        """Kernels the model submitted during the rollout."""
        return float(len(trace.info.get("kernels") or []))


class KernelBenchTaskset(vf.Taskset[KernelBenchRLTask, KernelBenchTasksetConfig]):
    """KernelBench problems (the runner's bundled sample by default)."""

    def load(self) -> Iterator[KernelBenchRLTask]:
        cfg = self.config
        options = cfg.runner_options()
        runner = KernelBenchRunner(options=options.model_dump())
        problems = runner.load_tasks(Path(cfg.dataset_file) if cfg.dataset_file else None)
        selected = select([p for p in problems if isinstance(p, KernelBenchTask)], task_ids=cfg.task_ids)
        run_id = cfg.run_id or f"vf-kernelbench-{uuid.uuid4().hex[:8]}"
        url = cfg.service_url or os.environ.get(SERVICE_URL_ENV) or None
        for problem in selected:
            system, user = prompts.initial_messages(
                problem,
                options.backend,
                cfg.max_turns,
                use_tools=options.feedback != "none",
                source_mode=options.prompt_source,
                profile=options.feedback == "profile",
            )
            fields: dict[str, Any] = {
                "id": problem.id,
                "name": problem.name,
                "system_prompt": system["content"],
                "prompt": user["content"],
                "problem": problem,
                "options": options,
                "max_turns": cfg.max_turns,
                "service_url": url,
                "run_group": f"{run_id}/{problem.id}",
                "reevaluate": cfg.reevaluate,
            }
            yield KernelBenchRLTask(KernelBenchData(**fields), cfg.task)
