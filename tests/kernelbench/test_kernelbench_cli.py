"""``kernelbench-runner`` through its real CLI: the whole loop (fake model -> real kernel service ->
scores -> report), the three task sources, and resume after a real ``kill -9``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from kernelbench_runner.cli import cli

from benchmark_runner.testing.fake_llm import FakeLLMServer

FIXTURES = Path(__file__).parent / "fixtures"

BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x) return x\n"  # syntax error
WRONG = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
RELU = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n"
ADD = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return torch.add(a, b)\n"


def run_kernel(python: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_kernel", "arguments": {"python": python}}]}


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def requests_of(fake: FakeLLMServer, task_id: str) -> int:
    return sum(1 for r in fake.requests if f"(task {task_id})" in json.dumps(r["messages"]))


def test_full_loop_fake_model_real_service(kernel_service_url: str, tmp_path: Path) -> None:
    """Three scripted conversations in one run: compile error -> wrong -> correct (until_correct stops
    before the 4th scripted answer), always wrong (stopped by --max-turns), right at once."""
    script = {
        "(task L1_2_ReLU)": [run_kernel(BROKEN), run_kernel(WRONG), run_kernel(RELU), run_kernel(WRONG)],
        "(task L1_3_GELU)": [run_kernel(WRONG)],
        "(task L1_1_Elementwise_add)": [run_kernel(ADD), run_kernel(WRONG)],
    }
    out = tmp_path / "runs"
    with FakeLLMServer(script) as fake:
        args = ["run", "--model", "fake", "--run-id", "loop", "--output-dir", str(out)]
        args += ["--base-url", fake.url, "--service-url", kernel_service_url, "--backend", "torch"]
        args += ["--max-turns", "3", "--concurrency", "2", "--price-in", "1", "--price-out", "2"]
        for task_id in ("L1_1_Elementwise_add", "L1_2_ReLU", "L1_3_GELU"):
            args += ["--task-id", task_id]
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert requests_of(fake, "L1_2_ReLU") == 3  # until_correct: the scripted 4th answer never asked
        assert requests_of(fake, "L1_3_GELU") == 3  # --max-turns 3
        assert requests_of(fake, "L1_1_Elementwise_add") == 1
        usage = fake.usage_total

    run = out / "loop"
    gens = {g["task_id"]: g for g in rows(run / "generations.jsonl")}
    assert {k: len(g["turns"]) for k, g in gens.items()} == {
        "L1_1_Elementwise_add": 1,
        "L1_2_ReLU": 3,
        "L1_3_GELU": 3,
    }
    relu = gens["L1_2_ReLU"]
    assert relu["payload"] == RELU and relu["metadata"]["stop_reasons"] == ["correct"]
    assert [c["outcome"] for c in relu["metadata"]["candidates"]] == [
        "compilation_failure",
        "incorrect",
        "correct",
    ]
    assert gens["L1_3_GELU"]["metadata"]["stop_reasons"] == ["max_turns"]
    logs = run / "logs" / "L1_2_ReLU" / "kernels"
    assert (logs / "turn_0.py").read_text() == BROKEN and (logs / "final.py").read_text() == RELU
    assert "SyntaxError" in (logs / "feedback_0.json").read_text()

    evals = {e["task_id"]: e["data"] for e in rows(run / "evaluations.jsonl")}
    assert {k: d["outcome"] for k, d in evals.items()} == {
        "L1_1_Elementwise_add": "correct",
        "L1_2_ReLU": "correct",
        "L1_3_GELU": "incorrect",
    }
    # Hand-computed from the measured speedups: reward = speedup - 1 when correct, -2 when incorrect.
    s_add, s_relu = (evals[t]["details"]["speedup"] for t in ("L1_1_Elementwise_add", "L1_2_ReLU"))
    score = json.loads((run / "score.json").read_text())
    m = score["metrics"]
    assert m["correct_rate"] == pytest.approx(2 / 3) and m["fast_0"] == pytest.approx(2 / 3)
    assert m["fast_1"] == pytest.approx(sum(s > 1 for s in (s_add, s_relu)) / 3)
    assert m["geomean_speedup"] == pytest.approx((s_add * s_relu) ** 0.5)
    assert m["mean_reward"] == pytest.approx(((s_add - 1) + (s_relu - 1) - 2) / 3)
    assert m["prompt_tokens"] == usage.prompt_tokens and m["completion_tokens"] == usage.completion_tokens
    expected_cost = (usage.prompt_tokens * 1 + usage.completion_tokens * 2) / 1e6
    assert m["cost_usd"] == pytest.approx(expected_cost)

    # The report of that run: one row per task, linking each final kernel.
    report = invoke("report", "--run-id", "loop", "--output-dir", str(out))
    assert report.exit_code == 0, report.output
    page = Path(report.output.strip())
    assert page == (run / "report.html").resolve() and page.is_file()
    html = page.read_text()
    assert html.count('<tr class="task"') == 3 and "logs/L1_2_ReLU/kernels/final.py" in html


def write_checkout(root: Path, source: Path = FIXTURES / "upstream_problems.jsonl") -> Path:
    """A KernelBench-layout folder (``KernelBench/level<N>/<id>_<Name>.py``) from JSONL problem rows."""
    for row in rows(source):
        level_dir = root / "KernelBench" / f"level{row['level']}"
        level_dir.mkdir(parents=True, exist_ok=True)
        (level_dir / f"{row['name']}.py").write_text(row["code"])
    return root


def test_tasks_from_a_checkout_folder_jsonl_and_the_service(kernel_service_url: str, tmp_path: Path) -> None:
    checkout = write_checkout(tmp_path / "checkout")
    listed = invoke("list-tasks", "--dataset-file", str(checkout))
    assert listed.exit_code == 0, listed.output
    assert [line.split("\t")[0] for line in listed.output.splitlines()] == [
        "L1_19_ReLU",
        "L1_23_Softmax",
        "L2_1_Conv2D_ReLU_BiasAdd",
        "L3_1_MLP",
        "L4_1_EleutherAI-gpt-neo-2p7B_bs32_seq256",
    ]

    from_jsonl = invoke("list-tasks", "--json", "--dataset-file", str(FIXTURES / "upstream_problems.jsonl"))
    assert from_jsonl.exit_code == 0, from_jsonl.output
    tasks = [json.loads(line) for line in from_jsonl.output.splitlines()]
    assert len(tasks) == 5 and tasks[0]["level"] == 1 and "def get_inputs" in tasks[0]["reference_code"]

    from_service = invoke("list-tasks", "--dataset-name", "level1", "--service-url", kernel_service_url)
    assert from_service.exit_code == 0, from_service.output
    assert [line.split("\t")[0] for line in from_service.output.splitlines()] == [
        "L1_19_ReLU",
        "L1_23_Softmax",
    ]

    missing = invoke("list-tasks", "--dataset-file", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = invoke("list-tasks", "--dataset-file", str(empty))
    assert bad.exit_code == 2 and "level" in bad.output  # names what a checkout must contain


def test_run_on_a_checkout_folder(kernel_service_url: str, sample_file: Path, tmp_path: Path) -> None:
    """``run --dataset-file KernelBench/``: the folder's problem runs, and the run records the folder.
    (The bundled CPU-sized problems laid out as a checkout: upstream's shapes take minutes on a CPU.)"""
    checkout = write_checkout(tmp_path / "checkout", sample_file)
    out = tmp_path / "runs"
    args = ["run", "--model", "reference", "--run-id", "ck", "--output-dir", str(out)]
    args += [
        "--dataset-file",
        str(checkout),
        "--service-url",
        kernel_service_url,
        "--task-id",
        "L1_5_Softmax",
    ]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    (evaluation,) = rows(out / "ck" / "evaluations.jsonl")
    assert evaluation["task_id"] == "L1_5_Softmax" and evaluation["data"]["outcome"] == "correct"
    config = json.loads((out / "ck" / "config.json").read_text())
    assert config["dataset"]["path"] == str(checkout.resolve())


def test_resume_after_kill_9(kernel_service_url: str, tmp_path: Path) -> None:
    """A real ``kill -9`` of the CLI mid-run; the same command then finishes without redoing anything."""
    out = tmp_path / "runs"
    command = [sys.executable, "-m", "kernelbench_runner.cli", "run", "--model", "reference"]
    command += ["--run-id", "k9", "--output-dir", str(out), "--service-url", kernel_service_url]
    command += ["--backend", "torch", "--concurrency", "1", "--limit", "6"]
    evaluations = out / "k9" / "evaluations.jsonl"
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (evaluations.exists() and evaluations.read_bytes().count(b"\n") >= 2):
            assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stdout.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no evaluation written within 120 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    written = evaluations.read_bytes()
    before = written[: written.rfind(b"\n") + 1]  # complete rows (a torn tail is dropped on resume)
    done_before = {json.loads(line)["task_id"] for line in before.splitlines()}
    assert 2 <= len(done_before) < 6  # killed mid-run

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    resumed = next(line for line in rerun.stdout.splitlines() if "resumed (skipped)" in line)
    assert resumed.split("│")[2].strip() == str(len(done_before))

    after = evaluations.read_bytes()
    assert after.startswith(before)  # finished rows kept as written
    generations = [g["task_id"] for g in rows(out / "k9" / "generations.jsonl")]
    assert len(generations) == len(set(generations)) == 6  # nothing generated twice
    evaluated = [e["task_id"] for e in rows(evaluations)]
    assert set(evaluated) == set(generations)
    assert all(evaluated.count(t) == 1 for t in done_before)  # finished tasks skipped, not redone
    score = json.loads((out / "k9" / "score.json").read_text())
    assert score["n_tasks"] == 6 and score["metrics"]["correct_rate"] == 1.0


def test_one_problem_file(kernel_service_url: str, sample_file: Path, tmp_path: Path) -> None:
    """``--problem level1/2_ReLU.py``: one bare KernelBench problem file, no dataset."""
    problem = write_checkout(tmp_path / "checkout", sample_file) / "KernelBench" / "level1" / "2_ReLU.py"
    out = tmp_path / "runs"
    args = ["run", "--model", "reference", "--run-id", "one", "--output-dir", str(out)]
    result = invoke(*args, "--problem", str(problem), "--service-url", kernel_service_url)
    assert result.exit_code == 0, result.output
    (evaluation,) = rows(out / "one" / "evaluations.jsonl")
    assert evaluation["task_id"] == "L1_2_ReLU" and evaluation["data"]["outcome"] == "correct"
