"""KernelBench baselines through the runner itself: ``kernelbench-runner run --model reference|torch-compile``.

This is the command users type, unchanged: the runner starts its embedded kernel service (every visible
GPU) and evaluates every selected problem. ``reference`` submits each problem's own ``Model`` as
``ModelNew``: a sound harness reads correctness 100% and a geomean speedup of about 1.
``torch-compile`` submits ``torch.compile(Model)``: its fast_1 is compared with upstream's published
torch.compile (inductor, default mode) vs eager timings on an H100 (``--published``).

A device call is limited in time, so ``--budget-s`` stops the run (SIGINT, then the process group) and a
later call with the same ``--output-dir`` resumes it (the runner's own resume); the wall time of every
call is kept in ``bench_calls.json`` beside the run, so the totals (wall time, GPU-hours per 100 tasks)
add up over calls. ``--tar`` packs the run directory so it can travel back and forth.

    python bench/kernelbench_gpu.py --model reference --dataset-file problems.jsonl --level 1 \\
        --output-dir .runs --out bench/results/kernelbench_reference_l1_h100.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tarfile
from pathlib import Path
from typing import Any

from _budget import run_budgeted
from _report import save_report
from _sources import use_sources  # bench/ (the script's dir) is on sys.path

use_sources("kernelbench-runner")

from kernel_service.kernelbench.metrics import kernelbench_metrics, metrics_by_level  # noqa: E402
from kernelbench_runner.records import outcomes_from_evaluations  # noqa: E402

from benchmark_runner.artifacts import RunArtifacts  # noqa: E402


def selection_flags(args: argparse.Namespace) -> list[str]:
    """The runner flags that choose the tasks and the verdict rule: passed on, and named in the report."""
    flags = ["--model", args.model]
    for level in args.level:
        flags += ["--level", str(level)]
    task_ids = list(args.task_id)
    if args.task_ids_from:
        task_ids += [t for t in args.task_ids_from.read_text().split() if t]
    for task_id in task_ids:
        flags += ["--task-id", task_id]
    if args.limit:
        flags += ["--limit", str(args.limit)]
    if args.tolerance:
        flags += ["--tolerance", str(args.tolerance)]
    if args.tf32 != "default":
        flags += ["--tf32", args.tf32]
    if args.precision != "fp32":
        flags += ["--precision", args.precision]
    return flags


def run_runner(args: argparse.Namespace, run_id: str) -> tuple[int | None, float, str]:
    """One ``kernelbench-runner run`` subprocess, stopped at ``--budget-s``; (exit code or None, wall, tail)."""
    cmd = [sys.executable, "-m", "kernelbench_runner.cli", "run", *selection_flags(args), "--run-id", run_id]
    cmd += ["--dataset-file", str(args.dataset_file), "--output-dir", str(args.output_dir)]
    cmd += ["--concurrency", str(args.concurrency)]
    print("$", " ".join(cmd[1:]), flush=True)
    return run_budgeted(cmd, args.output_dir / f"{run_id}.log", args.budget_s)


def published_fast_1(path: Path | None) -> dict[str, Any]:
    """fast_1 and geomean of torch.compile over eager per level, from upstream's two timing JSONs."""
    if path is None:
        return {}
    eager = json.loads((path / "baseline_time_torch.json").read_text())
    comp = json.loads((path / "baseline_time_torch_compile_inductor_default.json").read_text())
    out: dict[str, Any] = {"source": str(path)}
    for level, rows in eager.items():
        both = [k for k in rows if k in comp.get(level, {})]
        sp = [rows[k]["mean"] / comp[level][k]["mean"] for k in both]
        if sp:
            out[level] = {
                "n": len(sp),
                "fast_1": sum(s > 1 for s in sp) / len(sp),
                "geomean_speedup": math.exp(sum(math.log(s) for s in sp) / len(sp)),
            }
    return out


def _phase_means(phases: list[dict[str, float]]) -> dict[str, float]:
    """Mean seconds per harness phase over the evaluations (0 where a phase did not run)."""
    names = sorted({k for p in phases for k in p})
    return {k: round(sum(p.get(k, 0.0) for p in phases) / len(phases), 4) for k in names} if phases else {}


def summarize_run(run_dir: Path) -> dict[str, Any]:
    """The runner's own metrics over what is evaluated so far, plus where the time went per task."""
    evaluations = [ev for _, ev in sorted(RunArtifacts(run_dir).read_evaluations().items())]
    records = outcomes_from_evaluations(evaluations)
    rows = []
    for ev in evaluations:
        d = ev.data.details or {}
        task_id = ev.task_id
        elapsed = d.get("elapsed") or {}
        rows.append(
            {
                "task_id": task_id,
                "outcome": d.get("outcome"),
                "speedup": d.get("speedup"),
                "ref_ms": (d.get("ref_timing") or {}).get("median"),
                "new_ms": (d.get("new_timing") or {}).get("median"),
                # in the worker, without the wait for a free GPU slot (--concurrency queues tasks)
                "eval_s": elapsed["total_s"] - elapsed.get("queue_s", 0.0) if "total_s" in elapsed else None,
                "latency_s": ev.latency_s,
                "message": (d.get("message") or "")[:300],
                "recycled": d.get("recycled"),
                "phases": d.get("phases"),  # where the worker's time went (load, correctness, timing...)
                "gate": d.get("timing_gate"),
            }
        )
    correct = [r for r in rows if r["outcome"] == "correct" and r["speedup"]]
    self_speedups = sorted(r["speedup"] for r in correct)
    evals = sorted(r["eval_s"] for r in rows if r["eval_s"] is not None)
    return {
        "n": len(rows),
        "metrics": kernelbench_metrics(records) if records else {},
        "by_level": metrics_by_level(records) if records else {},
        "within_0.98_1.02": sum(0.98 <= s <= 1.02 for s in self_speedups),
        "within_0.97_1.03": sum(0.97 <= s <= 1.03 for s in self_speedups),
        "speedup_min_max": [self_speedups[0], self_speedups[-1]] if self_speedups else None,
        "eval_s_mean": sum(evals) / len(evals) if evals else None,
        "phase_s_mean": _phase_means([r["phases"] for r in rows if r["phases"]]),
        "eval_s_median": evals[len(evals) // 2] if evals else None,
        "not_correct": [
            f"{r['task_id']}: {r['outcome']} {r['message'][:160]}" for r in rows if r["outcome"] != "correct"
        ],
        "per_task": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="reference", choices=["reference", "torch-compile"])
    parser.add_argument("--dataset-file", type=Path, required=True)
    parser.add_argument("--level", type=int, action="append", default=[])
    parser.add_argument("--task-id", action="append", default=[], help="only this task (repeatable)")
    parser.add_argument(
        "--task-ids-from", type=Path, help="only the task ids in this file (whitespace-separated)"
    )
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--tolerance", type=float, help="atol = rtol [default: the runner's, upstream's]")
    parser.add_argument("--tf32", choices=["default", "off", "on"], default="default")
    parser.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--output-dir", type=Path, default=Path("runs"))
    parser.add_argument("--run-id", default="")
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop the run after this long")
    parser.add_argument("--published", type=Path, help="upstream results/timing/<GPU> folder (torch-compile)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tar", type=Path, help="also pack the run directory into this .tar.gz")
    args = parser.parse_args()

    import torch

    run_id = args.run_id or f"gpu-{args.model}-l{''.join(map(str, args.level)) or 'all'}"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    run_dir = args.output_dir / run_id
    calls_file = args.output_dir / f"{run_id}.calls.json"
    calls = json.loads(calls_file.read_text()) if calls_file.exists() else []
    before = len(RunArtifacts(run_dir).read_evaluations()) if run_dir.exists() else 0
    code, wall, tail = run_runner(args, run_id)
    summary = summarize_run(run_dir)
    calls.append({"exit_code": code, "wall_s": wall, "evaluated": summary["n"] - before})
    calls_file.write_text(json.dumps(calls, indent=1))
    gpus = max(torch.cuda.device_count(), 1)
    total_wall = sum(c["wall_s"] for c in calls)
    report = {
        "bench": "kernelbench_gpu",
        "command": " ".join(
            ["kernelbench-runner run", *selection_flags(args), "--dataset-file", args.dataset_file.name]
        ),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "complete": code == 0,
        "calls": calls,
        "wall_s_total": total_wall,
        "gpu_hours_per_100_tasks": total_wall * gpus / 3600 * 100 / summary["n"] if summary["n"] else None,
        "published_torch_compile": published_fast_1(args.published),
        "score_json": json.loads((run_dir / "score.json").read_text())["metrics"]
        if (run_dir / "score.json").exists() and code == 0
        else None,
        **summary,
        "runner_output_tail": tail if code else "",
    }
    save_report(args.out, report)
    brief = {k: v for k, v in report.items() if k not in ("per_task", "runner_output_tail")}
    print(json.dumps(brief, indent=1)[:6000])
    if args.tar:
        with tarfile.open(args.tar, "w:gz") as tar:
            tar.add(run_dir, arcname=run_id)
            tar.add(calls_file, arcname=calls_file.name)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
