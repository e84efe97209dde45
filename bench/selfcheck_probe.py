"""Why a small op timed against itself reads its candidate side 1-4% slow on the H100 (issue 18's smoke
self-check: 0.956-0.996 at 039fbd8, against 0.98-1.02), one arrangement at a time, in this process
(the worker's code path: ``evaluate_batch`` with a sandboxed judge):

* ``as_is``: each smoke op's kernel is the op itself, judged once;
* ``spun``: the same, with ``--spin-ms`` of matmuls on the judge's GPU right before the op's timing
  (the candidate is timed first: if the GPU's clocks were still low after the correctness pass, this
  removes the bias);
* ``twice``: each op judged twice back to back, the second verdict kept (a GPU still busy from the first).

    python bench/selfcheck_probe.py --out $OUT/selfcheck_probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import use_sources

use_sources("backendbench-runner")

import torch  # noqa: E402
from backendbench_runner.baselines import aten_source  # noqa: E402
from kernel_service.backendbench import evaluator  # noqa: E402
from kernel_service.backendbench.suites import suite_ops  # noqa: E402


def busy(ms: float) -> None:
    """About ``ms`` of matmuls on the current GPU, waited for (nothing on a CPU)."""
    if not torch.cuda.is_available() or ms <= 0:
        return
    a = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        for _ in range(8):
            a = (a @ a).tanh_()
        torch.cuda.synchronize()


def request(op: str, trials: int) -> dict[str, Any]:
    return {
        "dataset": "backendbench-smoke", "op": op, "suite": "smoke", "source": aten_source(op),
        "options": {"detect_original_op": False, "perf_trials": trials},
    }  # fmt: skip


def performances(verdicts: list[dict[str, Any]]) -> dict[str, float]:
    return {v["op"]: round(float(v["performance"]), 4) for v in verdicts}


def hops(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per op: the path's cost through the reference process (subtracted from both sides) and the calls a
    reading (the cost is divided among them). The path through a candidate's own process is measured by
    ``process_drift_probe.py``: judging no longer spends null calls on it."""
    out = {}
    for v in verdicts:
        gate = v.get("timing_gate") or {}
        out[v["op"]] = {"null_us": gate.get("null_us"), "calls": gate.get("calls_per_reading")}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--spin-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=2, help="each arrangement this many times")
    args = parser.parse_args()
    ops = suite_ops("smoke")
    judge = evaluator.default_judge()
    original = evaluator._time_cases

    def spun(*a: Any, **k: Any) -> Any:
        busy(args.spin_ms)
        return original(*a, **k)

    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "trials": args.trials,
        "spin_ms": args.spin_ms,
        "rounds": [],
    }
    evaluator.evaluate_batch([request(ops[0], 3)], judge)  # the sides' first imports
    for r in range(args.rounds):
        row: dict[str, Any] = {}
        t0 = time.perf_counter()
        as_is = evaluator.evaluate_batch([request(op, args.trials) for op in ops], judge)["verdicts"]
        row["as_is"] = performances(as_is)
        row["as_is_hops"] = hops(as_is)
        evaluator._time_cases = spun
        try:
            row["spun"] = performances(
                evaluator.evaluate_batch([request(op, args.trials) for op in ops], judge)["verdicts"]
            )
        finally:
            evaluator._time_cases = original
        twice = evaluator.evaluate_batch([request(op, args.trials) for op in ops for _ in range(2)], judge)
        row["twice"] = performances(twice["verdicts"][1::2])
        row["twice_hops"] = hops(twice["verdicts"][1::2])
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        report["rounds"].append(row)
        print(f"round {r + 1}: {json.dumps(row)}", flush=True)
    for arrangement in ("as_is", "spun", "twice"):
        values = [p for row in report["rounds"] for p in row[arrangement].values()]
        report[f"{arrangement}_median"] = statistics.median(values)
        print(
            f"{arrangement:6s} median {statistics.median(values):.4f} range {min(values):.4f}-{max(values):.4f}"
        )
    if args.out:
        save_report(args.out, report)
    judge.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
