"""The KernelBench agent as a verifiers harness: the runner's own loop, run in-process.

verifiers' contract is the interception endpoint, not a process: every model call goes to
``endpoint`` with ``secret``, so the trace records each turn. The loop is
``KernelBenchRunner.generate_with``: the runner's ``run_kernel`` / ``finish`` tools, code extraction,
the kernel service's verdict on each kernel and the feedback text built from it, exactly as
``kernelbench-runner run`` produces them. The kernels themselves never run here: the kernel service
compiles, checks and times them in its sandboxed workers, so the harness executes no model code.

What the agent did lands in ``trace.info``: ``generation`` (the runner's generation record, without
the turns the trace already holds) and ``kernels`` (one record per kernel: the runner's
``feedback_<n>.json``). A model or service failure fails the rollout (an outage is not a bad kernel);
a stop the trainer imposed (turn or token limits) keeps what was done, and the task scores it.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf
from kernelbench_runner.benchmark import KernelBenchRunner

from benchmark_runner.api import open_runner
from benchmark_runner.llm import ChatClient, LLMConfig

from .taskset import KernelBenchData


class KernelBenchHarnessConfig(vf.HarnessConfig):
    """No knobs of its own: the options are the taskset's (they travel with each task's data)."""


def opening_messages(system: str | None, prompt: Any) -> list[dict[str, Any]]:
    """The chat messages the runner would open with, from the task's (possibly overridden) prompts."""
    if not isinstance(prompt, str):
        raise TypeError("the kernelbench harness takes a text prompt (the runner's user message)")
    head = [{"role": "system", "content": system}] if system else []
    return [*head, {"role": "user", "content": prompt}]


def task_data(data: vf.TaskData) -> KernelBenchData:
    """The rollout's data as this package's type (a worker may hand over the generic wire form)."""
    if isinstance(data, KernelBenchData):
        return data
    return KernelBenchData.model_validate(data.model_dump())


class KernelBenchHarness(vf.Harness[KernelBenchHarnessConfig]):
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
        kb = task_data(data)
        system, prompt = self.resolve_prompt(data)
        llm = LLMConfig(model=ctx.model, base_url=endpoint, max_turns=kb.max_turns)
        # No client-side retries: the interception already retries the provider, and a refusal from
        # it (a trainer's limit) must end the loop at once.
        async with (
            open_runner(
                KernelBenchRunner,
                service_url=kb.service_url,
                run_id=kb.run_group,
                options=kb.options.model_dump(),
            ) as runner,
            ChatClient(llm, max_retries=0, api_key=secret) as chat,
        ):
            generation, agent = await runner.generate_with(
                chat, kb.problem, ctx.model, llm, None, opening_messages(system, prompt)
            )
        trace.info["generation"] = generation.model_dump(mode="json", exclude={"turns"})
        trace.info["kernels"] = agent.records
        if agent.failure is not None and trace.stop_condition is None:
            raise agent.failure
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")
