"""``python -m benchmark_runner.demo`` (``make demo``): KernelBench end to end on a laptop, no GPU, no key.

Runs ``kernelbench-runner run --model reference --run-id demo --backend torch`` on the runner's bundled
sample (11 small problems): the ``reference`` baseline submits each problem's own ``Model`` as
``ModelNew``, and the kernel service, embedded in the runner and using CPU workers, compiles, checks
and times it like any kernel. Then ``kernelbench-runner report`` writes the HTML page. It prints the
score table and where the report is.

Rerunning resumes the finished run (nothing left to do, a second or so). If the stored run was made
by another configuration (e.g. the generation version changed), the demo starts it over with
``--overwrite``: a demo run holds nothing worth keeping. Extra arguments are passed to ``run``
(e.g. ``python -m benchmark_runner.demo --limit 3`` or ``--overwrite``).

The runner is a separate package (runners/kernelbench-runner, installed by ``make install``), so it is
started as a subprocess of this interpreter rather than imported: the core package never depends on
a runner.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from .cli import EXIT_REFUSED  # the run directory holds another configuration

RUN_ID = "demo"
RUNNER = "kernelbench-runner"


def runner_command() -> list[str]:
    """The kernelbench runner's CLI under this interpreter (the venv ``make install`` filled)."""
    return [sys.executable, "-m", "kernelbench_runner.cli"]


def _call(args: list[str]) -> int:
    print(f"$ {RUNNER} {' '.join(args)}", file=sys.stderr, flush=True)
    return subprocess.call([*runner_command(), *args])


def main(argv: list[str] | None = None, output_dir: Path = Path("runs")) -> int:
    try:
        import kernelbench_runner  # noqa: F401  (only to fail early with a useful message)
    except ImportError:
        print(
            f"the demo needs the KernelBench runner: pip install -e runners/{RUNNER} (or `make install`)",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    run_args = [
        "run",
        "--model",
        "reference",
        "--run-id",
        RUN_ID,
        "--backend",
        "torch",
        "--output-dir",
        str(output_dir),
        *(argv or []),
    ]
    code = _call(run_args)
    if code == EXIT_REFUSED and "--overwrite" not in run_args:
        print("the stored demo run differs from this one: starting it over", file=sys.stderr)
        code = _call([*run_args, "--overwrite"])
    if code != 0:
        print(f"demo: the run exited with code {code}", file=sys.stderr)
        return code
    out = subprocess.run(
        [*runner_command(), "report", "--run-id", RUN_ID, "--output-dir", str(output_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    if out.returncode != 0:
        print(f"demo: the report failed (exit code {out.returncode})", file=sys.stderr)
        return out.returncode
    report = Path(out.stdout.strip().splitlines()[-1])
    print(f"\nreport (open in a browser): {report}")
    print(f"demo finished in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
