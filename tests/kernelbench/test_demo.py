"""``make demo`` (``python -m benchmark_runner.demo``): the KernelBench sample on CPU, embedded service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_runner import demo


@pytest.mark.slow  # ~20 s: starts the embedded kernel service in a subprocess twice
def test_demo_runs_reports_and_resumes(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    assert demo.main(["--limit", "2"], output_dir=out) == 0
    first = capfd.readouterr().out
    score = json.loads((out / "demo" / "score.json").read_text())
    assert score["n_tasks"] == 2 and score["metrics"]["correct_rate"] == 1.0
    assert "correct_rate" in first and "geomean_speedup" in first  # the score table
    page = out / "demo" / "report.html"
    assert f"report (open in a browser): {page.resolve()}" in first and page.is_file()

    assert demo.main(["--limit", "2"], output_dir=out) == 0  # a rerun resumes, it does not fail
    again = capfd.readouterr().out
    resumed = next(line for line in again.splitlines() if "resumed (skipped)" in line)
    assert resumed.split("│")[2].strip() == "2"
