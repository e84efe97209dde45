"""Tests of the backendbench runner through its own CLI (yours to extend; `copier update` keeps this file).

`backendbench-runner run` with no `--service-url` starts the kernel service in-process (real HTTP on
loopback, evaluations in a real sandboxed worker subprocess); the offline models need no API: `reference`
must come out correct on every smoke op, `aten` (the op itself) must be flagged as a cheat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from benchmark_runner.llm import LLMConfig
from benchmark_runner.testing import FakeLLMServer
from click.testing import CliRunner

from backendbench_runner.benchmark import BUNDLED_DATASET, BackendBenchRunner, BackendBenchTask
from backendbench_runner.cli import cli

SMOKE_OPS = ["add", "mul", "relu", "sum", "mm", "softmax"]


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Path, dict[str, Any]]:
    """`backendbench-runner run ARGS` in an empty directory; the run dir and the score it wrote."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", *args])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / args[args.index("--run-id") + 1]
    return run_dir, json.loads((run_dir / "score.json").read_text())


def _outcomes(run_dir: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    return {r["task_id"]: r["data"]["outcome"] for r in rows}


def test_reference_model_passes_the_smoke_suite_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, score = _run(tmp_path, monkeypatch, "--model", "reference", "--run-id", "t")
    assert score["n_tasks"] == len(SMOKE_OPS)
    assert score["metrics"]["correctness"] == 1.0
    assert _outcomes(run_dir) == {f"smoke/{op}": "correct" for op in SMOKE_OPS}
    for task in score["per_task"]:  # default weights: score = overall = correctness x performance
        assert task["score"] == pytest.approx(task["details"]["performance"]) and task["score"] > 0
    for op in SMOKE_OPS:  # kernels/<op>/turn_<n>.py under the run
        assert f"{op}_kernel_impl" in (run_dir / "kernels" / op / "turn_0.py").read_text()

    report = CliRunner().invoke(cli, ["report", "--run-id", "t"])
    assert report.exit_code == 0, report.output
    assert "| smoke | 6 | 100.0% |" in report.output
    assert all(f"| smoke/{op} | correct |" in report.output for op in SMOKE_OPS)


def test_aten_model_is_flagged_as_calling_the_original_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, score = _run(tmp_path, monkeypatch, "--model", "aten", "--run-id", "a", "--ops", "relu,mm")
    assert _outcomes(run_dir) == {"smoke/relu": "calls_original_op", "smoke/mm": "calls_original_op"}
    assert score["metrics"]["correctness"] == 0.0 and score["metrics"]["score"] == 0.0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["generation_options"]["ops"] == "relu,mm"  # part of the run's identity


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--weights", "speed=1"], "--weights"),
        (["--weights", "overall=x"], "needs a number"),
        (["--suite", "huge"], "--suite"),
        (["--feedback", "always"], "--feedback"),
        (["--backend", "fortran"], "--backend"),
        (["--ops", " , "], "--ops"),
        (["--perf-processes", "0"], "--perf-processes"),
    ],
)
def test_bad_flags_are_usage_errors_naming_the_flag(flags: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["run", "--model", "reference", "--run-id", "x", *flags])
    assert result.exit_code == 2 and message in result.output


def test_ops_must_belong_to_the_suite() -> None:
    runner = BackendBenchRunner()
    runner.configure({"suite": "smoke", "ops": "relu,add"})
    assert [t.id for t in runner.load_tasks(BUNDLED_DATASET)] == ["smoke/relu", "smoke/add"]
    runner.configure({"suite": "smoke", "ops": "relu,frobnicate"})
    with pytest.raises(ValueError, match="--ops: frobnicate not in the smoke suite"):
        runner.load_tasks(None)


def test_dataset_file_rows_and_errors(tmp_path: Path) -> None:
    runner = BackendBenchRunner()
    runner.configure({})
    own = tmp_path / "ops.jsonl"
    own.write_text(BUNDLED_DATASET.read_text())
    tasks = runner.load_tasks(own)
    assert [(t.op, t.suite) for t in tasks if isinstance(t, BackendBenchTask)] == [
        ("add", "smoke"),
        ("relu", "smoke"),
        ("sigmoid", "opinfo"),
    ]
    own.write_text('{"id": "smoke/add", "question": "add", "op": "add"}\n{oops\n')
    with pytest.raises(ValueError, match="ops.jsonl:2"):
        runner.load_tasks(own)
    own.write_text('{"id": "smoke/add", "question": "add"}\n')
    with pytest.raises(ValueError, match="op"):
        runner.load_tasks(own)


def test_feedback_none_asks_once_and_saves_the_kernel(tmp_path: Path) -> None:
    """Without a service (or with --feedback none) the model answers once; the kernel is still saved."""
    runner = BackendBenchRunner()
    runner.configure({"feedback": "none", "backend": "torch"})
    task = runner.load_tasks(None)[2]
    answer = "```python\nimport torch\ndef relu_kernel_impl(x):\n    return x.clamp(min=0)\n```"
    log_dir = tmp_path / "run" / "logs" / "smoke_relu"
    with FakeLLMServer([{"content": answer}]) as fake:
        config = LLMConfig(model="m", base_url=fake.url, max_turns=4, extra={"feedback": "none"})
        result = anyio.run(runner.generate, task, "m", config, log_dir)
        prompt = fake.requests[0]["messages"][-1]["content"]
    assert len(fake.requests) == 1 and len(result.turns) == 1
    assert (
        "relu_kernel_impl" in prompt
        and "other PyTorch operations" in prompt
        and "relu(Tensor self)" in prompt
    )
    assert result.payload is not None and "clamp" in result.payload
    assert (tmp_path / "run" / "kernels" / "relu" / "turn_0.py").read_text() == result.payload


def test_torchbench_reads_an_upstream_trace_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--trace-file`` in BackendBench's own format: listed, then judged on its inputs (reference: correct)."""
    trace = tmp_path / "trace.txt"
    trace.write_text(
        "Operator: aten.add.Tensor\n"
        "cnt: 12, ((T([64, 32], f16), T([32], f16)), {})\n"
        "Operator: aten.sum.SymInt\n"
        "cnt: 3, ((T([16, 40], f32, [1, 16]), [0], True), {})\n"
        "Operator: aten._to_copy.default\n"
        "cnt: 7, ((T([8, 24], f32),), {'dtype': torch.bfloat16, 'layout': torch.strided, 'device': 'cuda'})\n"
        "Operator: aten.embedding.default\n"
        "cnt: 1, ((T([10, 4], f32), T([3], i64)), {})\n"
    )
    listing = CliRunner().invoke(cli, ["list-tasks", "--suite", "torchbench", "--trace-file", str(trace)])
    assert listing.exit_code == 0, listing.output
    assert [line.split("\t")[0] for line in listing.output.splitlines() if "\t" in line] == [
        "torchbench/add",
        "torchbench/sum",
        "torchbench/_to_copy",
    ]  # embedding: left out, as upstream leaves it out
    run_dir, score = _run(
        tmp_path, monkeypatch, "--model", "reference", "--run-id", "tb", "--suite", "torchbench",
        "--trace-file", str(trace),
    )  # fmt: skip
    assert _outcomes(run_dir) == {f"torchbench/{op}": "correct" for op in ("add", "sum", "_to_copy")}
    assert score["metrics"]["correctness"] == 1.0
