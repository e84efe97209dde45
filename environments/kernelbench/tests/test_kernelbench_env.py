"""The KernelBench environment against real parts: verifiers' own env machinery and ``vf-eval``, the
project's scripted OpenAI-compatible server, and a real kernel service (CPU workers) over HTTP.

The scripted model submits a broken kernel, reads the compiler's error, submits a correct one and
finishes. The same transcript run through ``kernelbench-runner run`` must leave the same per-kernel
records (feedback files), the same tool messages and the same reward as the environment's rollout.
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
from click.testing import CliRunner
from kb_helpers import BROKEN, RIGHT, SCRIPT, TASK, Service, run_kernel
from kernelbench import KernelBenchData, KernelBenchTaskset, KernelBenchTasksetConfig
from kernelbench_runner.cli import cli
from kernelbench_runner.problems import ProblemLoadError

from benchmark_runner.testing import FakeLLMServer

KEY_VAR = "KERNELBENCH_ENV_TEST_KEY"


def rollout(fake_url: str, agent: dict[str, Any] | None = None, **taskset: Any) -> vf.Trace:
    """One episode of the one selected task, as a trainer runs it: env from config, its serving
    resources up, ``run_episode`` with the model context."""

    async def run() -> vf.Trace:
        config = vf.resolve_env_config({"taskset": {"id": "kernelbench", **taskset}, "agent": agent or {}})
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


def verdict(record: dict[str, Any]) -> dict[str, Any]:
    """A feedback record without what says how the service got its answer (timings, cache hit)."""
    result = {k: v for k, v in record["result"].items() if k not in ("elapsed", "cached")}
    return {**record, "result": result}


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-fake")


def test_rollout_equals_the_runners_record_of_the_same_transcript(
    kernel_service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = {"backend": "torch", "feedback": "always", "max_turns": 4}
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(SCRIPT) as fake:
        args = ["run", "--model", "fake", "--run-id", "r", "--base-url", fake.url, "--task-id", TASK]
        args += ["--service-url", kernel_service.url, "--backend", "torch", "--feedback", "always"]
        result = CliRunner().invoke(cli, [*args, "--max-turns", "4"])
        assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "r"
    (generation,) = rows(run_dir / "generations.jsonl")
    (evaluation,) = rows(run_dir / "evaluations.jsonl")
    kernels = run_dir / "logs" / TASK / "kernels"
    records = [json.loads((kernels / f"feedback_{n}.json").read_text()) for n in range(2)]
    assert [r["result"]["outcome"] for r in records] == ["compilation_failure", "correct"]
    assert "expected ':'" in records[0]["feedback"]["error"]  # the compiler's message

    hits_before = kernel_service.service.result_cache.hits  # type: ignore[union-attr]
    with FakeLLMServer(SCRIPT) as fake:
        trace = rollout(fake.url, task_ids=[TASK], service_url=kernel_service.url, run_id="grp", **flags)
        requests = fake.requests
    assert trace.ok and not trace.errors, trace.errors

    # Per kernel: the runner's feedback file, record for record (its verdict and the feedback shown).
    assert [r["result"]["cached"] for r in trace.info["kernels"]] == [True, True]
    assert [verdict(r) for r in trace.info["kernels"]] == [verdict(r) for r in records]
    # The model read the broken kernel's feedback before it submitted the correct one.
    assert len(requests) == 3
    fed_back = requests[1]["messages"][-1]
    assert fed_back["role"] == "tool" and json.loads(fed_back["content"]) == records[0]["feedback"]
    # Each tool message in the trace is the reply the runner recorded for that call.
    runner_replies = [json.dumps(c["result"]) for t in generation["turns"] for c in t["tool_calls"]]
    assert [m.content for m in trace.tool_messages] == runner_replies[:2]
    assert trace.info["generation"]["payload"] == generation["payload"] == RIGHT
    ours, theirs = (g["metadata"]["candidates"] for g in (trace.info["generation"], generation))
    assert [{**c, "file": None} for c in ours] == [{**c, "file": None} for c in theirs]  # no files here

    # The reward is the runner's evaluation of the final kernel: speedup - 1, the speedup it measured.
    assert evaluation["data"]["outcome"] == "correct"
    assert trace.rewards["kernel_reward"].score == evaluation["data"]["score"]
    assert trace.rewards["kernel_reward"].score == pytest.approx(evaluation["data"]["details"]["speedup"] - 1)
    assert trace.metrics == {
        "correct": 1.0,
        "speedup": evaluation["data"]["details"]["speedup"],
        "timing_degraded": 0.0,
        "kernels": 2.0,
    }
    # The same three submissions (two kernels, the final one again) were answered from the cache:
    # the environment sent exactly the runner's requests.
    assert kernel_service.service.result_cache.hits - hits_before == 3  # type: ignore[union-attr]
    # Every evaluation of the rollout named its group (the runner names its run).
    assert kernel_service.run_ids.seen[-6:] == ["r"] * 3 + [f"grp/{TASK}"] * 3


def test_reusing_the_rollouts_verdict_skips_the_final_evaluation(kernel_service: Service) -> None:
    before = len(kernel_service.run_ids.seen)
    script = {TASK: [run_kernel(RIGHT)]}
    with FakeLLMServer(script) as fake:
        trace = rollout(
            fake.url, task_ids=[TASK], service_url=kernel_service.url, backend="torch", reevaluate=False
        )
    assert trace.ok and [k["result"]["outcome"] for k in trace.info["kernels"]] == ["correct"]
    assert len(kernel_service.run_ids.seen) - before == 1  # until_correct stopped; no second call
    speedup = trace.info["kernels"][0]["result"]["speedup"]
    assert trace.rewards["kernel_reward"].score == pytest.approx(speedup - 1)


def test_a_model_failure_fails_the_rollout_instead_of_scoring_it(kernel_service: Service) -> None:
    script = {TASK: [{"status": 400, "error": "model is gone"}]}
    with FakeLLMServer(script) as fake:
        trace = rollout(fake.url, task_ids=[TASK], service_url=kernel_service.url, backend="torch")
    assert not trace.ok and "model is gone" in trace.errors[-1].message
    assert trace.rewards == {} or all(r is None for r in trace.rewards.values())


def test_a_trainers_turn_limit_ends_the_loop_and_the_last_kernel_is_scored(kernel_service: Service) -> None:
    with FakeLLMServer(SCRIPT) as fake:
        trace = rollout(
            fake.url, {"max_turns": 1}, task_ids=[TASK], service_url=kernel_service.url, backend="torch"
        )
    assert trace.ok and trace.stop_condition == "max_turns"  # verifiers refused the second call
    assert [k["result"]["outcome"] for k in trace.info["kernels"]] == ["compilation_failure"]
    assert trace.rewards["kernel_reward"].score == -5.0  # DESIGN.md: compilation failure


def test_a_bf16_rollout_with_profile_feedback(kernel_service: Service) -> None:
    """``precision`` and ``feedback: profile`` as the runner's flags: the correct kernel's feedback holds
    the profile table the model reads next, and every verdict (the reward's too) is at bf16."""
    with FakeLLMServer(SCRIPT) as fake:
        trace = rollout(
            fake.url,
            task_ids=[TASK],
            service_url=kernel_service.url,
            backend="torch",
            feedback="profile",
            precision="bf16",
            max_turns=4,
        )
        requests = fake.requests
    assert trace.ok and not trace.errors, trace.errors
    assert "profile of one untimed call" in requests[0]["messages"][0]["content"]  # the system prompt
    broken, right = trace.info["kernels"]
    assert "profile" not in broken["feedback"]  # a kernel that failed has no profile
    table = right["feedback"]["profile"]
    assert table.startswith("Profile of one untimed call") and "aten::clamp_min" in table
    fed_back = requests[2]["messages"][-1]
    assert fed_back["role"] == "tool" and fed_back["content"].endswith(table)
    assert {k["result"]["precision"] for k in trace.info["kernels"]} == {"bf16"}
    evaluation = trace.info["evaluation"]["data"]
    assert evaluation["details"]["precision"] == "bf16" and evaluation["details"]["profile"] is None


def test_taskset_mirrors_the_runner_flags_and_its_data_crosses_the_wire() -> None:
    config = KernelBenchTasksetConfig(id="kernelbench", level=[2], backend="cpp", feedback="none")
    tasks = list(KernelBenchTaskset(config))
    assert [t.data.id for t in tasks] == [
        "L2_1_Matmul_Bias_ReLU",
        "L2_2_Conv2d_ReLU_BiasAdd",
        "L2_3_Matmul_Scale_Softmax",
    ]
    data = tasks[0].data
    assert "C++ CPU operators" in (data.system_prompt or "") and "run_kernel" not in (
        data.system_prompt or ""
    )
    assert data.run_group.endswith("/L2_1_Matmul_Bias_ReLU") and tasks[0].key == "L2_1_Matmul_Bias_ReLU"
    # A trainer ships task data to env workers as JSON: it must come back whole.
    assert KernelBenchData.model_validate(json.loads(data.model_dump_json())) == data
    with pytest.raises(ProblemLoadError, match="L9_1"):
        list(KernelBenchTaskset(KernelBenchTasksetConfig(id="kernelbench", task_ids=["L9_1"])))
    with pytest.raises(ValueError, match="backend"):
        KernelBenchTasksetConfig(id="kernelbench", backend="fortran")  # type: ignore[arg-type]
    bf16 = KernelBenchTasksetConfig(id="kernelbench", precision="bf16", feedback="profile").runner_options()
    assert bf16.eval_options() == {"precision": "bf16"} and bf16.feedback == "profile"
    with pytest.raises(ValueError, match="precision"):
        KernelBenchTasksetConfig(id="kernelbench", precision="fp8")  # type: ignore[arg-type]


def test_vf_eval_runs_a_task_with_the_embedded_service(tmp_path: Path) -> None:
    """``vf-eval kernelbench`` as a user runs it, no service URL: the kernel service starts embedded
    (CPU workers judge the torch backend)."""
    vf_eval = Path(sys.executable).with_name("vf-eval")
    env = {k: v for k, v in os.environ.items() if k != "BENCHMARK_SERVICE_URL"}
    with FakeLLMServer(SCRIPT) as fake:
        args = [str(vf_eval), "kernelbench", "-m", "fake", "--client.base-url", fake.url]
        args += ["--client.api-key-var", KEY_VAR, "-n", "1", "--no-push", "--no-rich", "-o", str(tmp_path)]
        args += ["--env.taskset.task-ids", TASK, "--env.taskset.backend", "torch"]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
        n_requests = len(fake.requests)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces,) = tmp_path.glob("*/traces.jsonl")
    (episode,) = rows(traces)
    (trace,) = episode["traces"]
    assert episode["ok"] and not trace["errors"], trace["errors"]
    outcomes = [k["result"]["outcome"] for k in trace["info"]["kernels"]]
    assert outcomes == ["compilation_failure", "correct"] and n_requests == 2  # until_correct
    assert trace["metrics"]["correct"] == 1.0
    speedup = trace["metrics"]["speedup"]
    assert speedup > 0 and trace["rewards"]["kernel_reward"]["score"] == pytest.approx(speedup - 1)
    assert trace["task"]["data"].get("service_url") is None  # the embedded service judged it
    calls = [c for n in trace["nodes"] for c in n["message"].get("tool_calls") or []]
    assert [json.loads(c["arguments"])["python"] for c in calls] == [BROKEN, RIGHT]  # on the trace
