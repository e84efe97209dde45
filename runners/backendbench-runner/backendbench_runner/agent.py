"""The multi-turn loop: ask for ``<op>_kernel_impl``, evaluate it on the service, feed failures back.

Turn n's kernel is saved as ``kernels/<op>/turn_<n>.py`` (upstream's ``kernel_dir`` layout, one folder
per op). With ``--feedback until_correct`` the loop stops at the first correct kernel or after
``--max-turns``; with ``--feedback none`` the model answers once. The last kernel is the payload.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark_runner.llm import ChatClient, LLMConfig
from benchmark_runner.schemas import GenerationResult, GenerationStatus, Task, TokenUsage, Turn

from .prompts import feedback_message, initial_messages

if TYPE_CHECKING:
    from .benchmark import BackendBenchRunner

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(content: str | None, function: str) -> str | None:
    """The fenced block that defines ``function`` (else the last fenced block, else the raw text if it does)."""
    if not content:
        return None
    blocks = _CODE_BLOCK.findall(content)
    for block in reversed(blocks):
        if f"def {function}" in block:
            return str(block)
    if blocks:
        return str(blocks[-1])
    return content if f"def {function}" in content else None


def kernel_dir(log_dir: Path, config: LLMConfig) -> Path:
    """Where kernels go: ``--kernel-dir`` if given, else ``<task log dir>/kernels``."""
    root = config.extra.get("kernel_dir")
    return Path(root) if root else log_dir / "kernels"


def save_kernel(runner: Any, task: Task, log_dir: Path, turn: int, source: str, config: LLMConfig) -> Path:
    op = getattr(task, "op", task.question)
    path = kernel_dir(log_dir, config) / op / f"turn_{turn}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


async def run_agent(
    runner: BackendBenchRunner, task: Task, model: str, config: LLMConfig, log_dir: Path
) -> GenerationResult:
    op: str = task.op  # type: ignore[attr-defined]
    suite: str = task.suite  # type: ignore[attr-defined]
    function = op.replace(".", "__") + "_kernel_impl"
    feedback_mode = config.extra.get("feedback", "until_correct")
    max_turns = config.max_turns if feedback_mode != "none" else 1
    messages = initial_messages(op, suite)
    turns: list[Turn] = []
    usage = TokenUsage()
    source: str | None = None
    history: list[dict[str, Any]] = []
    started = time.perf_counter()
    error: str | None = None
    async with ChatClient(config) as client:
        for n in range(max_turns):
            answer = await client.chat(messages)
            usage = usage + answer.usage
            turn = Turn(
                index=n,
                messages=list(messages),
                response=answer.content,
                usage=answer.usage,
                latency_s=answer.latency_s,
            )
            turns.append(turn)
            messages.append(answer.assistant_message())
            code = extract_code(answer.content, function)
            if code is None:
                error = f"turn {n}: the answer has no Python code defining {function}"
                messages.append(
                    {
                        "role": "user",
                        "content": f"Your answer contained no Python code block defining `{function}`. Answer with one ```python block.",
                    }
                )
                continue
            source, error = code, None
            save_kernel(runner, task, log_dir, n, code, config)
            if max_turns == 1 or runner.service is None:
                break
            verdict = await runner.evaluate_source(task, code)
            history.append(
                {
                    "turn": n,
                    "outcome": verdict.get("outcome"),
                    "correctness": verdict.get("correctness"),
                    "performance": verdict.get("performance"),
                }
            )
            if verdict.get("correctness") == 1.0:
                break
            messages.append({"role": "user", "content": feedback_message(verdict, function)})
    return GenerationResult(
        task_id=task.id,
        model=model,
        payload=source,
        payload_type="code",
        status=GenerationStatus.OK if source is not None else GenerationStatus.ERROR,
        turns=turns,
        usage=usage,
        latency_s=time.perf_counter() - started,
        error=None if source is not None else (error or "no kernel produced"),
        metadata={"op": op, "suite": suite, "feedback": feedback_mode, "turn_verdicts": history},
    )
