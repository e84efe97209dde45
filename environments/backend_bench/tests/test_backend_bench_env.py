"""The BackendBench environment against real parts: verifiers' own env machinery and ``vf-eval``, the
project's scripted OpenAI-compatible server, and a real kernel service (CPU workers) over HTTP.

The scripted model answers a wrong kernel, reads the service's verdict, then answers a correct one.
The same transcript run through ``backendbench-runner run`` must show the model the same feedback,
reach the same verdicts and give the task the same score as the environment's rollout.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import verifiers.v1 as vf
from backend_bench import BackendBenchData, BackendBenchTaskset, BackendBenchTasksetConfig
from backendbench_runner.cli import cli
from bb_helpers import BROKEN, RIGHT, SCRIPT, TASK, Service, answer
from click.testing import CliRunner
from pydantic import ValidationError

from benchmark_runner.testing import FakeLLMServer

KEY_VAR = "BACKEND_BENCH_ENV_TEST_KEY"


def rollout(fake_url: str, agent: dict[str, Any] | None = None, **taskset: Any) -> vf.Trace:
    """One episode of the one selected task, as a trainer runs it: env from config, its serving
    resources up, ``run_episode`` with the model context."""

    async def run() -> vf.Trace:
        config = vf.resolve_env_config({"taskset": {"id": "backend-bench", **taskset}, "agent": agent or {}})
        env = vf.load_environment(config)
        (task,) = list(env.taskset)
        ctx = vf.ModelContext(
            model="fake", client=vf.EvalClientConfig(base_url=fake_url, api_key_var=KEY_VAR)
        )
        async with env.serving():
            episode = await env.run_episode(task, ctx)
        (trace,) = episode.traces
        return trace

    return asyncio.run(run())


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def verdicts(generation: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each turn's verdict, less what timing noise or a file path changes (performance, kernel)."""
    return [(v["turn"], v["outcome"], v["correctness"]) for v in generation["metadata"]["turn_verdicts"]]


@pytest.fixture(autouse=True)
def _model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-fake")


def test_rollout_equals_the_runners_record_of_the_same_transcript(
    kernel_service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(SCRIPT) as fake:
        args = ["run", "--model", "fake", "--run-id", "r", "--base-url", fake.url, "--ops", "relu"]
        args += ["--service-url", kernel_service.url, "--backend", "torch", "--weights", "correctness=1"]
        result = CliRunner().invoke(cli, [*args, "--max-turns", "4"])
        assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "r"
    (generation,) = rows(run_dir / "generations.jsonl")
    (task_score,) = json.loads((run_dir / "score.json").read_text())["per_task"]
    assert verdicts(generation) == [(0, "incorrect", 0.0), (1, "correct", 1.0)]
    runner_feedback = generation["turns"][1]["messages"][-1]
    assert runner_feedback["role"] == "user" and "Failing inputs" in runner_feedback["content"]

    with FakeLLMServer(SCRIPT) as fake:
        trace = rollout(
            fake.url,
            ops=["relu"],
            backend="torch",
            weights={"correctness": 1.0},
            max_turns=4,
            service_url=kernel_service.url,
            run_id="grp",
        )
        requests = fake.requests
    assert trace.ok and not trace.errors, trace.errors

    # The model read the service's verdict on its wrong kernel: the runner's feedback message, verbatim.
    assert len(requests) == 2 and requests[1]["messages"][-1] == runner_feedback
    assert [m.content for m in trace.messages if m.role == "user"][1] == runner_feedback["content"]
    assert verdicts(trace.info["generation"]) == verdicts(generation)
    assert trace.info["generation"]["payload"] == generation["payload"] == RIGHT
    # The reward is the runner's task score under the same weights (here: correctness alone).
    assert trace.rewards["task_score"].score == task_score["score"] == 1.0
    assert trace.metrics["correctness"] == task_score["details"]["correctness"] == 1.0
    assert trace.metrics["overall"] == pytest.approx(trace.metrics["performance"])  # 1 x performance
    # Each evaluation named its run: the runner's, then the rollout group's (two turns, the final kernel).
    assert kernel_service.run_ids.seen[-6:] == ["r"] * 3 + [f"grp/{TASK}"] * 3


def test_a_trainers_turn_limit_scores_the_transcripts_last_kernel(kernel_service: Service) -> None:
    """verifiers refuses the second call: the loop ends without its record, so the task falls back
    to the last kernel in the transcript (as for a harness that is not this package's)."""
    with FakeLLMServer(SCRIPT) as fake:
        trace = rollout(
            fake.url, {"max_turns": 1}, ops=["relu"], backend="torch", service_url=kernel_service.url
        )
    assert trace.ok and trace.stop_condition == "max_turns" and "generation" not in trace.info
    assert trace.info["evaluation"]["data"]["outcome"] == "incorrect"
    assert trace.rewards["task_score"].score == 0.0 and trace.metrics["correctness"] == 0.0


def test_taskset_mirrors_the_runner_flags_and_its_data_crosses_the_wire() -> None:
    config = BackendBenchTasksetConfig(id="backend-bench", ops=["relu", "add"], feedback="none")
    tasks = list(BackendBenchTaskset(config))
    assert [t.data.id for t in tasks] == ["smoke/relu", "smoke/add"] and tasks[0].key == "smoke/relu"
    data = tasks[0].data
    assert "relu_kernel_impl" in str(data.prompt) and "Triton" in str(data.prompt)  # the default backend
    assert data.flags["feedback"] == "none" and data.run_group.endswith("/smoke/relu")
    # A trainer ships task data to env workers as JSON: it must come back whole.
    assert BackendBenchData.model_validate(json.loads(data.model_dump_json())) == data
    with pytest.raises(ValueError, match="frobnicate not in the smoke suite"):
        list(BackendBenchTaskset(BackendBenchTasksetConfig(id="backend-bench", ops=["frobnicate"])))
    with pytest.raises(ValueError, match="smoke/nope"):
        list(BackendBenchTaskset(BackendBenchTasksetConfig(id="backend-bench", task_ids=["smoke/nope"])))
    with pytest.raises(ValidationError, match="weights"):
        BackendBenchTasksetConfig(id="backend-bench", weights={"speed": 1.0})


def test_vf_eval_runs_a_task_with_the_embedded_service(tmp_path: Path) -> None:
    """``vf-eval backend-bench`` as a user runs it, no service URL: the kernel service starts embedded
    (a CPU worker), and the reward weighs correctness and overall half and half."""
    vf_eval = Path(sys.executable).with_name("vf-eval")
    env = {k: v for k, v in os.environ.items() if k != "BENCHMARK_SERVICE_URL"}
    with FakeLLMServer(SCRIPT) as fake:
        args = [str(vf_eval), "backend-bench", "-m", "fake", "--client.base-url", fake.url]
        args += ["--client.api-key-var", KEY_VAR, "-n", "1", "--no-push", "--no-rich", "-o", str(tmp_path)]
        args += ["--env.taskset.ops", "relu", "--env.taskset.backend", "torch"]
        args += ["--env.taskset.weights", '{"correctness": 0.5, "overall": 0.5}']
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces,) = tmp_path.glob("*/traces.jsonl")
    (episode,) = rows(traces)
    (trace,) = episode["traces"]
    assert episode["ok"] and not trace["errors"], trace["errors"]
    assert verdicts(trace["info"]["generation"]) == [(0, "incorrect", 0.0), (1, "correct", 1.0)]
    metrics = trace["metrics"]
    assert metrics["correctness"] == 1.0 and metrics["performance"] > 0
    expected = 0.5 * metrics["correctness"] + 0.5 * metrics["overall"]
    assert trace["rewards"]["task_score"]["score"] == pytest.approx(expected)
    replies = [n["message"]["content"] for n in trace["nodes"] if n["message"]["role"] == "assistant"]
    assert replies == [answer(BROKEN)["content"], answer(RIGHT)["content"]]  # the transcript
