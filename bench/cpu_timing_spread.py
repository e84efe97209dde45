"""How far an honest kernel's CPU speedup strays from 1.0: the adversarial suite's honest matmul against its
reference, judged N times by the judge in this process (sides forked, timing interleaved as in the service).

    .venv/bin/python bench/cpu_timing_spread.py --jobs 12

Prints the sorted speedups and their median; the adversarial tests allow an honest (or harmless) kernel
up to 1.1x, so the spread on a 2-core box decides whether they can flake.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _sources import ROOT, use_sources

use_sources()

from kernel_service import harness, judge  # noqa: E402
from kernel_service.sandbox import HardenPolicy  # noqa: E402

CASES = ROOT / "tests" / "adversarial" / "cases"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=12)
    args = parser.parse_args()
    reference, solution = (CASES / "ref_matmul.py").read_text(), (CASES / "honest.py").read_text()
    tmp = Path(tempfile.mkdtemp(prefix="cpu-spread-"))
    env = harness.probe_environment()
    jd = judge.Judge(env, HardenPolicy(writable=[tmp]), tmp)
    options = harness.EvalOptions(correctness_trials=3, perf_trials=30, warmup=1, timeout_s=60)  # the suite's
    speedups = []
    try:
        for i in range(args.jobs):
            job = harness.Job(job_id=str(i), reference=reference, solution=solution, backend="torch",
                              options=options, build_dir=str(tmp / "build"))  # fmt: skip
            (tmp / f"job{i}").mkdir()
            result = judge.evaluate(jd, job, tmp / f"job{i}", env, lambda _phase: None)
            speedups.append(float(result["speedup"]))
    finally:
        jd.close()
    print("speedups", sorted(round(s, 3) for s in speedups), "median", round(statistics.median(speedups), 3))


if __name__ == "__main__":
    main()
