"""The judge's kept inputs (issue 18, ``backendbench/case_cache.py``): the first N opinfo ops judged in this
process (``evaluate_batch``, sandboxed sides) with their inputs built afresh and then kept, twice each,
side by side in one run.

    python bench/backendbench_case_cache.py --ops 80 --out bench/results/backendbench_case_cache_cpu.json
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import use_sources

use_sources("backendbench-runner")

import torch  # noqa: E402
from backendbench_runner.baselines import reference_source  # noqa: E402
from kernel_service.backendbench.evaluator import default_judge, evaluate_batch  # noqa: E402
from kernel_service.backendbench.suites import suite_ops  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    reqs: list[dict[str, Any]] = []
    for op in suite_ops("opinfo")[: args.ops]:
        try:
            reqs.append(
                {
                    "dataset": "backendbench-opinfo",
                    "op": op,
                    "suite": "opinfo",
                    "source": reference_source(op),
                }
            )
        except ValueError:
            continue
    judge = default_judge()
    evaluate_batch(reqs[:2], judge)  # the sides' first imports, OpInfo's import
    rows = []
    for _ in range(args.rounds):
        for label in ("built", "kept"):
            if label == "built":
                judge.memo.clear()
            t0 = time.perf_counter()
            verdicts = evaluate_batch(reqs, judge)["verdicts"]
            wall = time.perf_counter() - t0
            correct = sum(v["outcome"] == "correct" for v in verdicts)
            rows.append({"inputs": label, "wall_s": round(wall, 3), "ops": len(reqs), "correct": correct})
            print(f"inputs {label:5s} {wall:6.2f} s  {len(reqs)} ops  {correct} correct", flush=True)
    built = [r["wall_s"] for r in rows if r["inputs"] == "built"]
    kept = [r["wall_s"] for r in rows if r["inputs"] == "kept"]
    report = {
        "host": platform.node(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "rows": rows,
        "kept_over_built": sum(kept) / sum(built),
    }
    print(f"kept / built: {report['kept_over_built']:.2f}")
    if args.out:
        save_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
