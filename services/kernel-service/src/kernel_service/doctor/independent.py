"""An independent timer for the known-speedup check: ``python -m kernel_service.doctor.independent
--device cuda --calls 100 PAIR [PAIR ...]`` prints ``{pair: {ref_ms, new_ms, speedup, ...}}`` as JSON.

It shares nothing with the judge: the models are loaded here, in a plain process (the doctor starts one per
GPU with ``CUDA_VISIBLE_DEVICES`` naming it, before the service's timing), and timed as
``bench/timing_fidelity.py`` does. GPU: fresh inputs per call, L2 flushed (256 MB zeroed), the stream held
by a GPU spin while the call is enqueued (no host launch time inside), a CUDA event pair around each call,
median. CPU: ``perf_counter`` around each call on fresh inputs, one torch thread (as the service's CPU
workers), the two sides alternating, speedup = the median of the pairs' ratios (as the CPU judge).

A pair is ``<reference kernel>:<solution kernel>`` (``doctor/data`` names; solution ``self``: the
reference as its own solution).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: GPU cycles the stream is held before each call (~1.5 ms at 2 GHz): the call's launches are all
#: enqueued before the GPU reaches the start event.
HOLD_CYCLES = 3_000_000
WARMUP = 10


def _load(source: str, cls: str, folder: Path) -> tuple[Any, dict[str, Any]]:
    path = folder / f"m{abs(hash(source))}.py"  # a real file: Triton reads its kernels' source
    path.write_text(source)
    ns: dict[str, Any] = {"__name__": f"doctor_independent_{path.stem}", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), ns)  # noqa: S102 - the doctor's own shipped kernels
    return ns[cls], ns


def time_pair(ref_src: str, new_src: str, device: str, calls: int) -> dict[str, float]:
    import torch

    folder = Path(tempfile.mkdtemp(prefix="ks-doctor-independent-"))
    ref_cls, ref_ns = _load(ref_src, "Model", folder)
    new_cls, _ = _load(new_src, "ModelNew", folder)
    dev = torch.device(device)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    out: dict[str, float] = {}
    with torch.no_grad():
        torch.manual_seed(0)
        with dev:
            ref = ref_cls(*ref_ns["get_init_inputs"]())
        torch.manual_seed(0)
        with dev:
            new = new_cls(*ref_ns["get_init_inputs"]())
            warm = ref_ns["get_inputs"]()
        for _ in range(WARMUP):
            ref(*warm)
            new(*warm)
        if dev.type == "cuda":
            flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
            for label, model in (("ref", ref), ("new", new)):
                times, late = [], 0
                for _ in range(calls):
                    with dev:
                        inputs = ref_ns["get_inputs"]()
                    torch.cuda.synchronize()
                    flush.zero_()
                    torch.cuda._sleep(HOLD_CYCLES)
                    held = torch.cuda.Event()
                    held.record()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    model(*inputs)
                    end.record()
                    late += int(held.query())  # the hold ran out before the call was enqueued
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                out[f"{label}_ms"] = statistics.median(times)
                out[f"{label}_host_leaked_calls"] = late
            out["speedup"] = out["ref_ms"] / out["new_ms"]
        else:
            ratios: list[float] = []
            ref_t: list[float] = []
            new_t: list[float] = []
            for i in range(calls):
                inputs = ref_ns["get_inputs"]()
                order = ((ref, ref_t), (new, new_t)) if i % 2 else ((new, new_t), (ref, ref_t))
                for model, times in order:
                    t0 = time.perf_counter()
                    model(*inputs)
                    times.append((time.perf_counter() - t0) * 1e3)
                ratios.append(ref_t[-1] / new_t[-1])
            out.update(ref_ms=statistics.median(ref_t), new_ms=statistics.median(new_t))
            out["speedup"] = statistics.median(ratios)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("pairs", nargs="+", help="REFERENCE:SOLUTION kernel names (doctor/data)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args(argv)
    from .kernels import self_solution, source

    result: dict[str, Any] = {}
    for pair in args.pairs:
        ref, _, new = pair.partition(":")
        t0 = time.perf_counter()
        try:
            ref_src = source(ref)
            new_src = self_solution(ref_src) if new == "self" else source(new)
            result[pair] = time_pair(ref_src, new_src, args.device, args.calls)
        except Exception as exc:  # noqa: BLE001 - reported to the doctor, which fails the check with it
            result[pair] = {"error": f"{exc.__class__.__name__}: {exc}"}
        result[pair]["seconds"] = time.perf_counter() - t0
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
