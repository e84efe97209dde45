"""Runner-side pieces that need no service: weights, scores, code extraction, task loading."""

from __future__ import annotations

import pytest
from benchmark_runner.schemas import EvalResult, EvalResultData, EvalStatus

from backendbench_runner.agent import extract_code
from backendbench_runner.benchmark import BackendBenchRunner
from backendbench_runner.scoring import parse_weights, score


def ev(task_id: str, c: float, p: float) -> EvalResult:
    status = EvalStatus.CORRECT if c else EvalStatus.INCORRECT
    details = {"correctness": c, "performance": p, "overall": c * p}
    return EvalResult(
        task_id=task_id, model="m", data=EvalResultData(status=status, score=c * p, details=details)
    )


def test_weights_default_and_errors() -> None:
    assert parse_weights(None) == {"correctness": 0.0, "performance": 0.0, "overall": 1.0}
    assert parse_weights("correctness=0.5,performance=0.25") == {
        "correctness": 0.5,
        "performance": 0.25,
        "overall": 0.0,
    }
    with pytest.raises(ValueError, match="name in"):
        parse_weights("speed=1")
    with pytest.raises(ValueError, match="needs a number"):
        parse_weights("overall=x")


def test_weighted_score_and_suite_groups() -> None:
    evals = [ev("smoke/add", 1.0, 2.0), ev("smoke/mul", 0.0, 1.0), ev("facto/add", 1.0, 0.5)]
    result = score(
        evals,
        "m",
        parse_weights("correctness=1,overall=2"),
        {e.task_id: e.task_id.split("/")[0] for e in evals},
    )
    assert [t.score for t in result.per_task] == [5.0, 0.0, 2.0]
    assert result.groups["smoke"]["overall"] == pytest.approx(1.0)
    assert result.groups["facto"]["geomean_speedup_correct"] == pytest.approx(0.5)
    assert result.metrics["correctness"] == pytest.approx(2 / 3)


def test_extract_code_prefers_the_block_defining_the_function() -> None:
    text = "```python\nprint(1)\n```\nthen\n```python\ndef add_kernel_impl(a, b):\n    return a\n```\n```\nnotes\n```"
    assert extract_code(text, "add_kernel_impl") == "def add_kernel_impl(a, b):\n    return a\n"
    assert extract_code("no code here", "add_kernel_impl") is None


def test_ops_override_and_suites() -> None:
    runner = BackendBenchRunner()
    runner.configure({"suite": "facto", "ops": "add,mm"})
    assert [t.id for t in runner.load_tasks(None)] == ["facto/add", "facto/mm"]
    runner.configure({"suite": "opinfo"})
    assert len(runner.load_tasks(None)) > 100
    runner.configure({"suite": "torchbench"})
    assert "_softmax" in {t.op for t in runner.load_tasks(None)}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="--weights"):
        runner.configure({"weights": "bogus"})
    # --perf-processes reaches each evaluation request; bad values name the flag
    runner.configure({"suite": "smoke", "perf_processes": 2})
    (task,) = runner.load_tasks(None)[:1]
    assert runner.eval_request(task, "src").options.perf_processes == 2
    runner.configure({"suite": "smoke"})
    assert runner.eval_request(task, "src").options.perf_processes is None  # the service's default
    with pytest.raises(ValueError, match="--perf-processes"):
        runner.configure({"perf_processes": 9})
