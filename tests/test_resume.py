"""A run killed with SIGKILL mid-flight and started again: nothing lost, nothing done twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio

from benchmark_runner.examples.arithmetic import ArithmeticService
from benchmark_runner.schemas import EvalResultData, EvaluateRequest
from benchmark_runner.service import RunningServer, make_app
from benchmark_runner.testing.fake_llm import FakeLLMServer

N_TASKS = 40
CONCURRENCY = 4


class CountingService(ArithmeticService):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.calls: Counter[str] = Counter()

    async def evaluate(self, request: EvaluateRequest) -> EvalResultData:
        self.calls[str(request.task["id"])] += 1
        await anyio.sleep(self.delay_s)
        return await super().evaluate(request)


def _ids(path: Path) -> list[str]:
    return [json.loads(x)["task_id"] for x in path.read_text().splitlines()] if path.exists() else []


def _asked(fake: FakeLLMServer) -> Counter[str]:
    """Model requests per task, mapped back from the question in the user message."""
    out: Counter[str] = Counter()
    for body in fake.requests:
        question = body["messages"][-1]["content"]
        out[f"t{int(question.split()[2]):03d}"] += 1
    return out


def test_kill_9_mid_run_then_resume(
    tmp_path: Path, fake_llm: Callable[..., FakeLLMServer], serve_app: Callable[..., RunningServer]
) -> None:
    data = tmp_path / "tasks.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"t{i:03d}", "question": f"What is {i} + 1000?"}) + "\n" for i in range(N_TASKS)
        )
    )
    fake = fake_llm({"": [{"content": "1000", "delay_s": 0.05}]})
    svc = CountingService(delay_s=0.05)
    srv = serve_app(make_app(svc))
    run = tmp_path / "runs" / "k"
    cmd = [
        sys.executable, "-m", "benchmark_runner.examples.arithmetic", "run", "--model", "fake", "--run-id", "k",
        "--dataset-file", str(data), "--base-url", fake.url, "--service-url", srv.url,
        "--concurrency", str(CONCURRENCY), "--output-dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "BENCHMARK_SERVICE_URL"}

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while len(_ids(run / "evaluations.jsonl")) < 10:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)  # let requests that were in flight at the kill reach the servers

    generated_before = set(_ids(run / "generations.jsonl"))
    evaluated_before = set(_ids(run / "evaluations.jsonl"))
    assert 10 <= len(evaluated_before) < N_TASKS and evaluated_before <= generated_before
    # a crash mid-write leaves a torn line; kill -9 between syscalls cannot, so make one
    with (run / "generations.jsonl").open("ab") as f:
        f.write(b'{"task_id": "t039", "model": "fa')
    status = subprocess.run([*cmd[:3], "status", "--run-id", "k", "--output-dir", str(tmp_path / "runs")],
                            capture_output=True, text=True, env=env)  # fmt: skip
    assert status.returncode == 0 and "torn tail in generations.jsonl" in status.stdout

    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"{len(evaluated_before)} already finished (resumed)" in res.stderr

    gens, evals = _ids(run / "generations.jsonl"), _ids(run / "evaluations.jsonl")
    all_ids = {f"t{i:03d}" for i in range(N_TASKS)}
    assert set(gens) == all_ids and len(gens) == N_TASKS  # no task lost, none generated twice
    assert set(evals) == all_ids and len(evals) == N_TASKS  # none evaluated twice
    assert (run / "generations.jsonl").read_bytes().endswith(b"}\n")  # the torn tail is gone

    asked = _asked(fake)
    assert set(asked) == all_ids
    assert all(asked[t] == 1 for t in generated_before)  # a stored generation is never asked for again
    assert sum(asked.values()) <= N_TASKS + CONCURRENCY  # only requests in flight at the kill are repeated
    assert all(svc.calls[t] == 1 for t in evaluated_before)  # a stored evaluation is never redone
    assert sum(svc.calls.values()) <= N_TASKS + CONCURRENCY
    score = json.loads((run / "score.json").read_text())
    assert score["n_tasks"] == N_TASKS and score["metrics"]["correct_rate"] == 1 / N_TASKS  # only 0 + 1000

    # a third run finds nothing to do
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and f"{N_TASKS} already finished" in res.stderr
    assert sum(_asked(fake).values()) == sum(asked.values())
