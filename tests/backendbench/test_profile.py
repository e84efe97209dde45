"""``options.profile`` on BackendBench answers: one untimed call of the kernel and of the op, profiled in
a fresh pair of side processes after the verdict and timing; advisory (it changes no verdict or score)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backendbench_runner.cli import cli
from bb_sources import CORRECT_RELU, FAST, WRONG_RELU
from click.testing import CliRunner
from kernel_service.backendbench.evaluator import evaluate, evaluate_batch

from benchmark_runner.artifacts import RunArtifacts
from benchmark_runner.testing.fake_llm import FakeLLMServer

#: Correct, but raises in the call the profiler watches (the warm-up calls before it pass).
RAISES_WHEN_PROFILED = """
import torch
from torch.autograd import _profiler_enabled
def relu_kernel_impl(x):
    if _profiler_enabled():
        raise RuntimeError("no profiling of me")
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
"""


def body(source: str, op: str = "relu", **options: Any) -> dict[str, Any]:
    return {
        "dataset": "backendbench-smoke",
        "op": op,
        "suite": "smoke",
        "source": source,
        "options": {**FAST, **options},
    }


def test_a_correct_kernel_carries_a_profile_of_both_sides_taken_in_fresh_processes(
    forked: list[str],
) -> None:
    r = evaluate(body(CORRECT_RELU, profile=True))
    assert r["outcome"] == "correct" and r["correctness"] == 1.0 and r["performance"] > 0
    prof = r["profile"]
    assert prof["device"] == "cpu" and "CPU ops" in prof["source"] and "advisory" in prof["note"]
    assert prof["input"].startswith("aten.relu.default(T([")  # the largest performance input
    for role, op in (("candidate", "aten::where"), ("reference", "aten::relu")):
        side = prof[role]
        assert side["error"] is None and side["call_us"] > 0 and 0 <= side["outside_share"] <= 1
        names = {k["name"]: k for k in side["kernels"]}
        assert op in names and names[op]["calls"] >= 1 and names[op]["time_us"] > 0
    assert "ncu measures GPU kernels only" in prof["ncu"]["error"]
    # the verdict's pair (timed), then a fresh pair for the profile: no profiled process is timed
    assert sorted(forked[:2]) == ["candidate", "reference"]
    assert sorted(forked[2:]) == ["candidate", "reference"]


def test_without_the_option_there_is_no_profile_and_no_extra_process(forked: list[str]) -> None:
    r = evaluate(body(CORRECT_RELU))
    assert r["outcome"] == "correct" and r["profile"] is None
    assert sorted(forked) == ["candidate", "reference"]


def test_a_profiled_call_that_raises_keeps_the_verdict() -> None:
    r = evaluate(body(RAISES_WHEN_PROFILED, profile=True))
    assert r["outcome"] == "correct" and r["correctness"] == 1.0 and r["overall"] > 0
    prof = r["profile"]
    assert "no profiling of me" in prof["candidate"]["error"] and not prof["candidate"]["kernels"]
    assert prof["reference"]["error"] is None and prof["reference"]["kernels"]


def test_an_incorrect_kernel_gets_a_note_and_a_batch_judges_on_after_a_profile() -> None:
    r = evaluate(body(WRONG_RELU, profile=True, measure_performance=False))
    assert r["outcome"] == "incorrect"
    assert r["profile"]["candidate"] is None and "only a correct kernel" in r["profile"]["note"]
    # the profile kills both of its processes: the ops after it in a batch start their own
    verdicts = evaluate_batch(
        [
            body(CORRECT_RELU, profile=True, measure_performance=False),
            body(WRONG_RELU, profile=True, measure_performance=False),
            body(CORRECT_RELU, measure_performance=False),
        ]
    )["verdicts"]
    assert [v["outcome"] for v in verdicts] == ["correct", "incorrect", "correct"]
    assert verdicts[0]["profile"]["candidate"]["kernels"] and verdicts[2]["profile"] is None
    assert "only a correct kernel" in verdicts[1]["profile"]["note"]


def test_runner_feedback_profile_puts_a_profile_table_in_the_next_turn(
    backendbench_service_url: str, tmp_path: Path
) -> None:
    """``backendbench-runner run --feedback profile``: a correct kernel is evaluated with a profile, its
    table goes into the next turn's prompt, the loop goes on, and the best correct kernel is the answer
    (evaluated by the run without a profile)."""
    slow = CORRECT_RELU.replace("return torch.where", "y = x.clone()\n    return torch.where")
    script = {
        "task smoke/relu:": [
            {"content": f"```python\n{slow}```"},
            {"content": f"```python\n{CORRECT_RELU}```"},
        ]
    }
    runs = tmp_path / "runs"
    with FakeLLMServer(script) as fake:
        args = ["run", "--model", "fake/model", "--base-url", fake.url, "--run-id", "p", "--max-turns", "2"]
        args += ["--ops", "relu", "--feedback", "profile", "--service-url", backendbench_service_url]
        result = CliRunner().invoke(cli, [*args, "--output-dir", str(runs)])
        assert result.exit_code == 0, result.output
    assert len(fake.requests) == 2  # correct at once, and still asked again
    assert "profile of one untimed call" in fake.requests[0]["messages"][0]["content"]  # the system prompt
    artifacts = RunArtifacts(runs / "p")
    gen = artifacts.read_generations()["smoke/relu"]
    second = gen.turns[1].messages[-1]["content"]
    assert second == fake.requests[1]["messages"][-1]["content"]
    assert "Profile of one untimed call on aten.relu.default(T([" in second and "Make it faster" in second
    assert "yours:" in second and "aten::clone" in second and "the operator (aten):" in second
    assert "aten::relu" in second and "time_us" in second
    assert [v["outcome"] for v in gen.metadata["turn_verdicts"]] == ["correct", "correct"]
    best = gen.metadata["best_turn"]
    overalls = [v["overall"] for v in gen.metadata["turn_verdicts"]]
    assert overalls[best] == max(overalls) and gen.payload == [slow, CORRECT_RELU][best]
    evaluation = artifacts.read_evaluations()["smoke/relu"]
    assert evaluation.data.outcome == "correct" and evaluation.data.details["profile"] is None
