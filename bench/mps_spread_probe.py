"""Does one kernel's time move from process to process under MPS (issue 30)?

    python3 bench/mps_spread_probe.py [--jobs 6] [--calls 200] [--out F]

Under the service's MPS daemon, honest 27-60 us kernels read 0.82-1.28 of themselves from one job to the
next, and both sides' kernels ran at another speed by job (BENCHMARKS.md, issue 30). This probe takes the
service out of it: each *job* is a fresh Python process that times the same kernels in-process (CUDA
events, L2 flushed before every call, the median of ``--calls``), with and without a private MPS daemon,
plainly and inside the sandbox's namespaces (``unshare --pid --fork --net --mount --mount-proc``, as the
eval workers run), and with an idle second CUDA process beside it (a judge's context) or not. A spread
across jobs that appears only under MPS, only sandboxed or only with a companion names the cause.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

JOB = r"""
import json, sys, torch
calls = int(sys.argv[1])
dev = torch.device("cuda")
flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
x8 = torch.randn(8 * 1024 * 1024, device=dev)
mlp = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).to(dev)
xb = torch.randn(16, 1024, device=dev)
a = torch.randn(2048, 2048, device=dev)
s1, s2 = torch.randn(1, 128, device=dev), torch.randn(1, 128, device=dev)
kernels = {"add_1x128": lambda: s1 + s2, "relu_8M": lambda: torch.relu(x8), "mlp_4x1024_b16": lambda: mlp(xb),
           "matmul_2048": lambda: a @ a}
out = {}
with torch.no_grad():
    for name, fn in kernels.items():
        for _ in range(10):
            fn()
        times = []
        for _ in range(calls):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(2_000_000)  # the whole call queued before the start: no host time in it
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        times.sort()
        out[name] = times[len(times) // 2]
print(json.dumps(out))
"""

COMPANION = "import torch, time; torch.zeros(1, device='cuda'); time.sleep(3600)"


def run_job(calls: int, env: dict[str, str], sandboxed: bool, companion: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-c", JOB, str(calls)]
    if sandboxed:
        cmd = ["unshare", "--pid", "--fork", "--net", "--mount", "--mount-proc", *cmd]
    side = subprocess.Popen([sys.executable, "-c", COMPANION], env=env) if companion else None
    try:
        if side is not None:
            time.sleep(2.0)  # its context made before the job's
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    finally:
        if side is not None:
            side.kill()
            side.wait()
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    control = shutil.which("nvidia-cuda-mps-control")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mps-probe-") as tmp:
        mps_env = {"CUDA_MPS_PIPE_DIRECTORY": f"{tmp}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{tmp}/log"}
        for d in mps_env.values():
            os.makedirs(d, exist_ok=True)
        modes = [("plain", dict(os.environ))]
        if control:
            started = subprocess.run([control, "-d"], env={**os.environ, **mps_env}, capture_output=True)
            if started.returncode == 0:
                modes.append(("mps", {**os.environ, **mps_env}))
        try:
            for mode, env in modes:
                for sandboxed in (False, True):
                    for companion in (False, True):
                        jobs = [run_job(args.calls, env, sandboxed, companion) for _ in range(args.jobs)]
                        row: dict[str, Any] = {"mode": mode, "sandboxed": sandboxed, "companion": companion,
                                               "jobs_us": jobs}  # fmt: skip
                        for name in ("add_1x128", "relu_8M", "mlp_4x1024_b16", "matmul_2048"):
                            vals = [j[name] for j in jobs if name in j]
                            if vals:
                                row[name] = {"median_us": round(statistics.median(vals), 2),
                                             "spread": round(max(vals) / min(vals), 3)}  # fmt: skip
                        results.append(row)
                        summary = {k: v for k, v in row.items() if k != "jobs_us"}
                        print(json.dumps(summary), flush=True)
        finally:
            if len(modes) > 1 and control:
                subprocess.run([control], input="quit\n", env={**os.environ, **mps_env}, text=True)
    if args.out:
        args.out.write_text(json.dumps({"jobs": args.jobs, "calls": args.calls, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
