"""BackendBench's timing self-check for a few smoke ops, each sent several times, with what decides each
answer: every input's two times and speedup, the gate's level and pair keys, and (``--profile``) the GPU
kernels each side ran, to tell a difference in the kernels from one in the path around them.

    python bench/selfcheck_probe.py --ops mm,add,relu --requests 2 --mps on --out /tmp/probe.json

The own baseline follows the service's setting (``KS_OWN_BASELINE``: auto, on or off).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from _sources import use_sources  # bench/ (the script's dir) is on sys.path

use_sources("backendbench-runner")

import anyio  # noqa: E402
from backendbench_runner.baselines import aten_source, function_name  # noqa: E402
from backendbench_runner.service import make_service  # noqa: E402
from kernel_service.backendbench.catalog import FAMILIES  # noqa: E402
from kernel_service.backendbench.schemas import BackendBenchEvalRequest  # noqa: E402

from benchmark_runner.client import ServiceClient  # noqa: E402
from benchmark_runner.service import make_app  # noqa: E402
from benchmark_runner.service.server import start_server  # noqa: E402

#: The gate's keys that say where each side's process sat and how the pairs agreed.
GATE_KEYS = ("level", "null", "forks", "swaps", "pair", "mode", "own")


def overload_source(op: str) -> str:
    """The op as a kernel that calls its default overload (the one the judge's op calls on the
    performance input), the packet only where that overload does not take the arguments: it tells the
    packet's own call cost from the rest of a self-check's offset."""
    fast = FAMILIES[op][1].removeprefix("aten.")
    return (
        aten_source(op)
        .replace(
            "    return torch.ops.aten.",
            "    try:\n        return _FAST(*args, **kwargs)\n    except Exception:\n        return torch.ops.aten.",
        )
        .replace("import torch\n", f"import torch\n\n_FAST = torch.ops.aten.{fast}\n", 1)
    )


def direct_source(op: str) -> str:
    """The kernel *is* the op's default overload, no Python frame of its own: against itself it reads the
    judge's path alone (an op whose smoke inputs need another overload fails its correctness)."""
    return f"import torch\n\n{function_name(op)} = torch.ops.{FAMILIES[op][1]}\n"


SOURCES = {"packet": aten_source, "overload": overload_source, "direct": direct_source}


async def batch(
    url: str, ops: list[str], requests: int, profile: bool, pairs: int | None, call: str = "packet"
) -> list[dict[str, Any]]:
    """Each op timed against itself (its kernel is the op, the detector off), ``requests`` times, one batch;
    ``pairs``: the processes' pairs (``perf_processes``; None: the service's default); ``call``: the kernel
    calls the op's packet (as ``--model aten`` does), its overload (:func:`overload_source`) or is the
    overload itself (:func:`direct_source`)."""
    reqs = []
    for op in ops:
        options = {
            "detect_original_op": False,
            "perf_trials": 20,
            "profile": profile,
            "perf_processes": pairs,
        }
        request = BackendBenchEvalRequest(
            dataset="backendbench-smoke",
            op=op,
            suite="smoke",
            source=SOURCES[call](op),
            options=options,
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
    parser.add_argument(
        "--mps", choices=["auto", "on", "off"], default="auto", help="the service's MPS setting"
    )
    parser.add_argument("--profile", action="store_true", help="then the same batch again, profiled")
    parser.add_argument(
        "--pairs",
        default="",
        help="comma-separated perf_processes values, a batch each [default: the service's]",
    )
    parser.add_argument(
        "--call",
        choices=sorted(SOURCES),
        default="packet",
        help="the kernel calls the op's packet or its default overload, or is that overload",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ops = args.ops.split(",")
    rows: list[dict[str, Any]] = []
    with start_server(make_app(make_service(mps=args.mps))) as server:
        pairs = [int(p) for p in args.pairs.split(",") if p] or [None]
        for profile, n in [(p, n) for p in ((False, True) if args.profile else (False,)) for n in pairs]:
            t0 = time.perf_counter()
            results = anyio.run(batch, server.url, ops, args.requests, profile, n, args.call)
            print(f"profile={profile} pairs={n} batch {time.perf_counter() - t0:.1f}s", flush=True)
            for result in results:
                print("\n".join(describe(result)), flush=True)
            rows += results
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
