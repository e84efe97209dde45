"""Probe (issue 16): why a 64 MB broadcast multiply read ~40% slow at 10 calls a reading in the service.

Part A, no service: a child process times ``a.unsqueeze(1) * b`` with its own events around ``n`` calls
(fresh values copied in before the start, L2 flushed), its inputs either in memory of its own
(``cuMemAlloc``), in the parent's ``cuMemAlloc`` block opened over CUDA IPC (how a side mapped the judge's
arena before), or in the parent's ``cuMemCreate`` allocation imported from a file descriptor (how it maps
it now).

Part B, the service: the same kernel judged against itself, its candidate timing its own launches with
events (printed to its output, which the answer carries): the service's reading next to the kernel's own
time and the gaps between calls. Variants: outputs from PyTorch's allocator, or from a ring the candidate
allocated once.

    python bench/side_probe.py --out $OUT/side_probe_h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import use_sources

use_sources()

import torch  # noqa: E402

N, M = 2048, 8192
FLUSH_BYTES = 256 << 20

REF = """
import torch
import torch.nn as nn
N, M = 2048, 8192
class Model(nn.Module):
    def forward(self, a, b):
        return a.unsqueeze(1) * b
def get_inputs():
    return [torch.rand(N), torch.rand(N, M)]
def get_init_inputs():
    return []
"""

SELF_TIMED = """
import statistics, torch
import torch.nn as nn
N, M = 2048, 8192
RING = {ring}
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pending, self.kernel, self.gap, self.calls, self.last = [], [], [], 0, None
        self.ring = [torch.empty(N, M, device="cuda") for _ in range(RING)]
    def forward(self, a, b):
        while self.pending and self.pending[0][2].query():
            s, prev_end, e = self.pending.pop(0)
            self.kernel.append(s.elapsed_time(e) * 1e3)
            if prev_end is not None and prev_end.query():
                self.gap.append(prev_end.elapsed_time(s) * 1e3)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        if RING:
            out = torch.mul(a.unsqueeze(1), b, out=self.ring[self.calls % RING])
        else:
            out = a.unsqueeze(1) * b
        e.record()
        self.pending.append((s, self.last, e))
        self.last = e
        self.calls += 1
        if self.calls % 40 == 0 and self.kernel:
            k = sorted(self.kernel[-40:])
            g = sorted(x for x in self.gap[-40:] if x < 200)
            print(f"PROBE calls={{self.calls}} kernel_us={{k[len(k)//2]:.1f}} "
                  f"gap_us={{g[len(g)//2] if g else -1:.1f}} n_gaps={{len(g)}}", flush=True)
        return out
"""


def child(handle_hex: str, fd: int, size: int, n_list: list[int], reps: int) -> None:
    """Part A, in the child: readings on local vs IPC-opened vs descriptor-shared memory."""
    from kernel_service import cuda_ipc

    cuda_ipc.ensure_context()
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    per_set = (N * 4 + 255) // 256 * 256 + N * M * 4
    nmax = max(n_list)
    ipc_ptr, ipc_size = cuda_ipc.open_handle(bytes.fromhex(handle_hex))
    shared = cuda_ipc.Imported(fd, size, 0)
    regions = {
        "ipc": cuda_ipc.byte_view(ipc_ptr, ipc_size),
        "shared": cuda_ipc.byte_view(shared.ptr, size),
        "local": cuda_ipc.byte_view(cuda_ipc.mem_alloc(per_set * nmax), per_set * nmax),
    }
    rows = []
    for where, region in regions.items():
        for n in n_list:
            views = []
            for i in range(n):
                base = i * per_set
                a = region[base : base + N * 4].view(torch.float32)
                off = base + (N * 4 + 255) // 256 * 256
                b = region[off : off + N * M * 4].view(torch.float32).view(N, M)
                views.append((a, b))
            per_call = []
            for r in range(reps + 2):
                for a, b in views:
                    a.copy_(torch.rand(N, device="cuda"))
                    b.copy_(torch.rand(N, M, device="cuda"))
                torch.cuda.synchronize()
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                outs = [a.unsqueeze(1) * b for a, b in views]
                e.record()
                e.synchronize()
                if r >= 2:
                    per_call.append(s.elapsed_time(e) * 1e3 / n)
                del outs
            rows.append({"memory": where, "n": n, "us_per_call": statistics.median(per_call)})
            print(f"A {where:5s} n={n:3d} {rows[-1]['us_per_call']:8.1f} us/call", flush=True)
    print("ROWS " + json.dumps(rows), flush=True)


def part_a(reps: int) -> list[dict[str, Any]]:
    from kernel_service import cuda_ipc

    cuda_ipc.ensure_context()
    n_list = [1, 2, 10, 20]
    per_set = (N * 4 + 255) // 256 * 256 + N * M * 4
    ptr = cuda_ipc.mem_alloc(per_set * max(n_list))
    handle, _ = cuda_ipc.export(ptr)
    shared = cuda_ipc.Shared(per_set * max(n_list), 0)
    fd = shared.export_fd()
    cmd = [sys.executable, __file__, "--child", handle.hex(), "--fd", str(fd), "--size", str(shared.size)]
    proc = subprocess.run(
        [*cmd, "--reps", str(reps)],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=300,
        pass_fds=[fd],
    )
    os.close(fd)
    shared.close()
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS ")), "ROWS []")
    cuda_ipc.mem_free(ptr)
    return list(json.loads(line[5:]))


def part_b(calls: int, jobs: int) -> list[dict[str, Any]]:
    from timing_fidelity import service_readings

    variants = {"alloc": SELF_TIMED.format(ring=0), "ring": SELF_TIMED.format(ring=64)}
    pairs = [(REF, src) for _ in range(jobs) for src in variants.values()]
    served = service_readings(pairs, calls)
    rows = []
    for i, srv in enumerate(served):
        name = list(variants)[i % len(variants)]
        probe = [ln for ln in (srv.get("output") or "").splitlines() if ln.startswith("PROBE")]
        row = {
            "variant": name,
            "outcome": srv.get("outcome"),
            "message": srv.get("message"),
            "speedup": srv.get("speedup"),
            "service_new_us": 1e3 * ((srv.get("new_timing") or {}).get("median") or 0),
            "service_ref_us": 1e3 * ((srv.get("ref_timing") or {}).get("median") or 0),
            "gate": srv.get("timing_gate"),
            "self_timed": probe[-3:],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child")
    parser.add_argument("--fd", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.fd, args.size, [1, 2, 10, 20], args.reps)
        return 0
    t0 = time.perf_counter()
    report = {"gpu": torch.cuda.get_device_name(0), "part_a": part_a(args.reps)}
    report["part_b"] = part_b(args.calls, args.jobs)
    report["wall_s"] = time.perf_counter() - t0
    assert args.out is not None
    save_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
