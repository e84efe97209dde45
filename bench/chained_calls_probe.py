"""Issue 30's open design question, measured: can the judge release each call of a reading only after the
previous call's *done* (so that a candidate never sees a reading's calls as a set, and each call starts
from a flushed L2), and what does such a chain cost per call, with and without MPS?

    python3 bench/chained_calls_probe.py [--calls 100] [--rounds 5] [--out F]

Two processes, as in the service: a judge and a candidate, sharing device memory through CUDA IPC. Per
call, on the GPU and with no host in the loop, the judge's stream flushes L2 (optional), copies the call's
inputs from its private memory into the shared slot, records *start*, writes the *go* counter
(``cuStreamWriteValue32``), waits for the *done* counter (``cuStreamWaitValue32``) and records *end*; the
candidate's stream waits for *go*, runs the call on the slot, and writes *done*. Every call's time is
end - start: the candidate's work plus the path. ``null`` is the path alone; an in-process event timer
(flush before every call) gives each kernel's own time. Each mode (MPS off, on) runs in a fresh process
tree, since MPS must be chosen before CUDA starts.

Prints one table and writes JSON: per mode and kernel, the per-call medians, p10/p90, the path-subtracted
time and the in-process time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KERNELS = ("null", "add", "mlp", "matmul")
GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ


def _driver() -> tuple[Any, Any]:
    lib = ctypes.CDLL("libcuda.so.1")
    fns = []
    for name in ("cuStreamWaitValue32", "cuStreamWriteValue32"):
        fn = getattr(lib, name + "_v2", None) or getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
        fns.append(fn)
    return fns[0], fns[1]


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: CUresult {rc}")


def _work(kind: str, n: int, device: Any) -> tuple[Any, Any, Any]:
    """(inputs of every call, the judge's private copy of them, the callable)."""
    import torch

    torch.manual_seed(0)
    if kind in ("null", "add"):
        x = torch.randn(n, 1, 128, device=device)

        def fn(t: Any) -> Any:
            return t + t

    elif kind == "mlp":
        x = torch.randn(n, 16, 1024, device=device)
        layers = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).to(device)

        def fn(t: Any) -> Any:
            return layers(t)

    else:
        x = torch.randn(n, 1024, 1024, device=device)
        w = torch.randn(1024, 1024, device=device)

        def fn(t: Any) -> Any:
            return t @ w

    return x, x.clone(), fn


def candidate(conn: Any, kind: str, n: int, shared: Any, flags: Any) -> None:
    """The candidate: every call waits for *go*, runs, writes *done*; all enqueued before the judge's."""
    import torch

    torch.set_grad_enabled(False)
    device = torch.device("cuda", 0)
    wait, write = _driver()
    _, _, fn = _work(kind, n, device)  # the same weights as the judge's (same seed, same draws)
    stream = torch.cuda.Stream()
    go, done = flags.data_ptr(), flags.data_ptr() + 64
    for _ in range(3):  # warm the kernels outside any chain
        fn(shared[0])
    torch.cuda.synchronize()
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        base = int(msg)
        with torch.cuda.stream(stream):
            outs = []
            for k in range(n):
                _ok(wait(stream.cuda_stream, go, base + k + 1, GEQ), "wait go")
                if kind != "null":
                    outs.append(fn(shared[k]))
                _ok(write(stream.cuda_stream, done, base + k + 1, 0), "write done")
        conn.send("enqueued")
        stream.synchronize()
        conn.send("finished")


def run_mode(calls: int, rounds: int, flush_mb: int) -> dict[str, Any]:
    import torch
    import torch.multiprocessing as mp

    torch.set_grad_enabled(False)
    device = torch.device("cuda", 0)
    wait, write = _driver()
    flush = torch.empty(flush_mb << 20, dtype=torch.uint8, device=device)
    ctx = mp.get_context("spawn")
    result: dict[str, Any] = {}
    for kind in KERNELS:
        shared, private, fn = _work(kind, calls, device)
        flags = torch.zeros(32, dtype=torch.int32, device=device)  # go at [0], done at [16] (64 bytes on)
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=candidate, args=(child, kind, calls, shared, flags))
        proc.start()
        try:
            assert parent.recv() == "ready"
            stream = torch.cuda.Stream()
            go, done = flags.data_ptr(), flags.data_ptr() + 64
            chained: list[float] = []
            base = 0
            for _ in range(rounds):
                parent.send(base)
                assert parent.recv() == "enqueued"
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
                with torch.cuda.stream(stream):
                    torch.cuda._sleep(50_000_000)  # ~25 ms: the chain is enqueued before the GPU reaches it
                    for k in range(calls):
                        flush.zero_()
                        shared[k].copy_(private[k])
                        starts[k].record(stream)
                        _ok(write(stream.cuda_stream, go, base + k + 1, 0), "write go")
                        _ok(wait(stream.cuda_stream, done, base + k + 1, GEQ), "wait done")
                        ends[k].record(stream)
                stream.synchronize()
                assert parent.recv() == "finished"
                chained += [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]
                base += calls
            local: list[float] = []  # the same calls timed in this process, L2 flushed before each
            if kind != "null":
                for k in range(min(calls, 100)):
                    flush.zero_()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    fn(shared[k])
                    e.record()
                    e.synchronize()
                    local.append(s.elapsed_time(e) * 1e3)
            q = statistics.quantiles(chained, n=10)
            result[kind] = {
                "chained_median_us": statistics.median(chained),
                "chained_p10_us": q[0],
                "chained_p90_us": q[-1],
                "chained_stdev_us": statistics.pstdev(chained),
                "in_process_median_us": statistics.median(local) if local else None,
                "calls": len(chained),
            }
        finally:
            parent.send(None)
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    null = result["null"]["chained_median_us"]
    for kind in KERNELS[1:]:
        r = result[kind]
        r["chained_minus_null_us"] = r["chained_median_us"] - null
        if r["in_process_median_us"]:
            r["ratio_to_in_process"] = r["chained_minus_null_us"] / r["in_process_median_us"]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--flush-mb", type=int, default=128)
    ap.add_argument("--modes", default="off,on")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one-mode", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_mode:
        print(json.dumps(run_mode(args.calls, args.rounds, args.flush_mb)))
        return
    report: dict[str, Any] = {
        "calls": args.calls,
        "rounds": args.rounds,
        "flush_mb": args.flush_mb,
        "modes": {},
    }
    for mode in args.modes.split(","):
        env = dict(os.environ)
        daemon = None
        if mode == "on":
            root = Path(tempfile.mkdtemp(prefix="probe-mps-"))
            env.update(CUDA_MPS_PIPE_DIRECTORY=str(root / "pipe"), CUDA_MPS_LOG_DIRECTORY=str(root / "log"))
            for d in ("pipe", "log"):
                (root / d).mkdir()
            daemon = subprocess.run(
                ["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True
            )
            if daemon.returncode != 0:
                report["modes"][mode] = {"error": f"MPS did not start: {daemon.stderr[-300:]}"}
                continue
            time.sleep(1)
        cmd = [sys.executable, __file__, "--one-mode", mode, "--calls", str(args.calls)]
        cmd += ["--rounds", str(args.rounds), "--flush-mb", str(args.flush_mb)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            report["modes"][mode] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-1500:]}
        except subprocess.TimeoutExpired:
            report["modes"][mode] = {"error": "timed out (a chain that never released?)"}
        finally:
            if daemon is not None:
                subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True, check=False)
        if args.out:
            args.out.write_text(json.dumps(report, indent=2))
    print(
        f"{'mode':5s} {'kernel':7s} {'chain med':>10s} {'p10':>8s} {'p90':>8s} {'-null':>8s} {'in-proc':>8s} {'ratio':>6s}"
    )
    for mode, res in report["modes"].items():
        if "error" in res:
            print(mode, "ERROR", res["error"])
            continue
        for kind, r in res.items():
            ip, ratio = r.get("in_process_median_us"), r.get("ratio_to_in_process")
            print(
                f"{mode:5s} {kind:7s} {r['chained_median_us']:10.2f} {r['chained_p10_us']:8.2f} "
                f"{r['chained_p90_us']:8.2f} {r.get('chained_minus_null_us', 0):8.2f} "
                f"{(ip or 0):8.2f} {(ratio or 0):6.3f}"
            )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
