"""The smoke suite end to end: CLI -> runner -> real HTTP kernel service -> sandboxed worker, scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from backendbench_runner.baselines import aten_source, reference_source
from backendbench_runner.benchmark import BackendBenchRunner
from backendbench_runner.cli import cli
from click.testing import CliRunner
from kernel_service.backendbench.evaluator import evaluate_request
from kernel_service.backendbench.schemas import BackendBenchEvalRequest, BackendBenchEvalResponse

from benchmark_runner.artifacts import RunArtifacts
from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import EvalStatus
from benchmark_runner.service import BenchmarkService, make_app
from benchmark_runner.service.server import start_server
from benchmark_runner.testing.fake_llm import FakeLLMServer

WRONG_RELU = "```python\nimport torch\ndef relu_kernel_impl(x):\n    return x.abs()\n```"
CRASH_MUL = "```python\ndef mul_kernel_impl(a, b):\n    raise ValueError('no mul today')\n```"


def fenced(source: str) -> str:
    return f"Here is the kernel.\n```python\n{source}```\n"


def script() -> dict[str, list[dict[str, Any]]]:
    """Per-op answers: relu wrong then right, add right at once, mul crashes, sum calls the op, mm right,
    softmax wrong on bf16 only (every turn)."""
    bf16_wrong_softmax = reference_source("softmax") + (
        "\n_right = softmax_kernel_impl\n\n\ndef softmax_kernel_impl(x, dim, dtype=None):\n"
        "    if x.dtype == torch.bfloat16:\n        return x.clone()\n    return _right(x, dim, dtype)\n"
    )
    return {
        "task smoke/relu:": [{"content": WRONG_RELU}, {"content": fenced(reference_source("relu"))}],
        "task smoke/add:": [{"content": fenced(reference_source("add"))}],
        "task smoke/mul:": [{"content": CRASH_MUL}],
        "task smoke/sum:": [{"content": fenced(aten_source("sum"))}],
        "task smoke/mm:": [{"content": fenced(reference_source("mm"))}],
        "task smoke/softmax:": [{"content": fenced(bf16_wrong_softmax)}],
    }


def test_smoke_suite_multi_turn_through_the_cli(backendbench_service_url: str, tmp_path: Path) -> None:
    """``backendbench-runner run`` with a scripted model: every verdict, the feedback, the files, the report."""
    runs = tmp_path / "runs"
    with FakeLLMServer(script()) as fake:
        args = ["run", "--model", "fake/model", "--base-url", fake.url, "--run-id", "t", "--max-turns", "3"]
        args += ["--weights", "correctness=1,overall=1", "--service-url", backendbench_service_url]
        result = CliRunner().invoke(cli, [*args, "--output-dir", str(runs)])
        assert result.exit_code == 0, result.output
        relu_requests = [r for r in fake.requests if "task smoke/relu:" in json.dumps(r["messages"])]

    artifacts = RunArtifacts(runs / "t")
    evals = {t.split("/")[1]: e for t, e in artifacts.read_evaluations().items()}
    gens = {t.split("/")[1]: g for t, g in artifacts.read_generations().items()}
    outcome = {op: (e.data.outcome, e.data.details["correctness"]) for op, e in evals.items()}
    assert outcome == {
        "add": ("correct", 1.0),
        "mul": ("incorrect", 0.0),
        "relu": ("correct", 1.0),
        "sum": ("calls_original_op", 0.0),
        "mm": ("correct", 1.0),
        "softmax": ("incorrect", 0.0),
    }
    # relu: turn 0 wrong, the feedback went back to the model, turn 1 right -> 2 kernels under the run
    relu_dir = runs / "t" / "kernels" / "relu"
    assert sorted(p.name for p in relu_dir.iterdir()) == ["turn_0.py", "turn_1.py"]
    assert "x.abs()" in (relu_dir / "turn_0.py").read_text()
    assert "torch.where" in (relu_dir / "turn_1.py").read_text()
    assert len(relu_requests) == 2 and len(gens["relu"].turns) == 2
    relu_feedback = relu_requests[1]["messages"][-1]["content"]
    assert relu_feedback == gens["relu"].turns[1].messages[-1]["content"]
    # the failing inputs are listed with their shapes, dtypes and max error; the correct ones are not
    failing = [line for line in relu_feedback.splitlines() if line.startswith("- #")]
    assert "incorrect" in relu_feedback and "Failing inputs:" in relu_feedback and failing
    assert all("max abs error" in line and "T([" in line for line in failing)
    assert {"f32", "bf16"} <= {d for line in failing for d in ("f32", "bf16") if d in line}
    assert [v["outcome"] for v in gens["relu"].metadata["turn_verdicts"]] == ["incorrect", "correct"]
    # add: right at once -> one turn, no feedback message
    assert len(gens["add"].turns) == 1 and sorted(p.name for p in (runs / "t/kernels/add").iterdir()) == [
        "turn_0.py"
    ]
    # crashing / cheating / dtype-wrong kernels used every turn (3) and the feedback named the reason
    assert len(gens["mul"].turns) == 3
    assert "ValueError: no mul today" in gens["mul"].turns[1].messages[-1]["content"]
    assert (
        "(line 2: raise ValueError" in gens["mul"].turns[1].messages[-1]["content"]
    )  # the kernel's own frame
    assert "Your kernel calls aten.sum" in gens["sum"].turns[1].messages[-1]["content"]
    softmax_inputs = evals["softmax"].data.details["inputs"]
    assert {i["dtype"] for i in softmax_inputs if not i["correct"]} == {"bfloat16"}
    assert {i["dtype"] for i in softmax_inputs if i["correct"]} == {"float32"}
    assert len(gens["softmax"].turns) == 3
    # scores: overall = correctness x performance, task score = correctness + overall (--weights)
    score = artifacts.read_score()
    assert score is not None
    for task in score.per_task:
        d = task.details
        assert d["overall"] == pytest.approx(d["correctness"] * d["performance"])
        assert task.score == pytest.approx(d["correctness"] + d["overall"])
        if d["correctness"] == 0.0:
            assert d["performance"] == 1.0 and task.score == 0.0
        else:
            assert d["performance"] > 0 and task.score > 1.0
    assert score.metrics["correctness"] == pytest.approx(0.5)
    assert score.groups["smoke"]["n"] == 6.0

    report = CliRunner().invoke(cli, ["report", "--run-id", "t", "--output-dir", str(runs)])
    assert report.exit_code == 0, report.output
    assert "| smoke | 6 | 50.0% |" in report.output
    assert "| smoke/sum | calls_original_op |" in report.output
    assert "| smoke/relu | correct | 5/5 |" in report.output and "| 2 |" in report.output


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


class BareVerdictService(BenchmarkService):
    """A service answering the bare BackendBenchEvalResponse (evaluator in-process), not EvalResultData."""

    evaluate_request_model = BackendBenchEvalRequest
    evaluate_response_model = BackendBenchEvalResponse

    async def evaluate(self, request: BackendBenchEvalRequest) -> BackendBenchEvalResponse:
        return evaluate_request(request)


@pytest.mark.anyio
async def test_runner_reads_bare_verdicts_too(tmp_path: Path) -> None:
    with start_server(make_app(BareVerdictService())) as server:
        async with ServiceClient(server.url, retries=0) as service:
            runner = BackendBenchRunner(service=service)
            runner.configure({"ops": "relu"})
            task = runner.load_tasks(None)[0]
            gen = await BackendBenchRunner.OFFLINE_MODELS["reference"](
                runner, task, LLMConfig(model="reference"), tmp_path
            )
            ev = await runner.evaluate(task, gen)
            assert ev.data.status == EvalStatus.CORRECT and ev.data.details["correctness"] == 1.0
            assert ev.data.score == pytest.approx(ev.data.details["overall"])
            verdict = await runner.evaluate_source(task, "def relu_kernel_impl(x):\n    return x\n")
            assert verdict["outcome"] == "incorrect" and "Failing inputs:" in verdict["feedback"]
