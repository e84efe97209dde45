"""BackendBench on a GPU host: the opinfo suite's wall time with ``--model reference``, and the timing
self-check (each smoke op timed against itself).

1. The opinfo index is rebuilt for this torch and device unless it already is (``--index``), and its
   coverage of BackendBench's 298 overloads is reported.
2. The kernel service (the runner's ``make_service``, default sandbox) is served over real HTTP in this
   process and warmed with one small batch (the worker's first opinfo request imports OpInfo, ~5 s).
3. ``backendbench-runner run --model reference --suite opinfo --service-url URL`` runs as a subprocess
   (every task in flight, sent as batches): its wall time (``suite_wall_s``, the process; ``engine_wall_s``,
   the runner's own run loop), and every op must come out correct.
4. Self-check: each smoke op's kernel is the op itself (the cheat detector off), so the kernel and the op
   it is timed against are the same code: each op's performance (geomean speedup) must lie in
   [0.98, 1.02] (``--band``), in every round (``--trials``).

    .venv/bin/python bench/backendbench_suite_speed.py --out bench/results/backendbench_suite_speed_h100.json

The report's ``gpus`` is the service's GPU count (0 on the CPU path); each run's ops per worker
(``by_worker_each_run``) and the ops judged on another worker than in the run before
(``moved_ops_each_run``: each is cold there) say how the suite spread over the GPUs.

Exit 1 when an op of the suite is not correct, an op ran on the CPU while a GPU is visible, the suite
took longer than ``--max-wall`` (10 s), or the self-check leaves the band.
"""

from __future__ import annotations

import argparse
import math
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import ROOT, use_sources  # bench/ (the script's dir) is on sys.path

use_sources("backendbench-runner")

import anyio  # noqa: E402
import torch  # noqa: E402
from backendbench_runner.baselines import aten_source, reference_source  # noqa: E402
from backendbench_runner.service import make_service  # noqa: E402
from kernel_service.backendbench import opinfo  # noqa: E402
from kernel_service.backendbench.schemas import BackendBenchEvalRequest  # noqa: E402
from kernel_service.backendbench.suites import suite_ops  # noqa: E402
from kernel_service.service import KernelServiceConfig  # noqa: E402

from benchmark_runner.artifacts import RunArtifacts  # noqa: E402
from benchmark_runner.client import ServiceClient  # noqa: E402
from benchmark_runner.service import make_app  # noqa: E402
from benchmark_runner.service.server import start_server  # noqa: E402


def rebuild_index(device: str, mode: str) -> dict[str, Any]:
    """Rebuild the bundled index for this torch and ``device`` (``auto``: when built for another)."""
    current = opinfo.read_index()
    stale = current.get("torch") != torch.__version__ or current.get("device") != device
    took = None
    if mode == "rebuild" or (mode == "auto" and stale):
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "kernel_service.backendbench.opinfo", "build", "--device", device]
        subprocess.run(cmd, check=True)
        took = time.perf_counter() - t0
    index = opinfo.read_index()
    lines = opinfo.BACKENDBENCH_OPS.read_text().splitlines()
    wanted = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    listed, missing = opinfo.coverage(wanted, index)
    return {
        "built_with_torch": index.get("torch"),
        "device": index.get("device"),
        "rebuilt_s": took,
        "ops": len(index["ops"]),
        "backendbench_ops": len(wanted),
        "backendbench_listed": len(listed),
        "missing": missing,
    }


def run_suite(url: str, out_dir: Path, timeout: float) -> dict[str, Any]:
    """``backendbench-runner run --model reference --suite opinfo`` as a subprocess; wall times, verdicts."""
    cmd = [
        sys.executable,
        "-m",
        "backendbench_runner.cli",
        "run",
        "--model",
        "reference",
        "--suite",
        "opinfo",
    ]
    cmd += ["--run-id", "speed", "--service-url", url, "--output-dir", str(out_dir), "--overwrite"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    found = re.search(r"wall time\D*([\d.]+)s", proc.stdout)
    rows = []
    for task_id, ev in sorted(RunArtifacts(out_dir / "speed").read_evaluations().items()):
        d = ev.data.details
        rows.append(
            {
                "op": task_id.split("/", 1)[1],
                "outcome": ev.data.outcome,
                "device": d.get("device"),
                "n_inputs": d.get("n_correctness_inputs"),
                "eval_s": d.get("duration_s"),
                "startup_s": d.get("startup_s"),
                "worker": d.get("worker_id"),
                "pairs_s": [(d.get("timing_gate") or {}).get(k) for k in ("pair_start_s", "pair_time_s")],
                "feedback": d.get("feedback", "") if ev.data.outcome != "correct" else "",
            }
        )
    return {
        "exit_code": proc.returncode,
        "suite_wall_s": wall,
        "engine_wall_s": float(found.group(1)) if found else None,
        "rows": rows,
        "output_tail": (proc.stdout + proc.stderr)[-3000:] if proc.returncode else "",
    }


async def self_check(url: str, trials: int) -> list[dict[str, Any]]:
    """Each smoke op timed against itself (its kernel is the op), as one batch."""
    ops = suite_ops("smoke")
    requests = []
    for op in ops:
        options = {"detect_original_op": False, "perf_trials": trials}
        request = BackendBenchEvalRequest(
            dataset="backendbench-smoke", op=op, suite="smoke", source=aten_source(op), options=options
        )
        requests.append({"kind": "backendbench", **request.model_dump(mode="json")})
    async with ServiceClient(url, retries=0, timeout=3600) as client:
        results = (await client.post("/v1/evaluate-batch", {"requests": requests}))["results"]
    rows = []
    for op, r in zip(ops, results, strict=True):
        d = r["details"]
        timed = [i for i in d.get("inputs", []) if i.get("speedup")]
        rows.append(
            {
                "op": op,
                "outcome": r["outcome"],
                "performance": d.get("performance"),
                "speedups": [round(i["speedup"], 4) for i in timed],
                "ms": [(round(i["ref_ms"], 4), round(i["kernel_ms"], 4)) for i in timed],
                "timing_method": d.get("timing_method"),
                "timing_gate": d.get("timing_gate"),
                "eval_s": d.get("duration_s"),
                "worker": d.get("worker_id"),
            }
        )
    return rows


async def warm(url: str) -> float:
    """One small opinfo batch: the worker's first one imports OpInfo and starts its side processes."""
    ops = suite_ops("opinfo")[:2]
    requests = []
    for op in ops:
        request = BackendBenchEvalRequest(
            dataset="backendbench-opinfo", op=op, suite="opinfo", source=reference_source(op)
        )
        requests.append({"kind": "backendbench", **request.model_dump(mode="json")})
    t0 = time.perf_counter()
    async with ServiceClient(url, retries=0, timeout=600) as client:
        await client.post("/v1/evaluate-batch", {"requests": requests})
    return time.perf_counter() - t0


def by_worker(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per worker (``eval-<gpu>-<n>``): the ops it judged and the seconds they took."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        w = out.setdefault(str(r.get("worker")), {"ops": 0, "eval_s": 0.0})
        w["ops"] += 1
        w["eval_s"] += r["eval_s"] or 0.0
    return out


def moved(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> int:
    """Ops judged on another worker than in the run before (each such op is judged cold there)."""
    where = {r["op"]: r.get("worker") for r in before}
    return sum(1 for r in after if r["op"] in where and where[r["op"]] != r.get("worker"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "backendbench_suite_speed.json"
    )
    parser.add_argument("--index", choices=["auto", "keep", "rebuild"], default="auto")
    parser.add_argument("--max-wall", type=float, default=10.0, help="seconds the opinfo suite may take")
    parser.add_argument("--band", type=float, default=0.02, help="self-check: |performance - 1| at most")
    parser.add_argument(
        "--trials", type=int, nargs="+", default=[20],
        help="self-check: timed trials per input; several values run one self-check round each, in order "
        "(every round is judged against --band)",
    )  # fmt: skip
    parser.add_argument("--suite-timeout", type=float, default=1800.0)
    parser.add_argument(
        "--runs", type=int, default=2, help="opinfo runs through one service (last one counts; 0: none)"
    )
    parser.add_argument(
        "--sandbox",
        choices=["auto", "unshare", "none"],
        default=KernelServiceConfig().sandbox,
        help="worker isolation [default: the kernel service's default]",
    )
    parser.add_argument(
        "--mps", choices=["auto", "on", "off"], default="auto", help="the service's MPS setting"
    )
    args = parser.parse_args()

    gpus = torch.cuda.device_count()
    device = "cuda" if gpus else "cpu"
    index = rebuild_index(device, args.index)
    print(
        f"opinfo index: torch {index['built_with_torch']} on {index['device']}, {index['ops']} ops, "
        f"{index['backendbench_listed']}/{index['backendbench_ops']} of BackendBench's listed",
        flush=True,
    )
    service = make_service(sandbox=args.sandbox, mps=args.mps)
    t0 = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="backendbench-speed-") as tmp,
        start_server(make_app(service)) as server,
    ):
        startup_s = time.perf_counter() - t0
        service_gpus = len(getattr(service, "gpus", None) or [])  # the service's, 0 on the CPU path
        warm_s = anyio.run(warm, server.url)
        print(f"service up in {startup_s:.1f}s, warmed in {warm_s:.1f}s", flush=True)
        # The first run fills the workers' NVRTC kernel caches (ops PyTorch compiles at first use); the
        # last one is the suite's wall, as upstream's loop reads it with its own kernel cache warm.
        walls = []
        runs_by_worker: list[dict[str, dict[str, float]]] = []
        moved_each_run: list[int] = []
        previous: list[dict[str, Any]] = []
        suite: dict[str, Any] = {
            "rows": [],
            "suite_wall_s": math.nan,
            "engine_wall_s": None,
            "exit_code": None,
        }
        for i in range(args.runs):
            suite = run_suite(server.url, Path(tmp) / f"run{i}", args.suite_timeout)
            walls.append(round(suite["suite_wall_s"], 2))
            runs_by_worker.append(by_worker(suite["rows"]))
            moved_each_run.append(moved(previous, suite["rows"]))
            previous = suite["rows"]
            print(f"opinfo run {i + 1}/{args.runs}: {suite['suite_wall_s']:.1f}s", flush=True)
        rounds = [anyio.run(self_check, server.url, trials) for trials in args.trials]
    checks = rounds[0]

    rows = suite.pop("rows")
    not_correct = [
        f"{r['op']} ({r['outcome']}): {r['feedback'][:300]}" for r in rows if r["outcome"] != "correct"
    ]
    on_cpu = [r["op"] for r in rows if gpus and r["device"] != "cuda"]
    evals = sorted((r["eval_s"] or 0.0) for r in rows)
    out_of_band = [
        f"{r['op']} (round {k + 1})"
        for k, checked in enumerate(rounds)
        for r in checked
        if not (r["performance"] and abs(r["performance"] - 1.0) <= args.band)
    ]
    report = {
        "bench": "backendbench_suite_speed",
        "device": torch.cuda.get_device_name(0) if gpus else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": service_gpus,
        "sandbox": args.sandbox,
        "index": index,
        "service_startup_s": startup_s,
        "warm_s": warm_s,
        "opinfo": {
            **suite,
            "suite_wall_s_each_run": walls,
            # per run: each worker's ops and their seconds; ops judged on another worker than the run before
            "by_worker_each_run": runs_by_worker,
            "moved_ops_each_run": moved_each_run,
            "ops": len(rows),
            "correct": len(rows) - len(not_correct),
            "not_correct": not_correct,
            "ran_on_cpu_despite_gpu": on_cpu,
            "eval_s_total": sum(evals),
            "eval_s_median": evals[len(evals) // 2] if evals else None,
            "slowest": sorted(((r["eval_s"] or 0.0, r["op"]) for r in rows), reverse=True)[:10],
            # the last run's judge seconds of each op: the same op on one GPU and on two, side by side
            "eval_s_by_op": {r["op"]: round(r["eval_s"] or 0.0, 4) for r in rows},
            # of which starting side processes (a candidate or reference process and its CUDA context)
            "startup_s_total": sum(r["startup_s"] or 0.0 for r in rows),
            "startup_s_by_op": {
                r["op"]: round(r["startup_s"], 3) for r in rows if (r["startup_s"] or 0) >= 0.001
            },
            # and what one of its process pairs took to start and to time (s): is a second GPU's cost there?
            "pair_start_time_s_by_op": {r["op"]: r["pairs_s"] for r in rows},
            "max_wall_s": args.max_wall,
        },
        "self_check": {
            "band": args.band,
            "trials": args.trials[0],
            "out_of_band": out_of_band,
            "workers": sorted({str(r["worker"]) for checked in rounds for r in checked}),
            "ops": checks,
        },
        "self_check_rounds": [{"trials": t, "ops": r} for t, r in zip(args.trials, rounds, strict=True)],
    }
    save_report(args.out, report)
    print(
        f"opinfo: {len(rows) - len(not_correct)}/{len(rows)} correct, suite wall {suite['suite_wall_s']:.1f}s "
        f"(run loop {suite['engine_wall_s']}s), exit {suite['exit_code']}, {service_gpus} GPU(s); "
        f"ops moved to another worker each run {moved_each_run}"
    )
    for trials, checked in zip(args.trials, rounds, strict=True):
        for r in checked:
            perf = r["performance"] or math.nan
            print(
                f"  self-check ({trials} trials) {r['op']:8s} {r['outcome']:10s} performance {perf:.4f} "
                f"in {r['eval_s'] or math.nan:.2f}s on {r['worker']}"
            )
            print(f"    ms (op, kernel) {r['ms']} gate {r['timing_gate']}")
    for line in not_correct[:20]:
        print("  NOT CORRECT", line)
    ok = (
        suite["exit_code"] == 0
        and not not_correct
        and not on_cpu
        and suite["suite_wall_s"] <= args.max_wall
        and not out_of_band
    )
    print(f"report: {args.out} ({'ok' if ok else 'FAILED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
