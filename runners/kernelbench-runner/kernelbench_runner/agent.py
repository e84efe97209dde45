"""The multi-turn kernel agent: ask, run the kernel through the service, feed the result back, repeat.

Backend-agnostic: it never compiles anything itself. Every kernel goes through ``evaluate_fn``
(injected: the runner binds it to the kernel service), so the same loop serves CUDA, Triton, and the
CPU backends used by the demo and the tests.

Feedback modes (``--feedback``), with ``T`` = ``--max-turns`` model calls per trajectory:

- ``none``: single-shot, as upstream KernelBench's baseline protocol. One model call, no tools
  offered; the kernel is taken from the reply (a ```python block, or a ``run_kernel``/``finish`` call
  if the model makes one anyway) and is *not* evaluated during generation (the run's evaluate
  stage scores it). ``T`` is ignored.
- ``until_correct``: each kernel is evaluated and the result fed back; the trajectory stops at the
  first correct kernel, at ``finish``, or after ``T`` calls.
- ``always``: like ``until_correct`` but does not stop at a correct kernel: the model keeps
  optimising until ``finish`` or ``T`` calls.
- ``profile``: like ``always``, and each kernel is evaluated with ``options.profile``: a correct
  kernel's feedback carries a table of its kernels and the reference's (calls, times, the share of the
  call outside kernels, ncu metrics where ncu runs), trimmed to ``prompts.PROFILE_CHARS``; the system
  prompt says how to read it.

Strategies (``--strategy``, ``--samples N``):

- ``best-of-n``: ``N`` independent trajectories in parallel (``N = 1``: the plain agent).
- ``tree``: phase 0 draws ``N`` one-call samples; each later phase (up to ``T`` phases) keeps the best
  ``ceil(N/2)`` kernels so far and spends ``N`` calls refining them (failed ones get a fix attempt with
  their error, correct ones an optimisation attempt with their speedup). ``until_correct`` stops after
  the first phase that produced a correct kernel.

The final answer is the best correct kernel seen (highest speedup), else the last kernel produced.
Every model call is a ``Turn``; every kernel is written to ``<log_dir>/kernels/turn_<n>.py`` with
its evaluation in ``feedback_<n>.json`` (``_<k>`` appended when one call ran several kernels).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
from benchmark_runner.llm import ChatResponse
from benchmark_runner.schemas import StrictModel, TokenUsage, ToolCall, Turn
from pydantic import Field

from . import prompts
from .problems import KernelBenchTask

FeedbackMode = Literal["until_correct", "none", "always", "profile"]
Strategy = Literal["best-of-n", "tree"]

#: ``evaluate_fn(solution_source, backend)`` -> a KernelEvalResponse-shaped dict (outcome, speedup, ...).
EvaluateFn = Callable[[str, str], Awaitable[dict[str, Any]]]


class ChatModel(Protocol):
    """What the agent needs of a model client (``benchmark_runner.llm.ChatClient`` fits)."""

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **params: Any
    ) -> ChatResponse: ...


class AgentOptions(StrictModel):
    backend: str = Field(default="cuda", description="backend the kernels are evaluated as")
    max_turns: int = Field(default=5, ge=1, le=100)
    feedback: FeedbackMode = "until_correct"
    strategy: Strategy = "best-of-n"
    samples: int = Field(default=1, ge=1, le=64)
    prompt_source: Literal["full", "model"] = "full"


@dataclass
class Candidate:
    """One kernel the model produced, with its evaluation (``None`` when not evaluated)."""

    turn: int
    sample: int
    source: str
    backend: str
    result: dict[str, Any] | None
    file: str
    via: str  # "run_kernel" | "finish" | "text"

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.get("outcome") == "correct"

    @property
    def speedup(self) -> float | None:
        value = self.result.get("speedup") if self.result else None
        return float(value) if isinstance(value, int | float) else None

    def rank(self) -> tuple[int, float]:
        """Higher is better: correct kernels by speedup, then the rest by reward."""
        if self.correct:
            return (1, self.speedup or 0.0)
        reward = self.result.get("reward") if self.result else None
        return (0, float(reward) if isinstance(reward, int | float) else -100.0)

    def summary(self) -> dict[str, Any]:
        r = self.result or {}
        return {
            "turn": self.turn,
            "sample": self.sample,
            "file": self.file,
            "via": self.via,
            "backend": self.backend,
            "outcome": r.get("outcome"),
            "speedup": r.get("speedup"),
            "reward": r.get("reward"),
        }


@dataclass
class AgentResult:
    payload: str | None
    best: Candidate | None
    candidates: list[Candidate]
    turns: list[Turn]
    usage: TokenUsage
    latency_s: float
    stop_reasons: list[str] = field(default_factory=list)
    error: str | None = None


def pick_final(candidates: list[Candidate]) -> Candidate | None:
    """The best correct kernel (highest speedup; earliest on ties), else the last one produced."""
    correct = [c for c in candidates if c.correct]
    if correct:
        return max(correct, key=lambda c: (c.speedup or 0.0, -c.turn))
    return candidates[-1] if candidates else None


class KernelAgent:
    """Runs the strategy for one task. Not shared between tasks (it holds the task's turn counter)."""

    def __init__(
        self,
        chat: ChatModel,
        evaluate_fn: EvaluateFn,
        options: AgentOptions,
        log_dir: Path | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.chat = chat
        self.evaluate_fn = evaluate_fn
        self.options = options
        self.log_dir = log_dir
        self.turns: list[Turn] = []
        self.candidates: list[Candidate] = []
        #: What ``feedback_<n>.json`` holds for each kernel (turn, via, result, the feedback shown), in
        #: production order: kept in memory too, for front ends that write no files (the RL environment).
        self.records: list[dict[str, Any]] = []
        #: The model API or service failure that ended ``run`` early (``AgentResult.error`` names it).
        self.failure: Exception | None = None
        self.stop_reasons: list[str] = []
        self._next_turn = 0

    # ---- bookkeeping -----------------------------------------------------------------------------

    def _turn_index(self) -> int:
        index = self._next_turn
        self._next_turn += 1
        return index

    def _write(self, name: str, text: str) -> str:
        if self.log_dir is None:
            return name
        path = self.log_dir / "kernels" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return f"kernels/{name}"

    async def _kernel(
        self, turn: int, k: int, sample: int, source: str, via: str, evaluate: bool
    ) -> Candidate:
        suffix = f"{turn}" if k == 0 else f"{turn}_{k}"
        file = self._write(f"turn_{suffix}.py", source)
        backend = self.options.backend
        result = await self.evaluate_fn(source, backend) if evaluate else None
        record = {"turn": turn, "sample": sample, "via": via, "backend": backend, "evaluated": evaluate}
        record["result"] = result
        record["feedback"] = prompts.feedback_for(result) if result is not None else None
        self.records.append(record)
        self._write(f"feedback_{suffix}.json", json.dumps(record, indent=1, default=str))
        candidate = Candidate(turn, sample, source, backend, result, file, via)
        self.candidates.append(candidate)
        return candidate

    async def _call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[int, ChatResponse]:
        index = self._turn_index()
        response = await self.chat.chat(list(messages), tools)
        return index, response

    # ---- one trajectory ----------------------------------------------------------------------------

    async def trajectory(self, messages: list[dict[str, Any]], budget: int, sample: int) -> list[Candidate]:
        """Up to ``budget`` model calls on one conversation; returns the kernels it produced."""
        opts = self.options
        evaluate = opts.feedback != "none"
        tools = prompts.TOOLS if evaluate else None
        messages = list(messages)
        produced: list[Candidate] = []
        for _ in range(budget if evaluate else 1):
            sent = list(messages)
            index, response = await self._call(sent, tools)
            turn = Turn(
                index=index,
                messages=sent,
                response=response.content,
                usage=response.usage,
                latency_s=response.latency_s,
            )
            self.turns.append(turn)
            assistant = response.assistant_message()
            if assistant["content"] is None and not response.tool_calls:
                assistant["content"] = ""  # some APIs reject a null content without tool calls
            messages.append(assistant)
            finished = False
            k = 0
            if response.tool_calls:
                for call in response.tool_calls:
                    reply, candidate, finished_now = await self._tool(call, index, k, sample, evaluate)
                    turn.tool_calls.append(call.model_copy(update={"result": reply}))
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": prompts.render(reply)}
                    )
                    if candidate is not None:
                        produced.append(candidate)
                        k += 1
                    finished = finished or finished_now
            else:
                code = prompts.extract_code(response.content)
                if code is not None:
                    candidate = await self._kernel(index, 0, sample, code, "text", evaluate)
                    produced.append(candidate)
                    if candidate.result is not None:
                        messages.append({"role": "user", "content": prompts.retry_prompt(candidate.result)})
                elif evaluate:
                    messages.append(
                        {
                            "role": "user",
                            "content": "No kernel found. Call run_kernel with your ModelNew module, "
                            "or answer with it in a ```python block.",
                        }
                    )
            if not evaluate:
                self.stop_reasons.append("single_shot")
                break
            if finished:
                self.stop_reasons.append("finish")
                break
            if opts.feedback == "until_correct" and any(c.correct for c in produced):
                self.stop_reasons.append("correct")
                break
        else:
            self.stop_reasons.append("max_turns")
        return produced

    async def _tool(
        self, call: ToolCall, turn: int, k: int, sample: int, evaluate: bool
    ) -> tuple[dict[str, Any], Candidate | None, bool]:
        """Run one tool call: (what the model is told, the kernel it produced if any, whether to stop)."""
        args = call.arguments
        if call.name not in ("run_kernel", "finish"):
            return {"error": f"unknown tool {call.name!r}; use run_kernel or finish"}, None, False
        if set(args) == {"_raw"}:
            return (
                {"error": 'arguments are not valid JSON: send an object like {"python": "..."}'},
                None,
                False,
            )
        python = args.get("python")
        if call.name == "finish" and not python:
            return {"status": "finished"}, None, True
        if not isinstance(python, str) or not python.strip():
            return {"error": "`python` is required: the module source defining class ModelNew"}, None, False
        cuda, cpp = args.get("cuda"), args.get("cpp")
        for name, value in (("cuda", cuda), ("cpp", cpp)):
            if value is not None and not isinstance(value, str):
                return {"error": f"`{name}` must be a string or null"}, None, False
        source = prompts.assemble_solution(python, cuda, cpp)
        candidate = await self._kernel(turn, k, sample, source, call.name, evaluate)
        reply = (
            prompts.feedback_for(candidate.result) if candidate.result is not None else {"status": "received"}
        )
        if call.name == "finish":
            reply["status"] = "finished"
        return reply, candidate, call.name == "finish"

    # ---- strategies ------------------------------------------------------------------------------

    async def run(self, task: KernelBenchTask, messages: list[dict[str, Any]] | None = None) -> AgentResult:
        """Run the strategy on ``task``, opening with ``messages`` (default: ``prompts.initial_messages``).

        A model API or service failure ends the task, keeping what was done: the runner scores it, while
        an RL rollout reads ``failure`` (an outage must fail the rollout, not score as a bad kernel).
        """
        opts = self.options
        start = time.monotonic()
        error = None
        try:
            if opts.strategy == "tree" and opts.feedback != "none":
                await self._tree(task, messages)
            else:
                await self._best_of_n(task, messages)
        except Exception as exc:
            self.failure = exc
            error = f"{type(exc).__name__}: {exc}"
        self.turns.sort(key=lambda t: t.index)
        best = pick_final(self.candidates)
        usage = TokenUsage()
        for turn in self.turns:
            usage = usage + turn.usage
        if best is None and error is None:
            error = "the model produced no kernel"
        return AgentResult(
            payload=best.source if best else None,
            best=best,
            candidates=sorted(self.candidates, key=lambda c: (c.turn, c.file)),
            turns=self.turns,
            usage=usage,
            latency_s=time.monotonic() - start,
            stop_reasons=self.stop_reasons,
            error=error,
        )

    def _messages(self, task: KernelBenchTask) -> list[dict[str, Any]]:
        opts = self.options
        return prompts.initial_messages(
            task,
            opts.backend,
            opts.max_turns,
            use_tools=opts.feedback != "none",
            source_mode=opts.prompt_source,
            profile=opts.feedback == "profile",
        )

    async def _best_of_n(self, task: KernelBenchTask, opening: list[dict[str, Any]] | None = None) -> None:
        messages = opening or self._messages(task)
        if self.options.samples == 1:
            await self.trajectory(messages, self.options.max_turns, 0)
            return
        async with anyio.create_task_group() as tg:
            for sample in range(self.options.samples):
                tg.start_soon(self.trajectory, messages, self.options.max_turns, sample)

    async def _tree(self, task: KernelBenchTask, opening: list[dict[str, Any]] | None = None) -> None:
        opts = self.options
        base = opening or self._messages(task)
        n = opts.samples
        beam_width = max(1, math.ceil(n / 2))
        pool: list[Candidate] = []

        async def grow(messages: list[dict[str, Any]], sample: int) -> None:
            pool.extend(await self.trajectory(messages, 1, sample))

        for phase in range(opts.max_turns):
            async with anyio.create_task_group() as tg:
                if phase == 0 or not pool:
                    for sample in range(n):
                        tg.start_soon(grow, base, sample)
                else:
                    beam = sorted(pool, key=lambda c: c.rank(), reverse=True)[:beam_width]
                    for sample in range(n):
                        parent = beam[sample % len(beam)]
                        tg.start_soon(grow, self._refine_messages(base, parent), sample)
            if opts.feedback == "until_correct" and any(c.correct for c in pool):
                self.stop_reasons.append(f"tree: correct at phase {phase}")
                return
        self.stop_reasons.append("tree: max phases")

    @staticmethod
    def _refine_messages(base: list[dict[str, Any]], parent: Candidate) -> list[dict[str, Any]]:
        """A fresh conversation: the task, the parent kernel as the model's answer, and its evaluation."""
        result = parent.result or {"outcome": "unknown_error", "message": "not evaluated"}
        return [
            *base,
            {"role": "assistant", "content": f"```python\n{parent.source.rstrip()}\n```"},
            {"role": "user", "content": prompts.retry_prompt(result)},
        ]
