"""The BackendBench agent as a verifiers harness: the runner's own loop, run in-process.

verifiers' contract is the interception endpoint, not a process: every model call goes to
``endpoint`` with ``secret``, so the trace records each turn. The loop is the runner's ``run_agent``:
its prompt, code extraction, the kernel service's verdict on each kernel and the feedback message
built from it, exactly as ``backendbench-runner run`` produces them. The kernels never run here: the
kernel service runs them in its sandboxed workers, so the harness executes no model code.

What the agent did lands in ``trace.info["generation"]`` (the runner's generation record, without the
turns the trace already holds; ``metadata.turn_verdicts`` has each turn's outcome). A model or service
failure fails the rollout (an outage is not a bad kernel); a stop the trainer imposed (turn or token
limits) ends the loop, and the task scores the transcript's last kernel.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf
from backendbench_runner.agent import run_agent
from backendbench_runner.benchmark import BackendBenchRunner

from benchmark_runner.api import open_runner
from benchmark_runner.llm import ChatClient, LLMConfig

from .taskset import BackendBenchData


class BackendBenchHarnessConfig(vf.HarnessConfig):
    """No knobs of its own: the options are the taskset's (they travel with each task's data)."""


def opening_messages(system: str | None, prompt: Any) -> list[dict[str, Any]]:
    """The chat messages the runner would open with, from the task's (possibly overridden) prompts."""
    if not isinstance(prompt, str):
        raise TypeError("the backend-bench harness takes a text prompt (the runner's user message)")
    head = [{"role": "system", "content": system}] if system else []
    return [*head, {"role": "user", "content": prompt}]


def task_data(data: vf.TaskData) -> BackendBenchData:
    """The rollout's data as this package's type (a worker may hand over the generic wire form)."""
    if isinstance(data, BackendBenchData):
        return data
    return BackendBenchData.model_validate(data.model_dump())


class BackendBenchHarness(vf.Harness[BackendBenchHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # kernels run in the kernel service's sandbox, never in the runtime
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        bb = task_data(data)
        problem = bb.problem
        system, prompt = self.resolve_prompt(data)
        llm = LLMConfig(model=ctx.model, base_url=endpoint, max_turns=bb.max_turns)
        # No client-side retries: the interception already retries the provider, and a refusal from
        # it (a trainer's limit) must end the loop at once.
        async with (
            open_runner(
                BackendBenchRunner, service_url=bb.service_url, run_id=bb.run_group, options=bb.flags
            ) as runner,
            ChatClient(llm, max_retries=0, api_key=secret) as chat,
        ):

            async def evaluate(source: str) -> dict[str, Any]:
                return await runner.evaluate_source(problem, source)

            try:
                generation = await run_agent(
                    problem.op,
                    problem.suite,
                    problem.id,
                    ctx.model,
                    llm,
                    runner.run_options,
                    None,
                    evaluate,
                    chat,
                    opening_messages(system, prompt),
                )
            except Exception:
                if trace.stop_condition is None:
                    raise
                return vf.ProgramResult(exit_code=0, stdout="", stderr="")
        trace.info["generation"] = generation.model_dump(mode="json", exclude={"turns"})
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")
