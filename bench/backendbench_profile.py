"""Where a BackendBench suite's time goes (issue 18): the whole opinfo suite judged in this process (the
worker's code path: ``evaluate_batch`` with a sandboxed judge) under cProfile, each op's duration, and,
for the slowest ops, each correctness input's first and second call of the reference kernel and of the
op itself in a fresh process (compilation at first use shows as a first call far above the second).

    python bench/backendbench_profile.py --out $OUT/backendbench_profile.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import use_sources

use_sources("backendbench-runner")

import torch  # noqa: E402
from backendbench_runner.baselines import reference_source  # noqa: E402
from kernel_service.backendbench.evaluator import default_judge, evaluate_batch, prepare  # noqa: E402
from kernel_service.backendbench.schemas import BackendBenchEvalRequest  # noqa: E402
from kernel_service.backendbench.suites import suite_ops  # noqa: E402


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def request(op: str) -> dict[str, Any]:
    return {"dataset": "backendbench-opinfo", "op": op, "suite": "opinfo", "source": reference_source(op)}


def per_case(op: str) -> dict[str, Any]:
    """In this (fresh) process: prepare, then each input's first and second call, kernel and op."""
    t0 = time.perf_counter()
    prep = prepare(BackendBenchEvalRequest.model_validate(request(op)))
    prep_s = time.perf_counter() - t0
    ns: dict[str, Any] = {}
    exec(compile(reference_source(op), f"<ref {op}>", "exec"), ns)  # noqa: S102 - our reference kernels
    kernel = ns[BackendBenchEvalRequest.model_validate(request(op)).function_name]
    rows = []
    for case in prep.correctness:  # type: ignore[union-attr]
        row: dict[str, Any] = {"dtype": case.dtype, "overload": str(case.overload)}
        for label, fn in (("kernel", kernel), ("op", case.overload)):
            times = []
            for _ in range(2):
                sync()
                t = time.perf_counter()
                try:
                    fn(*case.args, **case.kwargs)
                except Exception as exc:  # noqa: BLE001
                    row[f"{label}_error"] = repr(exc)[:200]
                sync()
                times.append(round((time.perf_counter() - t) * 1e3, 2))
            row[label] = times
        rows.append(row)
    rows.sort(key=lambda r: -max(r["kernel"][0], r["op"][0]))
    return {"op": op, "prepare_s": prep_s, "inputs": len(rows), "slowest_inputs": rows[:6]}


def profiled(
    reqs: list[dict[str, Any]], judge: Any, cumulative: int, own: int
) -> tuple[list[Any], float, str]:
    """``reqs`` judged as one batch under cProfile: the verdicts, the wall time and the listing (the top
    ``cumulative`` rows by cumulative time, then the top ``own`` by time spent in the function itself)."""
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    verdicts = evaluate_batch(reqs, judge)["verdicts"]
    prof.disable()
    wall = time.perf_counter() - t0
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("cumulative").print_stats(cumulative)
    stats.sort_stats("tottime").print_stats(own)
    return verdicts, wall, text.getvalue()


def profile_selfcheck(out: Path | None) -> int:
    """The smoke self-check's batch (each op's kernel is the op itself) under cProfile: where an op's
    timing in fresh pairs of processes spends its seconds."""
    from backendbench_runner.baselines import aten_source

    reqs = [
        {**request(op), "suite": "smoke", "dataset": "backendbench-smoke", "source": aten_source(op),
         "options": {"detect_original_op": False, "perf_trials": 20}}
        for op in suite_ops("smoke")
    ]  # fmt: skip
    judge = default_judge()
    evaluate_batch(reqs[:1], judge)  # the sides' first imports
    verdicts, wall, profile = profiled(reqs, judge, 45, 30)
    rows = [(v["op"], v["outcome"], round(v["performance"], 4), round(v["duration_s"], 2)) for v in verdicts]
    print(f"self-check batch: {wall:.1f} s", rows, flush=True)
    print(profile[:16000], flush=True)
    if out:
        save_report(out, {"wall_s": wall, "ops": rows, "profile": profile[-20000:]})
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--case-op")
    parser.add_argument("--slow", type=int, default=4)
    parser.add_argument(
        "--selfcheck", action="store_true", help="profile the smoke self-check (each op timed against itself)"
    )
    args = parser.parse_args()
    if args.case_op:
        print("CASE " + json.dumps(per_case(args.case_op)), flush=True)
        return 0
    if args.selfcheck:
        return profile_selfcheck(args.out)
    reqs = []
    for op in suite_ops("opinfo"):
        try:
            reqs.append(request(op))
        except ValueError:
            continue
    judge = default_judge()
    evaluate_batch(reqs[:2], judge)  # the sides' first imports
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    report: dict[str, Any] = {"gpu": gpu, "ops": len(reqs)}
    for label in ("cold", "warm"):
        verdicts, wall, profile = profiled(reqs, judge, 30, 25)
        durations = sorted(((v["duration_s"], v["op"]) for v in verdicts), reverse=True)
        report[label] = {
            "wall_s": wall,
            "correct": sum(v["outcome"] == "correct" for v in verdicts),
            "slowest": durations[:15],
            "median_s": durations[len(durations) // 2][0],
            "profile": profile[-12000:],
        }
        print(f"{label}: {wall:.1f} s, correct {report[label]['correct']}/{len(reqs)}", flush=True)
        print(durations[:12], flush=True)
    print(report["warm"]["profile"][:9000], flush=True)
    slow = [op for _, op in report["warm"]["slowest"][: args.slow]]
    cache = tempfile.mkdtemp(prefix="bbprof-nvrtc-")
    report["per_case"] = []
    for op in slow:
        for attempt in ("fresh_cache", "warm_cache"):  # the second process finds the first one's cubins
            env = {**os.environ, "PYTORCH_KERNEL_CACHE_PATH": cache}
            proc = subprocess.run(
                [sys.executable, __file__, "--case-op", op],
                capture_output=True,
                text=True,
                env=env,
                timeout=240,
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CASE ")), None)
            row = json.loads(line[5:]) if line else {"op": op, "error": proc.stderr[-1500:]}
            row["attempt"] = attempt
            report["per_case"].append(row)
            print(json.dumps(row)[:1500], flush=True)
    if args.out:
        save_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
