"""``kernelbench-runner run`` and ``benchmark_runner.run(KernelBenchRunner, ...)`` write the same run.

The runner's own flags (``--backend torch``, ``--level 1``) become keyword arguments; the run directory
is the same but for what differs between any two runs of a timed benchmark: timestamps, durations and
the kernel timings (the verdicts, the payloads, the tasks and the run's identity are equal).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from kernelbench_runner.benchmark import KernelBenchRunner
from kernelbench_runner.cli import cli

from benchmark_runner import run


def _verdict(row: dict[str, Any]) -> tuple[Any, ...]:
    data = row["data"]
    return row["task_id"], row["model"], data["status"], data["outcome"], row["error"]


def _files(run_dir: Path) -> list[str]:
    return sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_cli_and_run_write_the_same_kernelbench_run(kernel_service_url: str, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    flags = [
        "--model",
        "reference",
        "--backend",
        "torch",
        "--level",
        "1",
        "--limit",
        "2",
        "--concurrency",
        "1",
    ]
    res = CliRunner().invoke(
        cli, ["run", *flags, "--run-id", "cli", "--output-dir", str(out), "--service-url", kernel_service_url]
    )
    assert res.exit_code == 0, res.output
    result = run(
        KernelBenchRunner,
        model="reference",
        backend="torch",
        level=1,
        limit=2,
        concurrency=1,
        run_id="api",
        output_dir=out,
        service_url=kernel_service_url,
        quiet=True,
    )
    cli_dir, api_dir = out / "cli", out / "api"
    assert result.run_dir == api_dir and result.score.metrics["correct_rate"] == 1.0
    assert _files(api_dir) == _files(cli_dir)

    configs = [json.loads((d / "config.json").read_text()) for d in (cli_dir, api_dir)]
    for config in configs:
        config.pop("created_at")
        config["info"].pop("argv")
    assert configs[0] == configs[1]
    assert configs[1]["generation_options"]["backend"] == "torch" and configs[1]["generation_options"][
        "level"
    ] == [1]
    assert (api_dir / "tasks.jsonl").read_text() == (cli_dir / "tasks.jsonl").read_text()

    gens = [_lines(d / "generations.jsonl") for d in (cli_dir, api_dir)]
    for rows in gens:
        for row in rows:
            row.pop("latency_s")
    assert gens[0] == gens[1]
    verdicts = [[_verdict(r) for r in _lines(d / "evaluations.jsonl")] for d in (cli_dir, api_dir)]
    assert verdicts[0] == verdicts[1]
    scores = [json.loads((d / "score.json").read_text()) for d in (cli_dir, api_dir)]
    assert [s["metrics"]["correct_rate"] for s in scores] == [1.0, 1.0]
    assert [[t["task_id"] for t in s["per_task"]] for s in scores] == [
        [t["task_id"] for t in scores[0]["per_task"]]
    ] * 2
