"""``python -m benchmark_runner.demo`` (``make demo``): KernelBench end to end on a laptop, no GPU, no key.

Does what ``kernelbench-runner run --model reference --run-id demo --backend torch`` does, through the
Python API (``benchmark_runner.run``), on the runner's bundled sample (11 small problems): the
``reference`` baseline submits each problem's own ``Model`` as ``ModelNew``, and the kernel service,
embedded in this process and using CPU workers, compiles, checks and times it like any kernel. Then
the runner's report writes the HTML page. It prints the score table and where the report is.

Rerunning resumes the finished run (nothing left to do, a second or so). If the stored run was made
by another configuration (e.g. the generation version changed), the demo starts it over with
``overwrite``: a demo run holds nothing worth keeping. Extra arguments are ``run`` flags
(e.g. ``python -m benchmark_runner.demo --limit 3`` or ``--overwrite``).

The runner is a separate package (runners/kernelbench-runner, installed by ``make install``), imported
only here, when the demo runs: the core package never depends on a runner.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .api import RunError, RunRefusedError, run
from .cli import parse_run_args, print_run_summary

RUN_ID = "demo"
RUNNER = "kernelbench-runner"


def main(argv: list[str] | None = None, output_dir: Path = Path("runs")) -> int:
    try:
        from kernelbench_runner.benchmark import KernelBenchRunner
    except ImportError:
        print(
            f"the demo needs the KernelBench runner: pip install -e runners/{RUNNER} (or `make install`)",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    flags = [
        "--model",
        "reference",
        "--run-id",
        RUN_ID,
        "--backend",
        "torch",
        "--output-dir",
        str(output_dir),
    ]
    flags += argv or []
    try:
        kwargs = parse_run_args(KernelBenchRunner, flags)  # the run flags as run()'s keyword arguments
    except click.UsageError as exc:
        exc.show()
        return exc.exit_code
    print(f"$ {RUNNER} run {' '.join(flags)}  (in this process: benchmark_runner.run)", file=sys.stderr)
    try:
        try:
            result = run(KernelBenchRunner, **kwargs)
        except RunRefusedError as exc:
            if kwargs["overwrite"]:
                raise
            print(f"{exc}\nthe stored demo run differs from this one: starting it over", file=sys.stderr)
            result = run(KernelBenchRunner, **{**kwargs, "overwrite": True})
    except RunError as exc:
        print(f"demo: {exc} (exit code {exc.exit_code})", file=sys.stderr)
        return exc.exit_code
    code = print_run_summary(result)
    if code != 0:
        print(f"demo: the run exited with code {code}", file=sys.stderr)
        return code
    try:
        report = KernelBenchRunner.report(result.run_dir)
    except click.ClickException as exc:
        print(f"demo: the report failed: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    print(f"\nreport (open in a browser): {report}")
    print(f"demo finished in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
