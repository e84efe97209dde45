"""BackendBench harness check on a GPU: ``backendbench-runner run --model reference`` on smoke and opinfo.

Everything goes the way a user's run goes: the kernel service (the runner's ``make_service``, i.e.
``KernelService`` with its default sandbox unless ``--sandbox`` says otherwise) is served over real HTTP
in this process, and each suite is one ``backendbench-runner run --model reference --suite S
--service-url URL`` subprocess. Every op should come out correct (the reference kernels never call the
op under test). The report records per op the verdict, the device the worker ran it on, the speedup,
the evaluation time inside the worker (``eval_s``) and through the service (``latency_s``, queueing
included); it fails (exit 1) if an op is not correct or ran on the CPU while a GPU is visible (a
sandbox that hides the GPU from its workers).

    .venv/bin/python bench/backendbench_gpu.py --out bench/results/backendbench_gpu_h100.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import ROOT, use_sources  # bench/ (the script's dir) is on sys.path

use_sources("backendbench-runner")

import torch  # noqa: E402
from backendbench_runner.service import make_service  # noqa: E402
from kernel_service.service import KernelServiceConfig  # noqa: E402

from benchmark_runner.artifacts import RunArtifacts  # noqa: E402
from benchmark_runner.service import make_app  # noqa: E402
from benchmark_runner.service.server import start_server  # noqa: E402


def run_suite(url: str, suite: str, out_dir: Path, args: argparse.Namespace) -> tuple[int, float, str]:
    """One ``backendbench-runner run`` subprocess; (exit code, wall seconds, output tail)."""
    cmd = [sys.executable, "-m", "backendbench_runner.cli", "run", "--model", "reference", "--suite", suite]
    cmd += ["--run-id", f"gpu-{suite}", "--service-url", url, "--output-dir", str(out_dir)]
    cmd += ["--concurrency", str(args.concurrency), "--overwrite"]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.suite_timeout)
    return proc.returncode, time.perf_counter() - t0, (proc.stdout + proc.stderr)[-3000:]


def suite_rows(run_dir: Path) -> list[dict[str, Any]]:
    artifacts = RunArtifacts(run_dir)
    rows = []
    for task_id, ev in sorted(artifacts.read_evaluations().items()):
        d = ev.data.details
        rows.append(
            {
                "suite": task_id.split("/")[0],
                "op": task_id.split("/", 1)[1],
                "outcome": ev.data.outcome,
                "correctness": d.get("correctness"),
                "performance": d.get("performance"),
                "device": d.get("device"),
                "n_inputs": (d.get("n_correctness_inputs") or 0) + (d.get("n_perf_inputs") or 0),
                "n_perf_inputs": d.get("n_perf_inputs"),
                "eval_s": d.get("duration_s"),
                "latency_s": ev.latency_s,
                "failing": [i for i in d.get("inputs", []) if not i.get("correct")][:3],
                "feedback": d.get("feedback", "") if d.get("correctness") != 1.0 else "",
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "backendbench_gpu.json")
    parser.add_argument("--suites", default="smoke,opinfo")
    parser.add_argument("--limit", type=int, default=0, help="ops per suite at most (0: all)")
    parser.add_argument("--concurrency", type=int, default=4, help="ops in flight per suite")
    parser.add_argument("--suite-timeout", type=float, default=1800.0, help="seconds per suite run")
    parser.add_argument(
        "--sandbox",
        choices=["auto", "unshare", "none"],
        default=KernelServiceConfig().sandbox,
        help="worker isolation [default: the kernel service's default]",
    )
    args = parser.parse_args()

    gpus = torch.cuda.device_count()
    service = make_service(sandbox=args.sandbox)
    results: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    t_start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="backendbench-bench-") as tmp,
        start_server(make_app(service)) as server,
    ):
        startup_s = time.perf_counter() - t_start
        print(
            f"{type(service).__name__} at {server.url} (sandbox {args.sandbox}), up in {startup_s:.1f}s",
            flush=True,
        )
        for suite in args.suites.split(","):
            code, wall, tail = run_suite(server.url, suite, Path(tmp), args)
            rows = suite_rows(Path(tmp) / f"gpu-{suite}")
            results += rows
            score_file = Path(tmp) / f"gpu-{suite}" / "score.json"
            runs[suite] = {
                "exit_code": code,
                "wall_s": wall,
                "score": json.loads(score_file.read_text())["metrics"] if score_file.exists() else None,
                "output_tail": tail if code else "",
            }
            print(f"{suite}: exit {code}, {len(rows)} ops in {wall:.1f}s", flush=True)
            for r in rows:
                print(
                    f"  {r['op']:40s} {r['outcome']:18s} {r['device'] or '?':5s} perf {r['performance'] or 0:7.3f} "
                    f"eval {r['eval_s'] or 0:6.2f}s",
                    flush=True,
                )
    total_s = time.perf_counter() - t_start

    summary: dict[str, Any] = {}
    for suite in args.suites.split(","):
        rows = [r for r in results if r["suite"] == suite]
        evals = sorted(r["eval_s"] or 0.0 for r in rows)
        summary[suite] = {
            "ops": len(rows),
            "correct": sum(r["correctness"] == 1.0 for r in rows),
            "not_correct": sorted(f"{r['op']} ({r['outcome']})" for r in rows if r["correctness"] != 1.0),
            "devices": sorted({str(r["device"]) for r in rows}),
            "eval_s_total": sum(evals),
            "eval_s_median": evals[len(evals) // 2] if evals else 0.0,
            "suite_wall_s": runs[suite]["wall_s"],
            "exit_code": runs[suite]["exit_code"],
        }
    on_cpu = [f"{r['suite']}/{r['op']}" for r in results if gpus and r["device"] != "cuda"]
    report = {
        "bench": "backendbench_gpu",
        "path": "backendbench-runner run --model reference -> HTTP -> " + type(service).__name__,
        "model": "reference",
        "device": torch.cuda.get_device_name(0) if gpus else platform.processor() or "cpu",
        "gpus": gpus,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "sandbox": args.sandbox,
        "concurrency": args.concurrency,
        "timing_method": "cuda events per call, L2 flushed between trials, median"
        if gpus
        else "perf_counter",
        "service_startup_s": startup_s,
        "total_s": total_s,
        "ran_on_cpu_despite_gpu": on_cpu,
        "summary": summary,
        "runs": runs,
        "per_op": sorted(results, key=lambda r: (r["suite"], r["op"])),
    }
    save_report(args.out, report)
    print(json.dumps({"total_s": round(total_s, 1), "summary": summary, "ran_on_cpu": on_cpu[:5]}, indent=1))
    ok = not on_cpu and all(s["correct"] == s["ops"] > 0 for s in summary.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
