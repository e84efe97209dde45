"""BackendBench harness check on a GPU: the ``reference`` model on the smoke and opinfo suites.

Every op should come out correct (the reference kernels never call the op under test); the script
records per op the verdict, the speedup and the wall time of its evaluation. Evaluations run in the
kernel service's sandboxed worker subprocesses (one per GPU), exactly as the service runs them.

    python bench/backendbench_gpu.py --out bench/results/backendbench_gpu.json [--suites smoke,opinfo]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "runners" / "backendbench-runner"))

import torch  # noqa: E402
from backendbench_runner.baselines import reference_source  # noqa: E402
from kernel_service.backendbench.schemas import BackendBenchEvalRequest, BackendBenchOptions  # noqa: E402
from kernel_service.backendbench.service import run_in_pool  # noqa: E402
from kernel_service.backendbench.suites import suite_ops  # noqa: E402
from kernel_service.pool import WorkerConfig, WorkerPool  # noqa: E402


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "backendbench_gpu.json")
    parser.add_argument("--suites", default="smoke,opinfo")
    parser.add_argument("--limit", type=int, default=0, help="ops per suite at most (0: all)")
    parser.add_argument("--perf-trials", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op evaluation")
    parser.add_argument(
        "--sandbox", choices=["auto", "unshare", "none"], default="auto", help="worker isolation"
    )
    args = parser.parse_args()

    gpus = torch.cuda.device_count()
    devices: list[str | None] = [str(i) for i in range(gpus)] if gpus else [None]
    tmp = tempfile.TemporaryDirectory(prefix="backendbench-bench-")
    pool = WorkerPool(WorkerConfig(role="eval", root=Path(tmp.name), sandbox=args.sandbox), devices)
    t_start = time.perf_counter()
    await pool.start()
    startup_s = time.perf_counter() - t_start
    results: list[dict[str, Any]] = []
    sem = asyncio.Semaphore(len(devices))

    async def one(suite: str, op: str) -> None:
        request = BackendBenchEvalRequest(
            dataset=f"backendbench-{suite}",
            op=op,
            suite=suite,
            source=reference_source(op),
            options=BackendBenchOptions(perf_trials=args.perf_trials, timeout_s=args.timeout),
        )
        async with sem:
            t0 = time.perf_counter()
            verdict = await run_in_pool(pool, request)
            wall = time.perf_counter() - t0
        failing = [i.model_dump() for i in verdict.inputs if not i.correct][:3]
        results.append(
            {
                "suite": suite,
                "op": op,
                "outcome": verdict.outcome,
                "correctness": verdict.correctness,
                "performance": verdict.performance,
                "n_inputs": verdict.n_correctness_inputs + verdict.n_perf_inputs,
                "eval_s": verdict.duration_s,
                "wall_s": wall,
                "failing": failing,
                "feedback": verdict.feedback if verdict.correctness < 1 else "",
            }
        )
        print(
            f"{suite:10s} {op:40s} {verdict.outcome:18s} perf {verdict.performance:6.3f} {wall:6.2f}s",
            flush=True,
        )

    try:
        for suite in args.suites.split(","):
            ops = suite_ops(suite)
            if args.limit:
                ops = ops[: args.limit]
            await asyncio.gather(*(one(suite, op) for op in ops))
    finally:
        await pool.close()
        tmp.cleanup()
    total_s = time.perf_counter() - t_start
    summary: dict[str, Any] = {}
    for suite in args.suites.split(","):
        rows = [r for r in results if r["suite"] == suite]
        summary[suite] = {
            "ops": len(rows),
            "correct": sum(r["correctness"] == 1.0 for r in rows),
            "not_correct": sorted(f"{r['op']} ({r['outcome']})" for r in rows if r["correctness"] < 1.0),
            "eval_s_total": sum(r["eval_s"] for r in rows),
            "eval_s_median": sorted(r["eval_s"] for r in rows)[len(rows) // 2] if rows else 0.0,
        }
    report = {
        "bench": "backendbench_gpu",
        "model": "reference",
        "device": torch.cuda.get_device_name(0) if gpus else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "workers": len(devices),
        "sandbox": args.sandbox,
        "worker_device": (pool.ready_info or {}).get("device"),
        "timing_method": "cuda events per call, L2 flushed between trials, median"
        if gpus
        else "perf_counter",
        "worker_startup_s": startup_s,
        "total_s": total_s,
        "summary": summary,
        "per_op": sorted(results, key=lambda r: (r["suite"], r["op"])),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"total_s": round(total_s, 1), "summary": summary}, indent=1))
    return 0 if all(s["correct"] == s["ops"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
