"""The multi-turn agent against the fake OpenAI-compatible server and the real kernel service (CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kernelbench_runner.agent import AgentOptions, KernelAgent
from kernelbench_runner.problems import KernelBenchTask, load_problems

from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import ChatClient, LLMConfig
from benchmark_runner.testing.fake_llm import FakeLLMServer

pytestmark = pytest.mark.anyio

BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x) return x\n"  # syntax error
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
RIGHT = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n"


def run_kernel(python: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_kernel", "arguments": {"python": python}}]}


@pytest.fixture(scope="module")
def relu(sample_file: Path) -> KernelBenchTask:
    (task,) = [t for t in load_problems(sample_file) if t.id == "L1_2_ReLU"]
    return task


class Evaluator:
    """The agent's ``evaluate_fn`` bound to the real service, counting calls."""

    def __init__(self, url: str, task: KernelBenchTask) -> None:
        self.url, self.task, self.calls = url, task, 0

    async def __call__(self, solution: str, backend: str) -> dict[str, Any]:
        self.calls += 1
        async with ServiceClient(self.url) as client:
            body = {
                "reference": self.task.reference_code,
                "solution": solution,
                "backend": backend,
                "options": {"perf_trials": 10},
            }
            result = await client.post("/v1/evaluate", body)
        assert isinstance(result, dict)
        return result


async def run_agent(
    script: Any, task: KernelBenchTask, url: str, tmp_path: Path, **options: Any
) -> tuple[Any, FakeLLMServer, Evaluator]:
    evaluator = Evaluator(url, task)
    with FakeLLMServer(script) as fake:
        async with ChatClient(LLMConfig(model="fake", base_url=fake.url)) as client:
            agent = KernelAgent(client, evaluator, AgentOptions(backend="torch", **options), tmp_path)
            result = await agent.run(task)
    return result, fake, evaluator


async def test_compile_error_then_wrong_then_correct_stops_early(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [run_kernel(BROKEN), run_kernel(WRONG), run_kernel(RIGHT), run_kernel(WRONG)]
    result, fake, evaluator = await run_agent(script, relu, kernel_service_url, tmp_path, max_turns=5)
    assert [c.result["outcome"] for c in result.candidates] == ["compilation_failure", "incorrect", "correct"]
    assert (
        len(fake.requests) == 3 and evaluator.calls == 3
    )  # until_correct: the 4th answer is never asked for
    assert result.stop_reasons == ["correct"] and result.error is None
    assert result.payload == RIGHT and result.best is not None and result.best.turn == 2
    # The model saw the compiler's complaint, then the numeric mismatch.
    second = fake.requests[1]["messages"]
    assert second[-1]["role"] == "tool" and "compilation_failure" in second[-1]["content"]
    assert "SyntaxError" in second[-1]["content"]
    assert "incorrect" in fake.requests[2]["messages"][-1]["content"]
    assert {t["function"]["name"] for t in fake.requests[0]["tools"]} == {"run_kernel", "finish"}
    # Every turn recorded and written.
    assert [t.index for t in result.turns] == [0, 1, 2]
    assert result.turns[1].tool_calls[0].result["outcome"] == "incorrect"
    assert (tmp_path / "kernels" / "turn_0.py").read_text() == BROKEN
    feedback = json.loads((tmp_path / "kernels" / "feedback_2.json").read_text())
    assert feedback["result"]["outcome"] == "correct" and feedback["feedback"]["speedup"] > 0
    assert result.usage.prompt_tokens == fake.usage_total.prompt_tokens


async def test_max_turns_is_respected(relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path) -> None:
    result, fake, _ = await run_agent([run_kernel(BROKEN)], relu, kernel_service_url, tmp_path, max_turns=2)
    assert len(fake.requests) == 2 and len(result.turns) == 2
    assert result.stop_reasons == ["max_turns"]
    assert result.best is not None and result.best.result["outcome"] == "compilation_failure"  # the last one
    assert result.payload == BROKEN


async def test_always_keeps_refining_and_keeps_the_best(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [run_kernel(RIGHT), run_kernel(WRONG), {"tool_calls": [{"name": "finish", "arguments": {}}]}]
    result, fake, evaluator = await run_agent(
        script, relu, kernel_service_url, tmp_path, max_turns=5, feedback="always"
    )
    assert len(fake.requests) == 3 and evaluator.calls == 2
    assert result.stop_reasons == ["finish"]
    assert result.payload == RIGHT  # the correct kernel of turn 0, not the later wrong one


async def test_plain_text_model_is_accepted(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [
        {"content": "Here is a try:\n```python\n" + WRONG + "```"},
        {"content": "Sorry, fixed:\n```python\n" + RIGHT + "```\nDone."},
    ]
    result, fake, _ = await run_agent(script, relu, kernel_service_url, tmp_path, max_turns=4)
    assert len(fake.requests) == 2 and result.payload == RIGHT
    retry = fake.requests[1]["messages"][-1]
    assert retry["role"] == "user" and "incorrect" in retry["content"] and "```python" in retry["content"]


async def test_feedback_none_is_single_shot_without_tools(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [{"content": "```python\n" + RIGHT + "```"}, {"content": "never asked"}]
    result, fake, evaluator = await run_agent(
        script, relu, kernel_service_url, tmp_path, max_turns=5, feedback="none"
    )
    assert len(fake.requests) == 1 and "tools" not in fake.requests[0] and evaluator.calls == 0
    assert result.payload == RIGHT and result.best is not None and result.best.result is None
    assert result.stop_reasons == ["single_shot"]


async def test_bad_tool_calls_get_an_error_and_the_loop_goes_on(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [
        {"tool_calls": [{"name": "run_kernel", "arguments": "{not json"}]},
        {"tool_calls": [{"name": "compile_it", "arguments": {"python": RIGHT}}]},
        run_kernel(RIGHT),
    ]
    result, fake, evaluator = await run_agent(script, relu, kernel_service_url, tmp_path, max_turns=5)
    assert evaluator.calls == 1 and result.payload == RIGHT
    assert "not valid JSON" in fake.requests[1]["messages"][-1]["content"]
    assert "unknown tool" in fake.requests[2]["messages"][-1]["content"]


async def test_best_of_n_runs_parallel_samples(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [run_kernel(WRONG), run_kernel(RIGHT)]  # whichever sample asks second gets the right kernel
    result, fake, _ = await run_agent(script, relu, kernel_service_url, tmp_path, max_turns=1, samples=2)
    assert len(fake.requests) == 2 and {c.sample for c in result.candidates} == {0, 1}
    assert result.payload == RIGHT


async def test_tree_refines_the_best_kernels(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    script = [run_kernel(BROKEN), run_kernel(WRONG), run_kernel(RIGHT)]
    result, fake, _ = await run_agent(
        script,
        relu,
        kernel_service_url,
        tmp_path,
        max_turns=3,
        samples=2,
        strategy="tree",
        feedback="until_correct",
    )
    # phase 0: two samples (broken, wrong); phase 1: both refine the best one (wrong: -2 beats broken: -5)
    assert len(fake.requests) == 4
    refine = fake.requests[2]["messages"]
    assert refine[-2]["role"] == "assistant" and "return x\n" in refine[-2]["content"]
    assert "incorrect" in refine[-1]["content"]
    assert result.payload == RIGHT and result.stop_reasons[-1] == "tree: correct at phase 1"


async def test_records_mirror_the_feedback_files_and_a_failure_is_kept(
    relu: KernelBenchTask, kernel_service_url: str, tmp_path: Path
) -> None:
    """What a front end without files (the RL environment) reads: one record per kernel, equal to its
    ``feedback_<n>.json``, and the exception that ended the run (here the model API refusing)."""
    script = [run_kernel(BROKEN), {"status": 400, "error": "context too long"}]
    evaluator = Evaluator(kernel_service_url, relu)
    with FakeLLMServer(script) as fake:
        async with ChatClient(LLMConfig(model="fake", base_url=fake.url)) as client:
            agent = KernelAgent(client, evaluator, AgentOptions(backend="torch", max_turns=3), tmp_path)
            result = await agent.run(relu)
    assert agent.records == [json.loads((tmp_path / "kernels" / "feedback_0.json").read_text())]
    assert agent.records[0]["result"]["outcome"] == "compilation_failure"
    assert type(agent.failure).__name__ == "LLMError" and "context too long" in str(agent.failure)
    assert result.error is not None and "context too long" in result.error and result.payload == BROKEN
