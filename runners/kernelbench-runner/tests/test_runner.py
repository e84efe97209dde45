"""Tests of the kernelbench runner repo: yours to extend (`copier update` never overwrites this file).

They run standalone in this repo (`make test`, CPU only, no API key): the bundled sample, option
validation, the service re-export, and `kernelbench-runner run --model reference` end to end through
the CLI with the embedded kernel service, then `report`. The agent, loaders, metrics and the report in
a real browser are covered in depth by the project's root suite (tests/kernelbench/).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kernelbench_runner.benchmark import KernelBenchOptions, KernelBenchRunner
from kernelbench_runner.cli import cli
from kernelbench_runner.problems import KernelBenchTask
from kernelbench_runner.service import KernelBenchService, make_service


def test_bundled_sample_is_the_default_dataset() -> None:
    tasks = KernelBenchRunner().load_tasks(None)
    assert len(tasks) == 11 and all(isinstance(t, KernelBenchTask) for t in tasks)
    assert {t.level for t in tasks} == {1, 2}
    assert all("class Model" in t.reference_code and "def get_inputs" in t.reference_code for t in tasks)


def test_level_option_filters_and_bad_values_name_the_option() -> None:
    runner = KernelBenchRunner(options={"level": (2,)})
    assert {t.level for t in runner.load_tasks(None)} == {2}
    with pytest.raises(click.BadParameter, match="backend"):
        KernelBenchOptions.from_extra({"backend": "fortran"})


def test_service_module_is_the_kernel_service() -> None:
    service = make_service(gpus=[])
    assert isinstance(service, KernelBenchService) and service.name == "kernel"
    assert isinstance(KernelBenchRunner.embedded_service(), KernelBenchService)


def test_reference_run_end_to_end_with_the_embedded_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --service-url: the kernel service starts in-process (CPU workers) and checks every kernel."""
    monkeypatch.chdir(tmp_path)
    args = ["run", "--model", "reference", "--run-id", "t", "--backend", "torch", "--limit", "3"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    score = json.loads((tmp_path / "runs" / "t" / "score.json").read_text())
    assert score["n_tasks"] == 3
    assert score["metrics"]["correct_rate"] == 1.0, score["per_task"]
    assert 0.2 < score["metrics"]["geomean_speedup"] < 5.0  # the same code both sides: near 1

    again = CliRunner().invoke(cli, args)  # resumes: nothing left to do
    assert again.exit_code == 0 and "resumed (skipped)" in again.output

    report = CliRunner().invoke(cli, ["report", "--run-id", "t"])
    assert report.exit_code == 0, report.output
    page = Path(report.output.strip())
    assert page.is_file() and page.name == "report.html"
    html = page.read_text()
    assert html.count('<tr class="task"') == 3 and 'id="fast-p-curve"' in html
