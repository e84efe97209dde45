"""Throughput of the kernel service (issue 8 item 6): a batch of distinct real solutions, end to end.

On the H100 host (the lead runs this):

    .venv/bin/python bench/throughput.py --backend cuda --n 50 --out bench/results/throughput_h100.json

On CPU (CI machine, small batch):

    .venv/bin/python bench/throughput.py --backend torch --n 8 --baseline-n 2
    .venv/bin/python bench/throughput.py --backend cpp --n 3 --baseline-n 1

What it does, in one run:
1. **Service**: submits ``--n`` distinct, honest solutions (an elementwise ``out = a * c + b`` whose constant
   ``c``, unroll factor and block size vary with the index; each has its own reference with the same ``c``)
   concurrently to a running service (``--service-url``) or to one it embeds (real HTTP on 127.0.0.1), and
   reports evaluations/minute, queue wait, compile vs check+timing seconds and outcomes.
2. **Result cache**: resubmits ``--resubmit`` of them unchanged and reports the answer time (``cached``).
3. **Baseline**: ``--baseline-n`` other solutions of the same template, one after another, each as a fresh
   ``kernel-service eval`` process with an empty build dir (the sequential compile-then-time loop); the
   side-by-side ratio extrapolates its mean per evaluation to ``--n`` solutions.
4. **GPU busy share**: ``nvidia-smi`` utilization sampled during phase 1 (when present), and the share of
   the evaluation slots' wall time spent checking and timing (from the responses; also on CPU).

Prints a JSON summary; ``--out FILE`` writes it too. Budget: about 5 min on an H100 with 16 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a * {c!r} + b

N = {n}

def get_inputs():
    return [torch.rand(N, device="{device}"), torch.rand(N, device="{device}")]

def get_init_inputs():
    return []
"""

CUDA_SOLUTION = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#define UNROLL {unroll}
__global__ void scale_add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                 float* __restrict__ out, long n) {{
    long base = ((long)blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
    #pragma unroll
    for (int k = 0; k < UNROLL; ++k) {{
        long i = base + k;
        if (i < n) out[i] = a[i] * {c!r}f + b[i];
    }}
}}
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b) {{
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.sizes() == b.sizes(), "expected same-shape CUDA tensors");
    auto ac = a.contiguous(); auto bc = b.contiguous();
    auto out = torch::empty_like(ac);
    long n = ac.numel();
    int threads = {block};
    long blocks = (n + (long)threads * UNROLL - 1) / ((long)threads * UNROLL);
    scale_add_kernel<<<blocks, threads>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""
cpp_source = "torch::Tensor scale_add(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="tp_scale_add_{i}", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["scale_add"], extra_cuda_cflags=["-O3"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.scale_add(a, b)
'''

CPP_SOLUTION = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#define UNROLL {unroll}
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b) {{
    TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
    auto ac = a.contiguous(); auto bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>(); const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    int64_t n = ac.numel(), i = 0;
    for (; i + UNROLL <= n; i += UNROLL)
        for (int k = 0; k < UNROLL; ++k) po[i + k] = pa[i + k] * {c!r}f + pb[i + k];
    for (; i < n; ++i) po[i] = pa[i] * {c!r}f + pb[i];
    return out;
}}
"""
ext = load_inline(name="tp_scale_add_cpu_{i}", cpp_sources=cpp_source, functions=["scale_add"],
                  extra_cflags=["-O2"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.scale_add(a, b)
'''

TORCH_SOLUTION = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        # variant {i}: unroll {unroll}, block {block} (no effect in plain PyTorch; keeps the source distinct)
        return torch.addcmul(b, a, torch.full((), {c!r}, dtype=a.dtype, device=a.device))
"""

TEMPLATES = {"cuda": CUDA_SOLUTION, "cpp": CPP_SOLUTION, "torch": TORCH_SOLUTION}


def variant(i: int, backend: str, n_elems: int) -> tuple[str, str]:
    """The i-th (reference, solution) pair; the constant is exact in fp32 so both sides agree bit for bit."""
    c = 1.0 + (i % 256) / 256.0  # exact binary fraction
    unroll = (1, 2, 4, 8)[i % 4]
    block = (128, 256, 512)[(i // 4) % 3]
    device = "cuda" if backend == "cuda" else "cpu"
    ref = REFERENCE.format(c=c, n=n_elems, device=device)
    sol = TEMPLATES[backend].format(c=c, unroll=unroll, block=block, i=i)
    return ref, sol


class GpuSampler:
    """``nvidia-smi`` utilization every ``period`` s in a thread; nothing when there is no nvidia-smi."""

    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.available = shutil.which("nvidia-smi") is not None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                vals = [float(x) for x in out.split() if x.strip()]
                if vals:
                    self.samples.append(sum(vals) / len(vals))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(self.period)

    def __enter__(self) -> GpuSampler:
        if self.available:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def summary(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        return {
            "mean_utilization_pct": statistics.fmean(self.samples),
            "busy_sample_share": sum(1 for s in self.samples if s > 0) / len(self.samples),
            "samples": len(self.samples),
        }


def stats(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {
        "mean": statistics.fmean(xs),
        "median": statistics.median(xs),
        "max": max(xs),
        "sum": sum(xs),
    }


async def submit_all(
    url: str, bodies: list[dict[str, Any]], concurrency: int, timeout: float
) -> tuple[list[dict[str, Any]], list[float], float]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = [0.0] * len(bodies)
    answers: list[dict[str, Any]] = [{} for _ in bodies]

    done = [0]
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:

        async def one(k: int, body: dict[str, Any]) -> None:
            async with sem:
                t0 = time.perf_counter()
                r = await client.post("/v1/evaluate", json=body)
                latencies[k] = time.perf_counter() - t0
                answers[k] = r.json() if r.status_code == 200 else {"outcome": f"http_{r.status_code}"}
            answers[k]["answered_at_s"] = round(time.perf_counter() - start, 2)  # from the first submission
            done[0] += 1  # as each answer lands: a run cut off by its time limit still shows its pace
            print(f"{done[0]}/{len(bodies)} answered at {time.perf_counter() - start:.1f} s: "
                  f"{answers[k].get('outcome')}", file=sys.stderr, flush=True)  # fmt: skip

        t0 = start = time.perf_counter()
        await asyncio.gather(*(one(k, b) for k, b in enumerate(bodies)))
        wall = time.perf_counter() - t0
    return answers, latencies, wall


def body_for(i: int, args: argparse.Namespace, *, use_cache: bool = True) -> dict[str, Any]:
    ref, sol = variant(i, args.backend, args.elems)
    return {
        "reference": ref,
        "solution": sol,
        "backend": args.backend,
        "options": {
            "correctness_trials": args.correctness_trials,
            "perf_trials": args.perf_trials,
            "warmup": args.warmup,
            "timeout_s": args.timeout,
            "use_result_cache": use_cache,
        },
    }


def run_baseline(args: argparse.Namespace, first_index: int) -> list[dict[str, Any]]:
    """Fresh ``kernel-service eval`` processes, one after another, each with an empty build dir."""
    out = []
    exe = [sys.executable, "-m", "kernel_service.cli", "eval"]
    for j in range(args.baseline_n):
        i = first_index + j
        ref, sol = variant(i, args.backend, args.elems)
        with tempfile.TemporaryDirectory(prefix="tp-baseline-") as tmp:
            rp, sp = Path(tmp) / "ref.py", Path(tmp) / "sol.py"
            rp.write_text(ref)
            sp.write_text(sol)
            cmd = [
                *exe,
                str(rp),
                str(sp),
                "--backend",
                args.backend,
                "--json",
                "--perf-trials",
                str(args.perf_trials),
                "--correctness-trials",
                str(args.correctness_trials),
                "--warmup",
                str(args.warmup),
                "--timeout",
                str(args.timeout),
                "--build-cache",
                str(Path(tmp) / "build"),
                "--work-dir",
                str(Path(tmp) / "work"),
                "--sandbox",
                args.sandbox,
                "--gpus",
                "all" if args.backend == "cuda" else "none",
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 120)
            wall = time.perf_counter() - t0
        try:
            res = json.loads(proc.stdout)
        except json.JSONDecodeError:
            res = {"outcome": "unparsed", "stderr": proc.stderr[-1000:]}
        out.append(
            {
                "index": i,
                "wall_s": wall,
                "outcome": res.get("outcome"),
                "compile_s": (res.get("elapsed") or {}).get("compile_s"),
            }
        )
        print(f"baseline {j + 1}/{args.baseline_n}: {res.get('outcome')} in {wall:.1f} s", file=sys.stderr)
    return out


def summarize_service(
    answers: list[dict[str, Any]], latencies: list[float], wall: float, slots: int
) -> dict[str, Any]:
    el = [a.get("elapsed") or {} for a in answers]
    outcomes: dict[str, int] = {}
    for a in answers:
        outcomes[str(a.get("outcome"))] = outcomes.get(str(a.get("outcome")), 0) + 1
    busy = [e.get("init_s", 0.0) + e.get("correctness_s", 0.0) + e.get("timing_s", 0.0) for e in el]
    return {
        "n": len(answers),
        "wall_s": wall,
        "evaluations_per_minute": len(answers) / wall * 60 if wall > 0 else None,
        "outcomes": outcomes,
        "latency_s": stats(latencies),
        "queue_wait_s": stats([e.get("queue_s", 0.0) for e in el]),
        "compile_s": stats([e.get("compile_s", 0.0) for e in el]),
        "check_and_timing_s": stats(busy),
        "eval_slots": slots,
        "eval_slot_busy_share": sum(busy) / (wall * slots) if wall > 0 and slots else None,
        "extension_cache_hits": sum(1 for a in answers if a.get("extension_cache_hit")),
        "speedup": stats([float(a["speedup"]) for a in answers if a.get("speedup")]),
        # each answer's timeline, in the order answered: where a batch's time goes (compile or queue)
        "per_answer": sorted(
            (
                {
                    "answered_at_s": a.get("answered_at_s"),
                    "latency_s": round(lat, 2),
                    "queue_s": round(e.get("queue_s", 0.0), 2),
                    "compile_s": round(e.get("compile_s", 0.0), 2),
                    "outcome": a.get("outcome"),
                }
                for a, e, lat in zip(answers, el, latencies, strict=True)
            ),
            key=lambda r: r["answered_at_s"] or 0.0,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["cuda", "cpp", "torch"], default="torch")
    p.add_argument("--n", type=int, default=None, help="distinct solutions (default: 50 cuda, 6 cpu)")
    p.add_argument(
        "--baseline-n", type=int, default=None, help="sequential baseline size (default 2; 0: skip)"
    )
    p.add_argument("--resubmit", type=int, default=5, help="unchanged resubmissions (result cache)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at once")
    p.add_argument("--service-url", default=None, help="a running service; default: embed one")
    p.add_argument("--compile-workers", type=int, default=None, help="embedded: default = CPU cores")
    p.add_argument("--cpu-workers", type=int, default=2, help="embedded, CPU backends: eval slots")
    p.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "unshare", "none"])
    p.add_argument("--elems", type=int, default=None, help="elements per input (default 16M cuda, 64K cpu)")
    p.add_argument("--perf-trials", type=int, default=20)
    p.add_argument("--correctness-trials", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument(
        "--fast-builds",
        action="store_true",
        help="embedded: precompiled header and light includes (issue 34)",
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    gpu = args.backend == "cuda"
    args.n = args.n or (50 if gpu else 6)
    args.baseline_n = 2 if args.baseline_n is None else args.baseline_n
    args.elems = args.elems or ((1 << 24) if gpu else (1 << 16))

    stop: Any = None
    service: Any = None
    url = args.service_url
    if url is None:
        from kernel_service.service import KernelService, KernelServiceConfig

        from benchmark_runner.service.app import make_app
        from benchmark_runner.service.server import start_server

        cores = os.cpu_count() or 1
        service = KernelService(
            KernelServiceConfig(
                gpus=None if gpu else [],
                cpu_workers=args.cpu_workers,
                compile_workers=args.compile_workers or cores,
                sandbox=args.sandbox,
                result_cache=True,
                build_pch=args.fast_builds,
                light_include=args.fast_builds,
                work_dir=Path(tempfile.mkdtemp(prefix="tp-service-")),
            )
        )
        t0 = time.perf_counter()
        server = start_server(make_app(service), startup_timeout=600)
        startup_s = time.perf_counter() - t0
        url, stop = server.url, server.stop
        print(f"embedded service at {url} (startup {startup_s:.1f} s)", file=sys.stderr)
    try:
        bodies = [body_for(i, args) for i in range(args.n)]
        with GpuSampler() as sampler:
            answers, latencies, wall = asyncio.run(
                submit_all(url, bodies, args.concurrency, args.timeout + 300)
            )
        slots = len(service.gpus) if service is not None and gpu else (args.cpu_workers if service else 1)
        svc = summarize_service(answers, latencies, wall, max(1, slots))
        pool = getattr(service, "compile_pool", None)
        svc["compile_workers"] = getattr(pool, "size", None)
        print(f"service: {args.n} evaluations in {wall:.1f} s", file=sys.stderr)

        k = min(args.resubmit, args.n)
        again, again_lat, _ = asyncio.run(submit_all(url, bodies[:k], 1, 60))
        cache = {
            "n": k,
            "all_cached": all(a.get("cached") for a in again),
            "same_outcomes": [a.get("outcome") for a in again] == [a.get("outcome") for a in answers[:k]],
            "answer_s": stats(again_lat),
        }
        baseline = run_baseline(args, first_index=args.n) if args.baseline_n > 0 else []
    finally:
        if stop is not None:
            stop()
    per_eval = statistics.fmean(b["wall_s"] for b in baseline) if baseline else None
    summary = {
        "bench": "throughput",
        "backend": args.backend,
        "host": platform.node(),
        "cpu_cores": os.cpu_count(),
        "hardware": next((a.get("hardware") for a in answers if a.get("hardware")), None),
        "torch_version": next((a.get("torch_version") for a in answers if a.get("torch_version")), None),
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("out",)
        },
        "service": svc,
        "gpu_utilization": sampler.summary(),
        "result_cache": cache,
        "baseline_sequential": {
            "n": len(baseline),
            "runs": baseline,
            "mean_wall_per_eval_s": per_eval,
            "evaluations_per_minute": 60 / per_eval if per_eval else None,
        },
        "speedup_vs_sequential": (per_eval * args.n / wall) if per_eval and wall > 0 else None,
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
