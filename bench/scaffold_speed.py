"""How long `create-benchmark-runner` takes to generate a repo (target: < 1 s).

Measures, as the median of N runs, each into a fresh directory:
  in-process  generate() with copier already imported and the template mirror in sync (the
              rendering itself: mirror check + copier clone/render + answers file);
  dry-run     generate(dry_run=True) (render into a temp dir, no mirror);
  cli         the whole `create-benchmark-runner NAME` command in a new process (interpreter start,
              imports, mirror check, render), which is what a user waits for.
The first in-process run (mirror created, copier imported) is reported separately as `cold`.

Usage: python bench/scaffold_speed.py [-n 7] [--json bench/results/scaffold_speed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=7, help="runs per measurement (median reported)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="scaffold-speed-") as tmp_s:
        tmp = Path(tmp_s)
        os.environ["BENCHMARK_RUNNER_TEMPLATE_HOME"] = str(tmp / "mirror")  # never touch ~/.cache

        t0 = time.perf_counter()
        from benchmark_runner.scaffolder import RunnerSpec, generate

        spec = RunnerSpec.build("speed-bench")
        generate(spec, tmp / "cold")
        cold = time.perf_counter() - t0

        def timed(fn: object) -> list[float]:
            out = []
            for _ in range(args.n):
                start = time.perf_counter()
                fn()  # type: ignore[operator]
                out.append(time.perf_counter() - start)
            return out

        counter = iter(range(10**6))
        in_process = timed(lambda: generate(spec, tmp / f"warm{next(counter)}"))
        dry = timed(lambda: generate(spec, tmp / "never", dry_run=True))
        exe = Path(sys.executable).parent / "create-benchmark-runner"
        cli = timed(
            lambda: subprocess.run(
                [str(exe), "speed-bench", "--defaults", "--dest", str(tmp / f"cli{next(counter)}")],
                check=True,
                capture_output=True,
            )
        )

    figures = {
        "cold_first_generate_s": round(cold, 3),
        "generate_median_s": round(statistics.median(in_process), 3),
        "dry_run_median_s": round(statistics.median(dry), 3),
        "cli_process_median_s": round(statistics.median(cli), 3),
        "n": args.n,
        "target_s": TARGET_S,
    }
    for key, value in figures.items():
        print(f"{key:24} {value}")
    ok = figures["cli_process_median_s"] < TARGET_S and figures["generate_median_s"] < TARGET_S
    print("PASS" if ok else "FAIL", f"(target < {TARGET_S} s for a whole `create-benchmark-runner` command)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
