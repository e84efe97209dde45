"""GPU adversarial cases through the real kernel service (issue 7): ``python bench/adversarial/run_gpu.py --out FILE.json``.

Starts a KernelService on the GPU(s) behind a real HTTP server, submits every case in ``cases/`` (GPU
variants: side streams, CUDA-event patching, TF32/bf16, lazy outputs, an infinite loop in a CUDA kernel,
GPU memory exhaustion...) plus the CPU cases of ``tests/adversarial/cases`` that make sense on a GPU, then an
honest submission after each case, and prints a case -> outcome table. A case PASSES when the cheat gets
no undeserved ``correct`` (or no speedup > 1) and the next honest submission is still ``correct``.
Runs in well under 5 minutes on an H100 (small shapes, 20 timed trials). Upstream KernelBench's three
adversarial kernels have a case each here, written anew: its non-default stream (``side_stream``), its
zeroed inputs (``cpu:mutate_inputs``) and its uninitialized result (``cpu:uninitialized_output``, not
yet run on a GPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
GPU_CASES = Path(__file__).parent / "cases"
CPU_CASES = ROOT / "tests" / "adversarial" / "cases"
OPTIONS = {"correctness_trials": 3, "perf_trials": 20, "warmup": 2, "timeout_s": 60}

#: case -> (reference file, backend, extra options, expectation). Expectations:
#: "not_correct": must not be judged correct; "no_gain": if correct, speedup must be <= 1.1;
#: "not_correct_or_no_gain"; "fault": any non-correct outcome, the service survives.
CASES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "side_stream": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "skip_go_wait": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "patch_cuda_event": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "patch_cuda_synchronize": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "tf32_matmul": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "lazy_subclass_gpu": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "triton_infinite_loop": ("ref_gpu_add", "triton", {"timeout_s": 20}, "fault"),
    "gpu_memory_hog": ("ref_gpu_add", "torch", {}, "fault"),
    "cpu:thread_offload": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "cpu:last_call_only": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "cpu:patch_perf_counter": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "cpu:patch_harness_compare": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "cpu:slow_reference": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "cpu:bf16_compute": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "cpu:steal_reference_output": ("ref_gpu_matmul", "torch", {}, "not_correct_or_no_gain"),
    "cpu:zero_reference_weights": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "cpu:mutate_inputs": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "cpu:uninitialized_output": ("ref_gpu_matmul", "torch", {}, "not_correct"),
    "cpu:reference_op_only": ("ref_gpu_matmul", "torch", {}, "no_custom_kernel"),
    "cpu:kill_service": ("ref_gpu_matmul", "torch", {}, "survives"),
}


def case_source(name: str) -> str:
    if name.startswith("cpu:"):
        # CPU cases take their shapes from the reference, so they run unchanged on the GPU problem.
        return (CPU_CASES / f"{name[4:]}.py").read_text().replace("__SERVICE_PID__", "0")
    return (GPU_CASES / f"{name}.py").read_text()


def judge(expect: str, res: dict[str, Any]) -> tuple[bool, str]:
    outcome, speedup = res.get("outcome"), res.get("speedup")
    if expect == "not_correct":
        return outcome != "correct", outcome
    if expect == "no_gain":
        return outcome != "correct" or (speedup is not None and speedup <= 1.1), f"{outcome} x{speedup}"
    if expect == "not_correct_or_no_gain":
        return outcome != "correct" or (speedup is not None and speedup <= 1.1), f"{outcome} x{speedup}"
    if expect == "no_custom_kernel":
        return res.get(
            "uses_custom_kernel"
        ) is False, f"{outcome} uses_custom_kernel={res.get('uses_custom_kernel')}"
    if expect in ("fault", "survives"):
        return True, outcome  # the verdict here is the health check that follows
    raise ValueError(expect)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    parser.add_argument(
        "--gpus", default="all", help="GPU indices for the service (`1`: the second GPU alone), or all"
    )
    parser.add_argument(
        "--mps", choices=["auto", "on", "off"], default="auto", help="the service's MPS setting"
    )
    args = parser.parse_args()
    gpus = None if args.gpus == "all" else [int(g) for g in args.gpus.split(",")]

    from kernel_service.service import KernelService, KernelServiceConfig

    from benchmark_runner.service.app import ServiceConfig, make_app
    from benchmark_runner.service.server import start_server

    service = KernelService(KernelServiceConfig(gpus=gpus, compile_step=False, mps=args.mps))
    app = make_app(service, ServiceConfig())
    honest = (GPU_CASES / "honest_gpu.py").read_text()
    refs = {p.stem: p.read_text() for p in GPU_CASES.glob("ref_*.py")}
    rows: list[dict[str, Any]] = []
    isolation: Any = None  # the workers' sandbox layers, as every answer reports them
    t_start = time.monotonic()
    with (
        start_server(app, startup_timeout=300) as server,
        httpx.Client(base_url=server.url, timeout=600) as client,
    ):
        mps_running = service.mps_running  # read while the service runs: shutdown stops the daemon
        print(f"MPS running: {mps_running}, own baseline: {service.config.own_baseline}", flush=True)
        for name, (ref, backend, extra, expect) in CASES.items():
            if args.only and name not in args.only:
                continue
            t0 = time.monotonic()
            body = {
                "reference": refs[ref],
                "solution": case_source(name),
                "backend": backend,
                "options": {**OPTIONS, **extra},
            }
            try:
                res = client.post("/v1/evaluate", json=body).json()
            except httpx.HTTPError as exc:
                res = {"outcome": f"http error: {exc}"}
            ok, shown = judge(expect, res)
            health = client.post(
                "/v1/evaluate",
                json={"reference": refs["ref_gpu_matmul"], "solution": honest, "options": OPTIONS},
            ).json()
            healthy = health.get("outcome") == "correct" and 0.5 < (health.get("speedup") or 0) < 2.0
            isolation = isolation or health.get("isolation")
            rows.append(
                {
                    "case": name,
                    "expect": expect,
                    "outcome": res.get("outcome"),
                    "speedup": res.get("speedup"),
                    "message": str(res.get("message", ""))[:300],
                    "uses_custom_kernel": res.get("uses_custom_kernel"),
                    "worker_id": res.get("worker_id"),
                    "defended": ok,
                    "next_honest": f"{health.get('outcome')} x{health.get('speedup')}",
                    "service_healthy": healthy,
                    "seconds": round(time.monotonic() - t0, 2),
                    "shown": shown,
                }
            )
            print(f"{name:32s} {shown:40s} defended={ok!s:5s} healthy={healthy}", flush=True)
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
    except Exception:  # noqa: BLE001
        gpu, versions = "unknown", {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "gpu": gpu,
                "service_gpus": args.gpus,
                "host": platform.node(),
                "versions": versions,
                "total_s": round(time.monotonic() - t_start, 1),
                "isolation": isolation,
                "mps_running": mps_running,
                "own_baseline": service.config.own_baseline,
                "cases": rows,
            },
            indent=2,
        )
    )
    print("\n| case | outcome | defended | next honest |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['shown']} | {'yes' if r['defended'] else 'NO'} | {r['next_honest']} |")
    print(f"\nisolation: {json.dumps(isolation)}")
    return 0 if all(r["defended"] and r["service_healthy"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
