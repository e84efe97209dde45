"""KernelBenchRunner end to end (generate -> evaluate -> score) against the real kernel service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kernelbench_runner.benchmark import KernelBenchOptions, KernelBenchRunner, response_to_eval_data
from kernelbench_runner.problems import KernelBenchTask

from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import EvalResult, EvalResultData, EvalStatus, GenerationResult
from benchmark_runner.testing.fake_llm import FakeLLMServer

pytestmark = pytest.mark.anyio

RIGHT = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n"
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def runner_with(url: str, **options: Any) -> KernelBenchRunner:
    return KernelBenchRunner(service=ServiceClient(url), options=options)


def test_load_tasks_default_and_level_filter(sample_file: Path) -> None:
    runner = KernelBenchRunner()
    assert len(runner.load_tasks(None)) == 11
    runner.configure({"level": (2,), "backend": "torch"})
    tasks = runner.load_tasks(sample_file)
    assert tasks and all(isinstance(t, KernelBenchTask) and t.level == 2 for t in tasks)


def test_options_are_validated_with_the_option_name() -> None:
    import click

    with pytest.raises(click.BadParameter, match="feedback"):
        KernelBenchOptions.from_extra({"feedback": "sometimes"})
    opts = KernelBenchOptions.from_extra(
        {"level": 1, "tolerance": 0.01, "price_in": None, "other_runner_key": 1}
    )
    assert opts.level == [1] and opts.eval_options() == {"tolerance": 0.01} and opts.price_in is None
    assert KernelBenchOptions.from_extra({"tf32": "off"}).eval_options() == {"tf32": "off"}
    with pytest.raises(click.BadParameter, match="tf32"):
        KernelBenchOptions.from_extra({"tf32": "maybe"})


async def test_reference_baseline_full_loop(kernel_service_url: str, tmp_path: Path) -> None:
    runner = runner_with(kernel_service_url, backend="torch")
    tasks = runner.load_tasks(None)[:3]
    evals = []
    for task in tasks:
        gen = await runner.OFFLINE_MODELS["reference"](
            runner, task, LLMConfig(model="reference"), tmp_path / task.id
        )
        assert (tmp_path / task.id / "kernels" / "final.py").read_text() == gen.payload
        evals.append(await runner.evaluate(task, gen))
    assert [e.data.outcome for e in evals] == ["correct"] * 3
    score = await runner.score(evals, "reference")
    assert score.metrics["correct_rate"] == 1.0 and score.metrics["fast_0"] == 1.0
    assert 0.3 < score.metrics["geomean_speedup"] < 3.0  # the same code on a shared CPU: near 1
    assert score.groups["level1"]["n"] == 3
    assert score.details["tolerance"] == ["atol=0.0001 rtol=0.0001"]  # upstream's fp32 default
    assert score.details["tf32"] == ["cudnn on, matmul off"]  # PyTorch's defaults, as upstream
    await runner.service.aclose()  # type: ignore[union-attr]


@pytest.mark.slow  # inductor compiles C++ on the CPU: ~20 s
async def test_torch_compile_baseline_is_correct(kernel_service_url: str, tmp_path: Path) -> None:
    runner = runner_with(kernel_service_url)
    task = next(t for t in runner.load_tasks(None) if t.id == "L2_1_Matmul_Bias_ReLU")
    gen = await runner.OFFLINE_MODELS["torch-compile"](
        runner, task, LLMConfig(model="torch-compile"), tmp_path
    )
    assert "torch.compile" in str(gen.payload)
    result = await runner.evaluate(task, gen)
    assert result.data.outcome == "correct", result.data.details.get("traceback")
    await runner.service.aclose()  # type: ignore[union-attr]


async def test_llm_generation_through_the_runner(kernel_service_url: str, tmp_path: Path) -> None:
    runner = runner_with(kernel_service_url)
    task = next(t for t in runner.load_tasks(None) if t.id == "L1_2_ReLU")
    script = [
        {"tool_calls": [{"name": "run_kernel", "arguments": {"python": WRONG}}]},
        {"tool_calls": [{"name": "run_kernel", "arguments": {"python": RIGHT}}]},
    ]
    with FakeLLMServer(script) as fake:
        config = LLMConfig(
            model="fake", base_url=fake.url, max_turns=3, extra={"backend": "torch", "price_in": 1.0}
        )
        gen = await runner.generate(task, "fake", config, tmp_path)
    assert gen.payload == RIGHT and len(gen.turns) == 2 and gen.metadata["backend"] == "torch"
    assert gen.metadata["best"]["outcome"] == "correct"
    assert [c["outcome"] for c in gen.metadata["candidates"]] == ["incorrect", "correct"]
    assert gen.usage.prompt_tokens > 0 and (tmp_path / "kernels" / "final.py").read_text() == RIGHT
    request = runner.build_evaluate_request(task, gen)
    assert request["reference"] == task.reference_code and request["backend"] == "torch"
    result = await runner.evaluate(task, gen)
    assert result.data.status == EvalStatus.CORRECT and result.data.details["usage"]["prompt_tokens"] > 0
    await runner.service.aclose()  # type: ignore[union-attr]


async def test_no_kernel_is_scored_without_the_service() -> None:
    runner = KernelBenchRunner()  # no service: a missing kernel must not need one
    task = runner.load_tasks(None)[0]
    gen = GenerationResult(task_id=task.id, model="m", payload=None, error="LLMError: boom")
    result = await runner.evaluate(task, gen)
    assert result.data.status == EvalStatus.SKIPPED and result.data.outcome == "no_kernel"
    score = await runner.score([result], "m")
    assert score.metrics["mean_reward"] == -6.0 and score.metrics["correct_rate"] == 0.0


async def test_score_matches_hand_computed_values() -> None:
    runner = KernelBenchRunner(options={"price_in": 2.0, "price_out": 10.0})
    tasks = {t.id: t for t in runner.load_tasks(None)}
    answers = {
        "L1_1_Elementwise_add": {"outcome": "correct", "reward": 1.0, "speedup": 2.0},
        "L1_2_ReLU": {"outcome": "correct", "reward": -0.5, "speedup": 0.5},
        "L2_1_Matmul_Bias_ReLU": {"outcome": "correct", "reward": 0.2, "speedup": 1.2},
        "L2_2_Conv2d_ReLU_BiasAdd": {"outcome": "incorrect", "reward": -2.0, "speedup": None},
        "L2_3_Matmul_Scale_Softmax": {"outcome": "compilation_failure", "reward": -5.0},
    }
    evals = []
    for task_id, body in answers.items():
        gen = GenerationResult(task_id=task_id, model="m", payload="x")
        gen.usage.prompt_tokens, gen.usage.completion_tokens = 1000, 200
        evals.append(
            EvalResult(task_id=task_id, model="m", data=response_to_eval_data(body, tasks[task_id], gen))
        )  # type: ignore[arg-type]
    score = await runner.score(evals, "m")
    m = score.metrics
    assert (m["fast_0"], m["fast_1"], m["fast_1.5"], m["fast_2"]) == pytest.approx((0.6, 0.4, 0.2, 0.0))
    assert m["geomean_speedup"] == pytest.approx(1.2 ** (1 / 3))
    assert m["mean_reward"] == pytest.approx(-1.26) and m["correct_rate"] == pytest.approx(0.6)
    assert m["cost_usd"] == pytest.approx(0.02)
    assert score.groups["level2"]["geomean_speedup"] == pytest.approx(1.2)
    assert score.details["outcomes"] == {"correct": 3, "incorrect": 1, "compilation_failure": 1}
    # A generic service answer (EvalResultData) is read too.
    generic = response_to_eval_data(
        EvalResultData(
            status=EvalStatus.CORRECT, score=0.5, outcome="correct", details={"speedup": 1.5}
        ).model_dump(),
        tasks["L1_2_ReLU"],
        GenerationResult(task_id="L1_2_ReLU", model="m"),
    )
    assert (
        generic.status == EvalStatus.CORRECT
        and generic.details["speedup"] == 1.5
        and generic.details["level"] == 1
    )


async def test_tasks_from_the_service(kernel_service_url: str) -> None:
    """``--dataset-name level1``: tasks listed by a real kernel service serving a JSONL source (the
    session's service, which hosts the upstream-problem fixtures)."""
    runner = KernelBenchRunner(service=ServiceClient(kernel_service_url))
    tasks = await runner.load_tasks_from_service("level1")
    assert [t.id for t in tasks] == ["L1_19_ReLU", "L1_23_Softmax"]
    assert all(isinstance(t, KernelBenchTask) and "def get_inputs" in t.reference_code for t in tasks)
    runner.configure({"level": [3]})
    assert [t.id for t in await runner.load_tasks_from_service("all")] == ["L3_1_MLP"]
    await runner.service.aclose()  # type: ignore[union-attr]
