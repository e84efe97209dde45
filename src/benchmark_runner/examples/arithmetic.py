"""Arithmetic questions with an exact-match service: the smallest complete benchmark.

``arithmetic-runner run --model oracle --run-id r1`` needs no API and no external service: the
runner starts :class:`ArithmeticService` in-process. With a real model,
``--model gpt-4o-mini --base-url https://api.openai.com/v1`` asks each question through the chat API.

Offline models: ``oracle`` (always right), ``wrong`` (always off by one), ``echo`` (repeats the
question, which holds no single answer, so it is marked incorrect).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from ..base import BenchmarkRunner, OfflineModel
from ..cli import make_cli
from ..llm import ChatClient, LLMConfig
from ..schemas import (
    EvalResultData,
    EvalStatus,
    EvaluateRequest,
    GenerationResult,
    LegacyEvaluateRequest,
    LegacyEvaluateResponse,
    Task,
    Turn,
)
from ..service import BenchmarkService

DATA_FILE = Path(__file__).parent / "data" / "arithmetic.jsonl"
SYSTEM_PROMPT = "Answer the arithmetic question with the number only."

_QUESTION = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)")
_NUMBER = re.compile(r"-?\d+")


class ArithmeticTask(Task):
    answer: int | None = None


def solve(question: str) -> int:
    """The exact answer of ``What is A op B?`` (op in + - *); ValueError for anything else."""
    m = _QUESTION.search(question)
    if not m:
        raise ValueError(f"not an arithmetic question: {question!r}")
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return a + b if op == "+" else a - b if op == "-" else a * b


def extract_answer(text: str) -> int | None:
    """The answer in a model's reply: its only integer, else ``None`` (ambiguous or missing)."""
    numbers = _NUMBER.findall(text.replace(",", ""))
    return int(numbers[0]) if len(numbers) == 1 else None


async def _oracle(runner: BenchmarkRunner, task: Task, cfg: LLMConfig, log_dir: Path) -> GenerationResult:
    return GenerationResult(task_id=task.id, model="oracle", payload=str(solve(task.question)))


async def _wrong(runner: BenchmarkRunner, task: Task, cfg: LLMConfig, log_dir: Path) -> GenerationResult:
    return GenerationResult(task_id=task.id, model="wrong", payload=str(solve(task.question) + 1))


async def _echo(runner: BenchmarkRunner, task: Task, cfg: LLMConfig, log_dir: Path) -> GenerationResult:
    return GenerationResult(task_id=task.id, model="echo", payload=task.question)


class ArithmeticService(BenchmarkService):
    """Exact match of the reply's single integer against the task's answer (or the solved question)."""

    name = "arithmetic"

    def __init__(self, data_file: Path = DATA_FILE) -> None:
        self.data_file = data_file

    def _verdict(self, expected: int, reply: str) -> EvalResultData:
        got = extract_answer(reply)
        ok = got == expected
        return EvalResultData(
            status=EvalStatus.CORRECT if ok else EvalStatus.INCORRECT,
            score=1.0 if ok else 0.0,
            outcome="correct" if ok else ("no_single_number" if got is None else "wrong_number"),
            details={"expected": expected, "got": got},
        )

    async def evaluate(self, request: EvaluateRequest) -> EvalResultData:
        answer = request.task.get("answer")
        expected = int(answer) if answer is not None else solve(str(request.task.get("question", "")))
        return self._verdict(expected, str(request.generation.payload))

    async def legacy_evaluate(self, request: LegacyEvaluateRequest) -> LegacyEvaluateResponse:
        data = self._verdict(solve(request.question), request.response)
        return LegacyEvaluateResponse(score=data.score, status=data.status)

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        if dataset != self.name:
            raise KeyError(dataset)
        lines = self.data_file.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


class ArithmeticRunner(BenchmarkRunner):
    NAME = "arithmetic"
    PAYLOAD_TYPE = "text"
    TASK_MODEL = ArithmeticTask
    GENERATION_VERSION_ENV = "ARITHMETIC_GENERATION_VERSION"
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {"oracle": _oracle, "wrong": _wrong, "echo": _echo}
    DEFAULT_DATASET_FILE: ClassVar[Path | None] = DATA_FILE

    _chat: ChatClient | None = None

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        path = dataset_file or DATA_FILE
        rows = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{i}: not valid JSON ({exc})") from exc
        return self.parse_tasks(rows, str(path))

    @classmethod
    def embedded_service(cls) -> BenchmarkService:
        return ArithmeticService()

    async def generate(
        self, task: Task, model: str, llm_config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        if self._chat is None:  # one client (one connection pool) for every task of the run
            self._chat = ChatClient(llm_config)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.question}]
        reply = await self._chat.chat(messages)
        text = (reply.content or "").strip()
        (log_dir / "reply.txt").write_text(text, encoding="utf-8")
        turn = Turn(index=0, messages=messages, response=text, usage=reply.usage, latency_s=reply.latency_s)
        return GenerationResult(
            task_id=task.id,
            model=model,
            payload=text,
            turns=[turn],
            usage=reply.usage,
            latency_s=reply.latency_s,
            metadata={"finish_reason": reply.finish_reason},
        )

    async def aclose(self) -> None:
        if self._chat is not None:
            await self._chat.aclose()
            self._chat = None


cli = make_cli(ArithmeticRunner, default_dataset_file=DATA_FILE)

if __name__ == "__main__":
    cli()
