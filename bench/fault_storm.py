"""Fault storm: a submission that faults the GPU harms no other.

    python3 bench/fault_storm.py --problems .gpudata/problems.jsonl --mps auto|on|off --gpus all \\
        --out FILE.json [--honest-level1 60] [--concurrency 6*GPUs] [--budget-s 540]

Starts a ``KernelService`` (compile step on) on the GPUs behind a real HTTP server, as
``bench/adversarial/run_gpu.py`` does, then:

1. Fault-free round: ``honest_triton`` and ``honest_cuda`` (in ``fault_storm/``, or shipped with the
   doctor: ``SHIPPED``), each against ``ref_add`` (a + b, fp32, 4096 x 4096), three times each; each
   kernel's baseline speedup is
   the median of its answers. The two CUDA fault modules are built meanwhile (correctness_trials 0, no
   timing: nothing of theirs runs on a GPU), so that no build falls inside the storm.
2. Storm: ``--honest-level1`` KernelBench level-1 references, each submitted as its own solution
   (``Model`` renamed ``ModelNew``, backend torch), 20 ``honest_triton``, 20 ``honest_cuda`` and 52 faults:
   12 ``fault_triton_first`` and 10 ``fault_cuda_first`` (an illegal address on the first call), 12
   ``fault_triton_timing`` and 10 ``fault_cuda_timing`` (the same, only from the 13th call of their process:
   inside timing), 6 ``fault_assert`` (a device-side assert) and 2 ``fault_hang`` (a Triton kernel that never
   ends; timeout_s 25). Shuffled with ``random.Random(0)``, at most ``--concurrency`` requests in flight,
   none started after ``--budget-s`` seconds of storm (those are counted as skipped). Every request has
   ``use_result_cache: false``: identical submissions all really run.
3. ``GET /v1/metrics``, kept whole (``pools.eval.replacements``, ``pools.eval.replace_s_max`` and
   ``retries`` where the service reports them).

Verdicts: an honest level-1 job is a false verdict unless ``correct`` at 0.95-1.05x; an honest custom kernel
unless ``correct`` within 5% of its fault-free baseline speedup. A fault is charged to its candidate when
its outcome is ``execution_failure`` (the hang: ``timeout``).

``fault_extra_worker_s``: per fault, its worker seconds less the median of the honest jobs of its family
(triton faults: honest_triton; cuda faults: honest_cuda; the assert: the level-1 jobs), never below 0 (the
hang: 0, its own timeout is its job), plus the metrics' ``replace_s_max`` (a worker's death to its
replacement being ready). A job's worker seconds are its ``elapsed.total_s`` less ``queue_s`` (waiting for a
worker, which under a storm of concurrent requests measures the other jobs) and ``compile_s`` (the CPU
compile pool, not a GPU worker); the same from ``total_s`` alone is reported too
(``fault_extra_total_s_max``).

Level-1 selection: level-1 problems in ``problem_id`` order, skipping ``LEVEL1_SKIP``: those that, judged
as their own solution in this repo's 14 earlier level-1 sweeps (``bench/results/*level1*.json`` at 6e9622e), took over
5 s an evaluation or read outside 0.97-1.03x at least once.

Exit code 0 when no honest job got a false verdict, every fault was charged to its candidate and
``fault_extra_worker_s_max`` <= 10 s (and at least one of each ran); else 1. The whole run took 303 s on
2x H200 under MPS (service start 14 s, fault-free round and builds 65 s, storm 221 s), none skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import use_sources  # bench/ (the script's dir) is on sys.path

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "fault_storm"

OPTIONS: dict[str, Any] = {
    "correctness_trials": 3,
    "perf_trials": 30,
    "warmup": 3,
    "timeout_s": 240,
    "use_result_cache": False,
}
#: The hang's own timeout: its job is that long.
HANG_TIMEOUT_S = 25
#: A build only: the module imported (its extension loaded), no call of its model.
PREBUILD_OPTIONS: dict[str, Any] = {
    "correctness_trials": 0,
    "measure_performance": False,
    "timeout_s": 240,
    "use_result_cache": False,
}
CLIENT_TIMEOUT_S = 900
BASELINE_REPEATS = 3
HONEST_CUSTOM_EACH = 20
FAULT_COUNTS: dict[str, int] = {
    "fault_triton_first": 12,
    "fault_triton_timing": 12,
    "fault_cuda_first": 10,
    "fault_cuda_timing": 10,
    "fault_assert": 6,
    "fault_hang": 2,
}
BACKENDS: dict[str, str] = {
    "honest_triton": "triton",
    "honest_cuda": "cuda",
    "fault_triton_first": "triton",
    "fault_triton_timing": "triton",
    "fault_cuda_first": "cuda",
    "fault_cuda_timing": "cuda",
    "fault_assert": "torch",
    "fault_hang": "triton",
}
#: The honest kind each fault's worker seconds are read against.
FAMILY: dict[str, str] = {
    "fault_triton_first": "honest_triton",
    "fault_triton_timing": "honest_triton",
    "fault_hang": "honest_triton",
    "fault_cuda_first": "honest_cuda",
    "fault_cuda_timing": "honest_cuda",
    "fault_assert": "level1",
}
CUSTOM_KINDS = ("honest_triton", "honest_cuda")
LEVEL1_BAND = (0.95, 1.05)
BASELINE_TOLERANCE = 0.05
EXTRA_S_LIMIT = 10.0
#: Level-1 problems left out, by name, and why (their own-solution evaluations in bench/results/*level1*.json at
#: 6e9622e: ``git show 6e9622e:bench/results/NAME``).
LEVEL1_SKIP: dict[str, str] = {
    "33_BatchNorm": "read up to 1.072x against itself",
    "51_Argmax_over_a_dimension": "up to 7.0 s an evaluation",
    "59_conv_standard_3D__asymmetric_input__square_kernel": "read down to 0.948x against itself",
    "68_conv_transposed_3D__square_input__asymmetric_kernel": "up to 1.061x, 5.6 s an evaluation",
    "70_conv_transposed_3D__asymmetric_input__square_kernel": "0.982-1.036x, 5.7 s an evaluation",
    "76_conv_standard_1D_dilated_strided__": "up to 5.2 s an evaluation",
    "97_ScaledDotProductAttention": "up to 9.6 s an evaluation",
}


@dataclass(frozen=True)
class Job:
    """One request: what it is (``kind``: level1, honest_*, fault_*, prebuild_*) and its body's parts."""

    kind: str
    name: str
    reference: str
    solution: str
    backend: str
    options: dict[str, Any]

    @property
    def is_fault(self) -> bool:
        return self.kind.startswith("fault_")

    def body(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "solution": self.solution,
            "backend": self.backend,
            "options": self.options,
        }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=Path, required=True, help="KernelBench problems (JSON lines)")
    parser.add_argument("--out", type=Path, required=True, help="the summary JSON")
    parser.add_argument(
        "--mps", choices=["auto", "on", "off"], default="auto", help="the service's MPS setting"
    )
    parser.add_argument("--gpus", default="all", help="GPU indices for the service (`0,1`), or all")
    parser.add_argument(
        "--honest-level1", type=int, default=60, help="level-1 references submitted as their own solution"
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="requests in flight at most (default: 6 per GPU)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=540.0,
        help="no storm job starts after this many seconds of storm (those in flight finish)",
    )
    return parser.parse_args(argv)


# ---- the jobs ---------------------------------------------------------------------------------------


#: Kernels the doctor ships too (``kernel_service/doctor/data``): read from there, one copy of each.
SHIPPED = {
    "ref_add": "gpu_ref_add",
    "honest_triton": "gpu_honest_triton_add",
    "fault_triton_first": "gpu_fault_triton_first",
    "fault_triton_timing": "gpu_fault_triton_timing",
}


def kernel_source(stem: str) -> str:
    if stem in SHIPPED:
        from kernel_service.doctor import kernels

        return kernels.source(SHIPPED[stem])
    return (KERNELS / f"{stem}.py").read_text()


def as_own_solution(code: str) -> str:
    """A reference as its own solution: ``Model`` renamed ``ModelNew`` (``super(Model, self)`` included)."""
    return re.sub(r"\bModel\b", "ModelNew", code)


def level1_problems(path: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` level-1 problems by problem_id, ``LEVEL1_SKIP`` left out."""
    problems = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    level1 = sorted((p for p in problems if int(p.get("level", 0)) == 1), key=lambda p: int(p["problem_id"]))
    return [p for p in level1 if p["name"] not in LEVEL1_SKIP][:count]


def custom_job(kind: str, index: int, reference: str, options: dict[str, Any] | None = None) -> Job:
    opts = dict(options or OPTIONS)
    if kind == "fault_hang":
        opts["timeout_s"] = HANG_TIMEOUT_S
    return Job(kind, f"{kind}#{index}", reference, kernel_source(kind), BACKENDS[kind], opts)


def storm_jobs(problems: list[dict[str, Any]], reference: str) -> list[Job]:
    """Level-1 own solutions, the honest custom kernels and the faults, shuffled (seed 0)."""
    jobs = [
        Job("level1", str(p["name"]), p["code"], as_own_solution(p["code"]), "torch", dict(OPTIONS))
        for p in problems
    ]
    for kind in CUSTOM_KINDS:
        jobs += [custom_job(kind, i, reference) for i in range(HONEST_CUSTOM_EACH)]
    for kind, count in FAULT_COUNTS.items():
        jobs += [custom_job(kind, i, reference) for i in range(count)]
    random.Random(0).shuffle(jobs)
    return jobs


def warmup_jobs(reference: str) -> list[Job]:
    """The fault-free round (each custom kernel ``BASELINE_REPEATS`` times) and the CUDA faults' builds."""
    jobs = [custom_job(kind, i, reference) for kind in CUSTOM_KINDS for i in range(BASELINE_REPEATS)]
    for kind in ("fault_cuda_first", "fault_cuda_timing"):
        build = custom_job(kind, 0, reference, PREBUILD_OPTIONS)
        jobs.append(Job(f"prebuild_{kind}", f"prebuild_{kind}", build.reference, build.solution,
                        build.backend, build.options))  # fmt: skip
    return jobs


# ---- running them -----------------------------------------------------------------------------------


def gpu_of(worker_id: str | None) -> str | None:
    """The GPU of a worker id ``eval-<gpu>-<n>``."""
    parts = (worker_id or "").split("-")
    return parts[1] if len(parts) >= 3 else None


def worker_seconds(elapsed: dict[str, Any] | None) -> float | None:
    """A job's seconds on its eval worker: end to end less waiting for a worker and the compile step."""
    if not elapsed or elapsed.get("total_s") is None:
        return None
    total = float(elapsed["total_s"])
    return max(0.0, total - float(elapsed.get("queue_s") or 0.0) - float(elapsed.get("compile_s") or 0.0))


def retry_count(retries: Any) -> int:
    """An answer's ``retries``: a list of reasons (one a retry), or a count."""
    if isinstance(retries, list):
        return len(retries)
    return int(retries or 0)


def make_row(job: Job, res: dict[str, Any], wall_s: float, started_s: float) -> dict[str, Any]:
    elapsed = res.get("elapsed") if isinstance(res.get("elapsed"), dict) else None
    return {
        "kind": job.kind,
        "name": job.name,
        "backend": job.backend,
        "outcome": res.get("outcome"),
        "speedup": res.get("speedup"),
        "message": str(res.get("message") or "")[:300],
        "worker_id": res.get("worker_id"),
        "gpu": gpu_of(res.get("worker_id")),
        "retries": retry_count(res.get("retries")),
        "retry_reasons": [str(w)[:300] for w in res["retries"]]
        if isinstance(res.get("retries"), list)
        else [],
        "elapsed": elapsed,
        "worker_s": worker_seconds(elapsed),
        "total_s": None if elapsed is None else elapsed.get("total_s"),
        "wall_s": round(wall_s, 3),
        "started_s": round(started_s, 3),
        "recycled": res.get("recycled"),
        "timing_degraded": res.get("timing_degraded"),
    }


async def post(client: Any, job: Job, t0: float) -> dict[str, Any]:
    import httpx

    start = time.monotonic()
    try:
        resp = await client.post("/v1/evaluate", json=job.body())
        if resp.status_code == 200:
            res = resp.json()
        else:
            res = {"outcome": f"http_{resp.status_code}", "message": resp.text}
    except (httpx.HTTPError, ValueError) as exc:
        res = {"outcome": "http_error", "message": f"{type(exc).__name__}: {exc}"}
    return make_row(job, res, time.monotonic() - start, start - t0)


async def run_jobs(
    url: str, jobs: list[Job], concurrency: int, deadline: float | None = None
) -> list[dict[str, Any] | None]:
    """Every job, at most ``concurrency`` at once, in order; a job not started by ``deadline`` is None."""
    import httpx

    sem = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()

    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S) as client:

        async def one(job: Job) -> dict[str, Any] | None:
            async with sem:  # FIFO: the jobs start in their shuffled order
                if deadline is not None and time.monotonic() > deadline:
                    return None
                row = await post(client, job, t0)
            speedup = "" if row["speedup"] is None else f"x{row['speedup']:.3f}"
            print(
                f"[{time.monotonic() - t0:6.1f}s] {job.name:28s} {str(row['outcome']):18s} {speedup:7s} "
                f"gpu={row['gpu']} wall={row['wall_s']:.1f}s retries={row['retries']}",
                flush=True,
            )
            return row

        return list(await asyncio.gather(*(one(j) for j in jobs)))


async def get_metrics(url: str) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        resp = await client.get("/v1/metrics")
        resp.raise_for_status()
        metrics: dict[str, Any] = resp.json()
        return metrics


# ---- verdicts ---------------------------------------------------------------------------------------


def baseline_speedups(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each custom kernel's median speedup over its correct answers in the fault-free round."""
    out: dict[str, float | None] = {}
    for kind in CUSTOM_KINDS:
        speedups = [r["speedup"] for r in rows if r["kind"] == kind and r["outcome"] == "correct"]
        speedups = [s for s in speedups if s is not None]
        out[kind] = statistics.median(speedups) if speedups else None
    return out


def false_verdict(row: dict[str, Any], baseline: dict[str, float | None]) -> str | None:
    """Why an honest job's answer is a false verdict (None: it is not)."""
    outcome, speedup = row["outcome"], row["speedup"]
    if outcome != "correct":
        return f"outcome {outcome}"
    if speedup is None:
        return "no speedup"
    if row["kind"] == "level1":
        lo, hi = LEVEL1_BAND
        return None if lo <= speedup <= hi else f"x{speedup:.3f} outside {lo}-{hi}"
    base = baseline.get(row["kind"])
    if base is None:
        return "no fault-free baseline"
    off = speedup / base - 1
    return (
        None if abs(off) <= BASELINE_TOLERANCE else f"x{speedup:.3f} is {off:+.1%} from baseline x{base:.3f}"
    )


def charged(row: dict[str, Any]) -> bool:
    """Whether a fault was charged to its candidate."""
    return row["outcome"] == ("timeout" if row["kind"] == "fault_hang" else "execution_failure")


def family_medians(rows: list[dict[str, Any]], key: str, fallback: list[dict[str, Any]]) -> dict[str, float]:
    """The median ``key`` (worker_s or total_s) of each honest kind's correct answers in the storm (the
    fault-free round's where the storm has none)."""
    out: dict[str, float] = {}
    for family in set(FAMILY.values()):
        for source in (rows, fallback):
            values = [r[key] for r in source if r["kind"] == family and r["outcome"] == "correct"]
            values = [float(v) for v in values if v is not None]
            if values:
                out[family] = statistics.median(values)
                break
    return out


def fault_extras(
    rows: list[dict[str, Any]], baseline_rows: list[dict[str, Any]], replace_s: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Each fault row's ``extra_s`` (and ``extra_total_s``: the same from total_s), set in place; the
    families' medians of worker_s and of total_s."""
    worker_med = family_medians(rows, "worker_s", baseline_rows)
    total_med = family_medians(rows, "total_s", baseline_rows)
    for row in rows:
        if not row["kind"].startswith("fault_"):
            continue
        family = FAMILY[row["kind"]]
        for key, medians, out in (
            ("worker_s", worker_med, "extra_s"),
            ("total_s", total_med, "extra_total_s"),
        ):
            own = 0.0
            if row["kind"] != "fault_hang" and row[key] is not None and family in medians:
                own = max(0.0, float(row[key]) - medians[family])
            row[f"{out}_own"] = round(own, 3)
            row[out] = round(own + replace_s, 3)
    return worker_med, total_med


def per_kind(rows: list[dict[str, Any]], skipped: Counter[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in rows} | set(skipped)):
        mine = [r for r in rows if r["kind"] == kind]
        speedups = [r["speedup"] for r in mine if r["speedup"] is not None]
        worker_s = [r["worker_s"] for r in mine if r["worker_s"] is not None]
        entry: dict[str, Any] = {
            "n": len(mine),
            "skipped": skipped.get(kind, 0),
            "outcomes": dict(Counter(str(r["outcome"]) for r in mine)),
            "gpus": dict(Counter(str(r["gpu"]) for r in mine)),
            "retries": sum(r["retries"] for r in mine),
            "speedup_median": statistics.median(speedups) if speedups else None,
            "speedup_min_max": [min(speedups), max(speedups)] if speedups else None,
            "worker_s_median": statistics.median(worker_s) if worker_s else None,
        }
        if kind.startswith("fault_"):
            entry["charged"] = sum(charged(r) for r in mine)
            entry["extra_s_max"] = max((r["extra_s"] for r in mine), default=None)
            entry["extra_s_own_max"] = max((r["extra_s_own"] for r in mine), default=None)
        else:
            entry["false_verdicts"] = sum(r.get("false_verdict") is not None for r in mine)
        out[kind] = entry
    return out


# ---- the report -------------------------------------------------------------------------------------


def environment() -> tuple[str, dict[str, Any]]:
    """The GPU's name and the versions (read after the service stopped: no CUDA context beside it)."""
    versions: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    gpu = "unknown"
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        versions.update({"torch": torch.__version__, "cuda": torch.version.cuda})
    except Exception as exc:  # noqa: BLE001
        versions["torch_error"] = str(exc)[:200]
    try:
        import triton

        versions["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        versions["triton"] = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10
        )
        versions["commit"] = commit.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        versions["commit"] = None
    return gpu, versions


def print_summary(summary: dict[str, Any]) -> None:
    print("\n| kind | n | skipped | outcomes | false verdicts / charged | worker s median | max extra s |")
    print("|---|---|---|---|---|---|---|")
    for kind, e in summary["per_kind"].items():
        verdicts = f"{e['charged']}/{e['n']} charged" if "charged" in e else f"{e['false_verdicts']} false"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(e["outcomes"].items()))
        med = "" if e["worker_s_median"] is None else f"{e['worker_s_median']:.1f}"
        extra = "" if e.get("extra_s_max") is None else f"{e['extra_s_max']:.1f}"
        print(f"| {kind} | {e['n']} | {e['skipped']} | {outcomes} | {verdicts} | {med} | {extra} |")
    print(
        f"\nGPUs {summary['gpus']} ({summary['gpu']}), MPS {summary['mps']}: "
        f"honest false verdicts {summary['honest_false_verdicts']}/{summary['honest']}, "
        f"faults charged {summary['faults_charged_to_candidate']}/{summary['faults']}, "
        f"fault_extra_worker_s_max {summary['fault_extra_worker_s_max']} s "
        f"(replace_s_max {summary['replace_s_max']}, replacements {summary['replacements']}), "
        f"retries {summary['retries']}, skipped {summary['skipped']}, wall {summary['wall_s']} s"
    )
    print(f"baseline speedups: {summary['baseline_speedups']}")
    for r in summary["false_verdicts"]:
        print(f"  FALSE {r['name']}: {r['false_verdict']} ({r['worker_id']}) {r['message'][:120]}")
    for r in summary["jobs"]:
        if r["kind"].startswith("fault_") and not charged(r):
            print(f"  NOT CHARGED {r['name']}: {r['outcome']} ({r['worker_id']}) {r['message'][:120]}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.monotonic()
    gpus = None if args.gpus == "all" else [int(g) for g in args.gpus.split(",")]
    problems = level1_problems(args.problems, args.honest_level1)
    reference = kernel_source("ref_add")
    use_sources()
    from kernel_service.service import KernelService, KernelServiceConfig

    from benchmark_runner.service.app import ServiceConfig, make_app
    from benchmark_runner.service.server import start_server

    service = KernelService(KernelServiceConfig(gpus=gpus, mps=args.mps))
    app = make_app(service, ServiceConfig())
    with start_server(app, startup_timeout=300) as server:
        mps_running = service.mps_running  # read while the service runs: shutdown stops the daemon
        n_gpus = len(service.gpus)
        concurrency = args.concurrency or 6 * max(1, n_gpus)
        env_info = dict(service.env_info)
        print(f"service up in {time.monotonic() - t_start:.1f}s: {n_gpus} GPUs, MPS running {mps_running}, "
              f"concurrency {concurrency}", flush=True)  # fmt: skip

        warm = [r for r in asyncio.run(run_jobs(server.url, warmup_jobs(reference), concurrency)) if r]
        baseline_rows = [r for r in warm if not r["kind"].startswith("prebuild_")]
        baseline = baseline_speedups(baseline_rows)
        print(f"fault-free round: {baseline}", flush=True)

        jobs = storm_jobs(problems, reference)
        t_storm = time.monotonic()
        answers = asyncio.run(run_jobs(server.url, jobs, concurrency, deadline=t_storm + args.budget_s))
        storm_wall_s = time.monotonic() - t_storm
        metrics = asyncio.run(get_metrics(server.url))
    gpu, versions = environment()

    rows = [r for r in answers if r is not None]
    skipped = Counter(j.kind for j, r in zip(jobs, answers, strict=True) if r is None)
    eval_pool = (metrics.get("pools") or {}).get("eval") or {}
    replace_s_max = eval_pool.get("replace_s_max")
    worker_med, total_med = fault_extras(rows, baseline_rows, float(replace_s_max or 0.0))
    honest = [r for r in rows if not r["kind"].startswith("fault_")]
    for r in honest:
        r["false_verdict"] = false_verdict(r, baseline)
    faults = [r for r in rows if r["kind"].startswith("fault_")]
    for r in faults:
        r["charged"] = charged(r)
    false_rows = [r for r in honest if r["false_verdict"] is not None]
    extra_max = max((r["extra_s"] for r in faults), default=0.0)
    summary: dict[str, Any] = {
        "bench": "fault_storm",
        "gpus": n_gpus,
        "mps": mps_running,
        "honest": len(honest),
        "honest_false_verdicts": len(false_rows),
        "faults": len(faults),
        "faults_charged_to_candidate": sum(r["charged"] for r in faults),
        "fault_extra_worker_s_max": round(extra_max, 3),
        "wall_s": round(time.monotonic() - t_start, 1),
        "storm_wall_s": round(storm_wall_s, 1),
        "skipped": sum(skipped.values()),
        "skipped_by_kind": dict(skipped),
        "fault_extra_total_s_max": round(max((r["extra_total_s"] for r in faults), default=0.0), 3),
        "fault_extra_by_kind": {
            kind: max((r["extra_s"] for r in faults if r["kind"] == kind), default=None)
            for kind in FAULT_COUNTS
        },
        "replace_s_max": replace_s_max,
        "replacements": eval_pool.get("replacements"),
        "metrics_retries": metrics.get("retries"),
        "retries": sum(r["retries"] for r in rows),
        "family_worker_s_median": worker_med,
        "family_total_s_median": total_med,
        "baseline_speedups": baseline,
        "per_kind": per_kind(rows, skipped),
        "false_verdicts": false_rows,
        "metrics": metrics,
        "gpu": gpu,
        "versions": versions,
        "service_env": env_info,
        "settings": {
            "mps": args.mps,
            "gpus": args.gpus,
            "concurrency": concurrency,
            "budget_s": args.budget_s,
            "options": OPTIONS,
            "hang_timeout_s": HANG_TIMEOUT_S,
            "honest_level1": args.honest_level1,
            "level1_problems": [p["name"] for p in problems],
            "level1_skip": LEVEL1_SKIP,
            "fault_counts": FAULT_COUNTS,
            "honest_custom_each": HONEST_CUSTOM_EACH,
        },
        "baseline_jobs": warm,
        "jobs": rows,
    }
    save_report(args.out, json.loads(json.dumps(summary, default=str)))
    print_summary(summary)
    ok = (
        summary["honest"] > 0
        and summary["faults"] > 0
        and summary["honest_false_verdicts"] == 0
        and summary["faults_charged_to_candidate"] == summary["faults"]
        and summary["fault_extra_worker_s_max"] <= EXTRA_S_LIMIT
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
