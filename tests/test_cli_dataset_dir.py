"""``--dataset-file`` takes a directory too (a dataset checkout such as ``KernelBench/``).

The runner decides what a directory means; a runner that reads only files turns it into a clear
usage error (exit 2) naming the path, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from benchmark_runner.base import BenchmarkRunner
from benchmark_runner.cli import make_cli
from benchmark_runner.examples.arithmetic import DATA_FILE, ArithmeticRunner
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import GenerationResult, Task


class FolderRunner(BenchmarkRunner):
    """Reads one task per ``*.json`` file of a folder."""

    NAME = "folder"

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        assert dataset_file is not None and dataset_file.is_dir()
        rows = [json.loads(p.read_text()) for p in sorted(dataset_file.glob("*.json"))]
        return self.parse_tasks(rows, str(dataset_file))

    async def generate(
        self, task: Task, model: str, llm_config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        raise NotImplementedError


def test_a_directory_reaches_load_tasks(tmp_path: Path) -> None:
    folder = tmp_path / "checkout"
    folder.mkdir()
    for i in (2, 1):
        (folder / f"t{i}.json").write_text(json.dumps({"id": f"t{i}", "question": f"q{i}"}))
    result = CliRunner().invoke(make_cli(FolderRunner), ["list-tasks", "--dataset-file", str(folder)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["t1\tq1", "t2\tq2"]


def test_a_file_only_runner_given_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    cli = make_cli(ArithmeticRunner, default_dataset_file=DATA_FILE)
    result = CliRunner().invoke(cli, ["list-tasks", "--dataset-file", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"cannot load tasks from {tmp_path}" in result.output
