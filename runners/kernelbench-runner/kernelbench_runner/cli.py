"""The `kernelbench-runner` command: the shared benchmark-runner CLI bound to this benchmark.

Template-owned: `copier update` keeps it in step with the template. Put benchmark logic in
benchmark.py, not here.
"""

from pathlib import Path

from benchmark_runner.cli import make_cli

from .benchmark import KernelBenchRunner

DEFAULT_DATASET_FILE = Path(__file__).parent / "data" / "sample.jsonl"

cli = make_cli(KernelBenchRunner, default_dataset_file=DEFAULT_DATASET_FILE)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
