"""The smoke suite end to end: runner -> real HTTP service -> sandboxed worker, with a scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from backendbench_runner.baselines import aten_source, reference_source
from backendbench_runner.benchmark import BackendBenchRunner

from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import LLMConfig
from benchmark_runner.testing.fake_llm import FakeLLMServer

WRONG_RELU = "```python\nimport torch\ndef relu_kernel_impl(x):\n    return x.abs()\n```"
CRASH_MUL = "```python\ndef mul_kernel_impl(a, b):\n    raise ValueError('no mul today')\n```"


def fenced(source: str) -> str:
    return f"Here is the kernel.\n```python\n{source}```\n"


def script() -> dict[str, list[dict[str, Any]]]:
    """Per-op answers: relu wrong then right, add right at once, mul crashes, sum calls the op, mm right,
    softmax wrong on bf16 only (every turn)."""
    bf16_wrong_softmax = reference_source("softmax").replace(
        "def softmax_kernel_impl(x, dim, dtype=None):\n",
        "def softmax_kernel_impl(x, dim, dtype=None):\n    if x.dtype == torch.bfloat16:\n        return x.clone()\n",
    )
    return {
        "task smoke/relu:": [{"content": WRONG_RELU}, {"content": fenced(reference_source("relu"))}],
        "task smoke/add:": [{"content": fenced(reference_source("add"))}],
        "task smoke/mul:": [{"content": CRASH_MUL}],
        "task smoke/sum:": [{"content": fenced(aten_source("sum"))}],
        "task smoke/mm:": [{"content": fenced(reference_source("mm"))}],
        "task smoke/softmax:": [{"content": fenced(bf16_wrong_softmax)}],
    }


@pytest.mark.anyio
async def test_smoke_suite_multi_turn_against_the_real_service(
    backendbench_service_url: str, tmp_path: Path
) -> None:
    with FakeLLMServer(script()) as fake:
        async with ServiceClient(backendbench_service_url, retries=0) as service:
            runner = BackendBenchRunner(service=service)
            runner.configure({"suite": "smoke", "weights": "correctness=1,overall=1"})
            tasks = runner.load_tasks(None)
            assert [t.op for t in tasks] == ["add", "mul", "relu", "sum", "mm", "softmax"]  # type: ignore[attr-defined]
            config = LLMConfig(
                model="fake/model", base_url=fake.url, max_turns=3, extra={"feedback": "until_correct"}
            )
            evals = {}
            gens = {}
            for task in tasks:
                gen = await runner.generate(task, "fake/model", config, tmp_path / task.id.replace("/", "_"))
                gens[task.op] = gen  # type: ignore[attr-defined]
                evals[task.op] = await runner.evaluate(task, gen)  # type: ignore[attr-defined]
            result = await runner.score(list(evals.values()), "fake/model")

    outcome = {op: (e.data.outcome, e.data.details["correctness"]) for op, e in evals.items()}
    assert outcome == {
        "add": ("correct", 1.0),
        "mul": ("incorrect", 0.0),
        "relu": ("correct", 1.0),
        "sum": ("calls_original_op", 0.0),
        "mm": ("correct", 1.0),
        "softmax": ("incorrect", 0.0),
    }
    # relu: turn 0 wrong, the feedback went back to the model, turn 1 right -> 2 kernels on disk
    relu_dir = tmp_path / "smoke_relu" / "kernels" / "relu"
    assert sorted(p.name for p in relu_dir.iterdir()) == ["turn_0.py", "turn_1.py"]
    assert "x.abs()" in (relu_dir / "turn_0.py").read_text()
    relu_feedback = gens["relu"].turns[1].messages[-1]["content"]
    assert (
        "incorrect" in relu_feedback
        and "Failing inputs:" in relu_feedback
        and "max abs error" in relu_feedback
    )
    # crashing / cheating / dtype-wrong kernels used every turn (3) and the feedback named the reason
    assert (
        len(gens["mul"].turns) == 3
        and "ValueError: no mul today" in gens["mul"].turns[1].messages[-1]["content"]
    )
    assert "Your kernel calls aten.sum" in gens["sum"].turns[1].messages[-1]["content"]
    softmax_inputs = evals["softmax"].data.details["inputs"]
    assert {i["dtype"] for i in softmax_inputs if not i["correct"]} == {"bfloat16"}
    # scores: overall = correctness x performance, weighted sum correctness + overall
    for task in result.per_task:
        d = task.details
        assert d["overall"] == pytest.approx(d["correctness"] * d["performance"])
        assert task.score == pytest.approx(d["correctness"] + d["overall"])
        if d["correctness"] == 0.0:
            assert d["performance"] == 1.0 and task.score == 0.0
    assert result.metrics["correctness"] == pytest.approx(0.5)
    assert result.groups["smoke"]["n"] == 6.0


@pytest.mark.anyio
async def test_offline_models_through_the_service(backendbench_service_url: str, tmp_path: Path) -> None:
    async with ServiceClient(backendbench_service_url, retries=0) as service:
        runner = BackendBenchRunner(service=service)
        runner.configure({"suite": "smoke", "ops": "relu,softmax"})
        tasks = runner.load_tasks(None)
        config = LLMConfig(model="reference")
        for name, expected in (("reference", "correct"), ("aten", "calls_original_op")):
            model = BackendBenchRunner.OFFLINE_MODELS[name]
            for task in tasks:
                gen = await model(runner, task, config, tmp_path / name)
                ev = await runner.evaluate(task, gen)
                assert ev.data.outcome == expected, ev.data.details.get("feedback")
        listing = await service.get("/v1/datasets/backendbench-facto/tasks")
        assert {t["op"] for t in listing["tasks"]} >= {"add", "sigmoid", "amax"}


@pytest.mark.anyio
async def test_hanging_kernel_times_out_and_the_service_recovers(backendbench_service_url: str) -> None:
    async with ServiceClient(backendbench_service_url, retries=0) as service:
        runner = BackendBenchRunner(service=service)
        runner.configure({"suite": "smoke"})
        task = runner.load_tasks(None)[2].model_copy(update={"timeout": 3.0})
        hang = "import time\ndef relu_kernel_impl(x):\n    while True:\n        time.sleep(0.1)\n"
        verdict = await runner.evaluate_source(task, hang)
        assert verdict["outcome"] == "timeout" and verdict["correctness"] == 0.0
        verdict = await runner.evaluate_source(task, reference_source("relu"))
        assert verdict["outcome"] == "correct"
