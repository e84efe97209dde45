"""Probe (issue 16): does a kernel timed n calls back to back read what one event pair around each call
reads? In one process, no service: fresh inputs for every call, L2 flushed before each reading, events
around the n calls; inputs either as separate allocations or packed into one block the way the judge's
arena packs them (256-byte aligned, one set after another).

    python bench/back_to_back_probe.py --out bench/results/back_to_back_probe_h100.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

FLUSH = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
N, M = 2048, 8192


def rewrite(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.unsqueeze(1) * b


def diag(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.diag(a) @ b


def chain(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0 + 1.0)


def inputs(name: str) -> list[torch.Tensor]:
    if name == "chain":
        return [torch.rand(32 * 1024 * 1024, device="cuda") - 0.5]
    return [torch.rand(N, device="cuda"), torch.rand(N, M, device="cuda")]


def packed(sets: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """The same values copied into one block, 256-byte aligned, set after set (as transport.pack)."""
    sizes = [(t.numel() * 4 + 255) // 256 * 256 for s in sets for t in s]
    block = torch.empty(sum(sizes), dtype=torch.uint8, device="cuda")
    out, off = [], 0
    for s in sets:
        row = []
        for t in s:
            view = block[off : off + t.numel() * 4].view(torch.float32).view(t.shape)
            view.copy_(t)
            row.append(view)
            off += (t.numel() * 4 + 255) // 256 * 256
        out.append(row)
    return out


def reading(fn, name: str, n: int, layout: str, reps: int) -> float:
    per_call = []
    for _ in range(reps):
        sets = [inputs(name) for _ in range(n)]
        if layout == "packed":
            sets = packed(sets)
        torch.cuda.synchronize()
        FLUSH.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outs = [fn(*s) for s in sets]
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / n)
        del outs, sets
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    rows = []
    for label, fn, name in (("rewrite", rewrite, "ab"), ("chain", chain, "chain"), ("diag_ref", diag, "ab")):
        for layout in ("separate", "packed"):
            for n in (1, 2, 5, 10, 20):
                if name == "chain" and n > 10:
                    continue
                ms = reading(fn, name, n, layout, args.reps)
                rows.append({"kernel": label, "layout": layout, "n": n, "ms_per_call": ms})
                print(f"{label:9s} {layout:8s} n={n:3d} {ms * 1e3:9.2f} us/call", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(0), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
