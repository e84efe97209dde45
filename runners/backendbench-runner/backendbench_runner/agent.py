"""The multi-turn loop: ask for ``<op>_kernel_impl``, evaluate it on the service, feed failures back.

Turn n's kernel is saved as ``<run dir>/kernels/<op>/turn_<n>.py`` (upstream's ``kernel_dir``, one folder
per op; ``--kernel-dir`` moves the root). With ``--feedback until_correct`` the loop stops at the first
correct kernel or after ``--max-turns``; with ``--feedback none`` the model answers once. The last kernel
is the payload the run evaluates. With ``--feedback profile`` every one of ``--max-turns`` turns is
evaluated with ``options.profile`` (a correct kernel is optimised further, its feedback carrying a table
of its call's kernels and the op's: ``prompts.profile_text``), and the payload is the best correct
kernel (highest ``overall``; the last kernel when none was correct).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmark_runner.artifacts import LOGS_DIR
from benchmark_runner.llm import ChatClient, LLMConfig
from benchmark_runner.schemas import GenerationResult, GenerationStatus, TokenUsage, Turn

from .options import RunOptions
from .prompts import feedback_message, function_name, initial_messages

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)

#: ``evaluate_fn(source)`` -> the verdict's details (outcome, correctness, performance, feedback, inputs).
EvaluateFn = Callable[[str], Awaitable[dict[str, Any]]]


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


def kernel_root(log_dir: Path, options: RunOptions) -> Path:
    """``--kernel-dir`` if given, else ``<run dir>/kernels`` (``log_dir`` is ``<run dir>/logs/<task>``)."""
    if options.kernel_dir:
        return Path(options.kernel_dir)
    if log_dir.parent.name == LOGS_DIR:
        return log_dir.parent.parent / "kernels"
    return log_dir / "kernels"  # called outside a run (tests, notebooks)


def save_kernel(log_dir: Path, options: RunOptions, op: str, turn: int, source: str) -> Path:
    path = kernel_root(log_dir, options) / op / f"turn_{turn}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    return path


async def run_agent(
    op: str,
    suite: str,
    task_id: str,
    model: str,
    config: LLMConfig,
    options: RunOptions,
    log_dir: Path | None,
    evaluate_fn: EvaluateFn | None,
    chat: ChatClient | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> GenerationResult:
    """Ask ``model`` for a kernel, up to ``config.max_turns`` times while the verdict is not correct.

    ``chat`` (default: a client for ``config``) and ``messages`` (default: ``initial_messages``) let the
    RL environment run this same loop through its trainer's model proxy; with ``log_dir=None`` no kernel
    file is written.
    """
    if chat is None:
        async with ChatClient(config) as client:
            return await run_agent(
                op, suite, task_id, model, config, options, log_dir, evaluate_fn, client, messages
            )
    function = function_name(op)
    profile = options.feedback == "profile"
    max_turns = config.max_turns if options.feedback in ("until_correct", "profile") and evaluate_fn else 1
    messages = list(messages) if messages else initial_messages(op, suite, options.backend, profile)
    turns: list[Turn] = []
    usage = TokenUsage()
    source: str | None = None
    history: list[dict[str, Any]] = []
    started = time.perf_counter()
    error: str | None = None
    best: tuple[float, int, str] | None = None  # (overall, turn, source) of the best correct kernel
    for n in range(max_turns):
        answer = await chat.chat(messages)
        usage = usage + answer.usage
        turns.append(
            Turn(
                index=n,
                messages=list(messages),
                response=answer.content,
                usage=answer.usage,
                latency_s=answer.latency_s,
            )
        )
        messages.append(answer.assistant_message())
        code = extract_code(answer.content, function)
        if code is None:
            error = f"turn {n}: the answer has no Python code defining {function}"
            messages.append(
                {
                    "role": "user",
                    "content": f"Your answer contained no Python code block defining `{function}`. "
                    "Answer with one ```python block.",
                }
            )
            continue
        source, error = code, None
        path = save_kernel(log_dir, options, op, n, code) if log_dir is not None else None
        if max_turns == 1 or evaluate_fn is None:
            break
        verdict = await evaluate_fn(code)
        history.append(
            {
                "turn": n,
                "kernel": str(path) if path is not None else None,
                "outcome": verdict.get("outcome"),
                "correctness": verdict.get("correctness"),
                "performance": verdict.get("performance"),
                "overall": verdict.get("overall"),
            }
        )
        if verdict.get("correctness") == 1.0:
            overall = float(verdict.get("overall") or 0.0)
            if best is None or overall > best[0]:
                best = (overall, n, code)
            if not profile:
                break
        messages.append({"role": "user", "content": feedback_message(verdict, function)})
    if profile and best is not None:
        source, error = best[2], None
    return GenerationResult(
        task_id=task_id,
        model=model,
        payload=source,
        payload_type="code",
        status=GenerationStatus.OK if source is not None else GenerationStatus.ERROR,
        turns=turns,
        usage=usage,
        latency_s=time.perf_counter() - started,
        error=None if source is not None else (error or "no kernel produced"),
        metadata={
            "op": op,
            "suite": suite,
            "feedback": options.feedback,
            "backend": options.backend,
            "turn_verdicts": history,
            **({"best_turn": best[1] if best is not None else None} if profile else {}),
        },
    )
