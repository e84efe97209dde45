"""``arithmetic-runner run`` as a subprocess against real servers: fake model, external service, failures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from benchmark_runner.examples.arithmetic import DATA_FILE, ArithmeticService, solve
from benchmark_runner.schemas import EvalResultData, EvaluateRequest
from benchmark_runner.service import RunningServer, make_app
from benchmark_runner.testing.fake_llm import FakeLLMServer

ARITH = [sys.executable, "-m", "benchmark_runner.examples.arithmetic"]
TASKS = [json.loads(line) for line in DATA_FILE.read_text().splitlines()]


def run_cli(tmp: Path, *args: str, env: dict[str, str] | None = None, module: list[str] = ARITH) -> Any:
    full_env = {k: v for k, v in os.environ.items() if k != "BENCHMARK_SERVICE_URL"}
    full_env.update(env or {})
    return subprocess.run(
        [*module, "run", "--output-dir", str(tmp / "runs"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
        cwd=tmp,
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


class CountingService(ArithmeticService):
    """The arithmetic service, counting calls per task and the most evaluations in flight at once."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.calls: Counter[str] = Counter()
        self.list_calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    async def evaluate(self, request: EvaluateRequest) -> EvalResultData:
        self.calls[str(request.task["id"])] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay_s)
            return await super().evaluate(request)
        finally:
            self.in_flight -= 1

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        self.list_calls += 1
        return await super().list_tasks(dataset)


def test_real_model_path_against_the_fake_llm(tmp_path: Path, fake_llm: Callable[..., FakeLLMServer]) -> None:
    # half the tasks answered right, half wrong; each task's prompt picks its own scripted answer
    script = {
        t["question"]: [{"content": str(solve(t["question"]) + (0 if i % 2 == 0 else 1))}]
        for i, t in enumerate(TASKS)
    }
    fake = fake_llm(script, api_key="sekrit")
    res = run_cli(tmp_path, "--model", "fake-model", "--run-id", "llm", "--base-url", fake.url,
                  "--api-key-env", "MY_KEY", "--max-tokens", "16", env={"MY_KEY": "sekrit"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert len(fake.requests) == 20
    assert {r["model"] for r in fake.requests} == {"fake-model"}
    assert {r["max_tokens"] for r in fake.requests} == {16}
    score = json.loads((tmp_path / "runs" / "llm" / "score.json").read_text())
    assert score["metrics"]["correct_rate"] == 0.5
    gens = lines(tmp_path / "runs" / "llm" / "generations.jsonl")
    assert all(g["turns"][0]["usage"]["completion_tokens"] > 0 for g in gens)
    assert "correct_rate" in res.stdout and "started embedded arithmetic service" in res.stderr

    # the wrong key: the model API refuses every task -> recorded as failures, exit 1
    res = run_cli(tmp_path, "--model", "fake-model", "--run-id", "nokey", "--base-url", fake.url,
                  "--api-key-env", "MY_KEY", "--limit", "3", env={"MY_KEY": "wrong"})  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert "3 task(s) failed" in res.stderr
    gens = lines(tmp_path / "runs" / "nokey" / "generations.jsonl")
    assert all(g["status"] == "error" and "401" in g["error"] for g in gens)


def test_external_service_by_flag_and_by_env(tmp_path: Path, serve_app: Callable[..., RunningServer]) -> None:
    svc = CountingService()
    srv = serve_app(make_app(svc))
    res = run_cli(tmp_path, "--model", "oracle", "--run-id", "a", "--service-url", srv.url)
    assert res.returncode == 0, res.stderr
    assert "started embedded" not in res.stderr
    assert sum(svc.calls.values()) == 20 and set(svc.calls.values()) == {1}
    res = run_cli(tmp_path, "--model", "oracle", "--run-id", "b", env={"BENCHMARK_SERVICE_URL": srv.url})
    assert res.returncode == 0, res.stderr
    assert "started embedded" not in res.stderr and set(svc.calls.values()) == {2}


def test_dataset_name_uses_the_service_and_problem_never_does(
    tmp_path: Path, serve_app: Callable[..., RunningServer]
) -> None:
    svc = CountingService()
    srv = serve_app(make_app(svc))
    res = run_cli(tmp_path, "--model", "oracle", "--run-id", "n", "--dataset-name", "arithmetic",
                  "--limit", "2", "--service-url", srv.url)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert svc.list_calls == 1
    problem = tmp_path / "one.jsonl"
    problem.write_text(json.dumps({"id": "one", "question": "What is 2 * 21?"}) + "\n")
    res = run_cli(
        tmp_path, "--model", "oracle", "--run-id", "p", "--problem", str(problem), "--service-url", srv.url
    )
    assert res.returncode == 0, res.stderr
    assert svc.list_calls == 1 and svc.calls["one"] == 1
    res = run_cli(
        tmp_path, "--model", "oracle", "--run-id", "u", "--dataset-name", "nope", "--service-url", srv.url
    )
    assert res.returncode == 2 and "unknown dataset 'nope'" in res.stderr


def test_concurrency_bounds_the_evaluations_in_flight(
    tmp_path: Path, serve_app: Callable[..., RunningServer]
) -> None:
    svc = CountingService(delay_s=0.15)
    srv = serve_app(make_app(svc))
    res = run_cli(tmp_path, "--model", "oracle", "--run-id", "c", "--limit", "12", "--concurrency", "3",
                  "--service-url", srv.url)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert svc.max_in_flight == 3


FLAKY_RUNNER = textwrap.dedent(
    """
    import os
    from benchmark_runner.cli import make_cli
    from benchmark_runner.examples.arithmetic import DATA_FILE, ArithmeticRunner, solve
    from benchmark_runner.schemas import GenerationResult

    async def flaky(runner, task, cfg, log_dir):
        if task.id == "arith-001" and not os.environ.get("FLAKY_FIXED"):
            raise RuntimeError("model exploded on " + task.id)
        return GenerationResult(task_id=task.id, model="flaky", payload=str(solve(task.question)))

    class FlakyRunner(ArithmeticRunner):
        NAME = "flaky"
        OFFLINE_MODELS = {"flaky": flaky}

    cli = make_cli(FlakyRunner, default_dataset_file=DATA_FILE)
    if __name__ == "__main__":
        cli()
    """
)


def test_a_task_whose_generate_raises_is_recorded_and_retried(tmp_path: Path) -> None:
    (tmp_path / "flaky_runner.py").write_text(FLAKY_RUNNER)
    module = [sys.executable, str(tmp_path / "flaky_runner.py")]
    res = run_cli(tmp_path, "--model", "flaky", "--run-id", "f", "--limit", "5", module=module)
    assert res.returncode == 1
    assert "FAIL arith-001: RuntimeError: model exploded on arith-001" in res.stderr
    run = tmp_path / "runs" / "f"
    failed = [g for g in lines(run / "generations.jsonl") if g["status"] == "error"]
    assert [g["task_id"] for g in failed] == ["arith-001"]
    assert "Traceback" in (run / "logs" / "arith-001" / "generate_error.txt").read_text()
    assert json.loads((run / "score.json").read_text())["metrics"]["correct_rate"] == 0.8  # the run went on

    res = run_cli(
        tmp_path, "--model", "flaky", "--run-id", "f", "--limit", "5", module=module, env={"FLAKY_FIXED": "1"}
    )
    assert res.returncode == 0, res.stderr
    gens = lines(run / "generations.jsonl")
    assert [g["task_id"] for g in gens[5:]] == ["arith-001"]  # only the failed task was redone
    assert json.loads((run / "score.json").read_text())["metrics"]["correct_rate"] == 1.0


def test_unreachable_service_exits_4(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = run_cli(tmp_path, "--model", "oracle", "--run-id", "x", "--service-url", f"http://127.0.0.1:{port}")
    assert res.returncode == 4
    assert f"benchmark service at http://127.0.0.1:{port} is unreachable" in res.stderr
