"""BackendBench's timing self-check for a few smoke ops, each sent several times, with what decides each
answer: every input's two times and speedup, the gate's level and pair keys, and (``--profile``) the GPU
kernels each side ran, to tell a difference in the kernels from one in the path around them.

    python bench/selfcheck_probe.py --ops mm,add,relu --requests 2 --mps on --out /tmp/probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from _sources import use_sources  # bench/ (the script's dir) is on sys.path

use_sources("backendbench-runner")

import anyio  # noqa: E402
from backendbench_runner.baselines import aten_source  # noqa: E402
from backendbench_runner.service import make_service  # noqa: E402
from kernel_service.backendbench.performance import OWN_BASELINE_ENV  # noqa: E402
from kernel_service.backendbench.schemas import BackendBenchEvalRequest  # noqa: E402

from benchmark_runner.client import ServiceClient  # noqa: E402
from benchmark_runner.service import make_app  # noqa: E402
from benchmark_runner.service.server import start_server  # noqa: E402

#: The gate's keys that say where each side's process sat and how the pairs agreed.
GATE_KEYS = ("level", "null", "forks", "swaps", "pair", "mode", "own")


async def batch(
    url: str, ops: list[str], requests: int, profile: bool, pairs: int | None
) -> list[dict[str, Any]]:
    """Each op timed against itself (its kernel is the op, the detector off), ``requests`` times, one batch;
    ``pairs``: the processes' pairs (``perf_processes``; None: the service's default)."""
    reqs = []
    for op in ops:
        options = {
            "detect_original_op": False,
            "perf_trials": 20,
            "profile": profile,
            "perf_processes": pairs,
        }
        request = BackendBenchEvalRequest(
            dataset="backendbench-smoke", op=op, suite="smoke", source=aten_source(op), options=options
        )
        reqs += [{"kind": "backendbench", **request.model_dump(mode="json")}] * requests
    async with ServiceClient(url, retries=0, timeout=3600) as client:
        results: list[dict[str, Any]] = (await client.post("/v1/evaluate-batch", {"requests": reqs}))[
            "results"
        ]
    return results


def describe(result: dict[str, Any]) -> list[str]:
    d = result["details"]
    inputs = [
        (round(i["ref_ms"], 4), round(i["kernel_ms"], 4), round(i["speedup"], 4))
        for i in d.get("inputs", [])
        if i.get("speedup")
    ]
    gate = d.get("timing_gate") or {}
    keys = {k: v for k, v in gate.items() if any(s in k for s in GATE_KEYS)}
    lines = [
        f"{d.get('op')} {result['outcome']} {round(d.get('performance') or 0, 4)} {inputs} {json.dumps(keys)}"
    ]
    for side in ("candidate", "reference"):
        p = (d.get("profile") or {}).get(side) or {}
        if p:
            kernels = [(k["name"][:110], k["calls"], k["time_us"]) for k in p.get("kernels", [])[:6]]
            lines.append(f"    {side} kernel_us={p.get('kernel_us')} call_us={p.get('call_us')} {kernels}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", default="mm", help="smoke ops, comma-separated")
    parser.add_argument("--requests", type=int, default=3, help="times each op is sent")
    parser.add_argument("--mps", choices=["off", "on"], default="off", help="the service's MPS setting")
    parser.add_argument("--profile", action="store_true", help="then the same batch again, profiled")
    parser.add_argument(
        "--pairs",
        default="",
        help="comma-separated perf_processes values, a batch each [default: the service's]",
    )
    parser.add_argument(
        "--own-baseline",
        action="store_true",
        help="the op timed in the candidate's process before the kernel loads (KS_OWN_BASELINE=1)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.own_baseline:  # the service's workers take it from here
        os.environ[OWN_BASELINE_ENV] = "1"
    ops = args.ops.split(",")
    rows: list[dict[str, Any]] = []
    with start_server(make_app(make_service(mps=args.mps))) as server:
        pairs = [int(p) for p in args.pairs.split(",") if p] or [None]
        for profile, n in [(p, n) for p in ((False, True) if args.profile else (False,)) for n in pairs]:
            t0 = time.perf_counter()
            results = anyio.run(batch, server.url, ops, args.requests, profile, n)
            print(f"profile={profile} pairs={n} batch {time.perf_counter() - t0:.1f}s", flush=True)
            for result in results:
                print("\n".join(describe(result)), flush=True)
            rows += results
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
