"""What a fatal GPU fault does to other processes, measured without the service (issue 50).

    python3 bench/fault_probe.py --out probe.json

1. ``mps_daemons``: one MPS control daemon per GPU, each started with ``CUDA_VISIBLE_DEVICES=<gpu>`` and its
   own pipe directory: which GPU a client of each daemon lands on, and with which ``CUDA_VISIBLE_DEVICES``.
2. ``mps_storm``: honest clients on every GPU, then a client of GPU 0's daemon faults (an illegal address):
   which honest clients saw an error, and how long GPU 0's daemon refused new clients after the fault.
3. ``no_mps_wait``: without MPS, a judge-like process whose stream waits on an inter-process event that a
   faulting process recorded after its faulting kernel: does the wait end, and when (the fault, the other
   process's exit)? Is the judge's context still usable on another stream?
4. ``startup``: a worker's cost to start: ``import torch``, then CUDA's first context.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CLIENT = textwrap.dedent(
    """
    import json, os, sys, time
    t0 = time.perf_counter()
    import torch
    t1 = time.perf_counter()
    out = {"import_s": t1 - t0, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        out["count"] = torch.cuda.device_count()
        props = torch.cuda.get_device_properties(0)
        out["uuid"] = str(props.uuid)
        x = torch.ones(1, device="cuda")
        torch.cuda.synchronize()
        out["init_s"] = time.perf_counter() - t1
        mode = sys.argv[1]
        errors = []
        if mode == "loop":
            a = torch.randn(2048, 2048, device="cuda")
            end = time.monotonic() + float(sys.argv[2])
            n = 0
            while time.monotonic() < end:
                try:
                    b = a @ a
                    torch.cuda.synchronize()
                    n += 1
                except Exception as exc:
                    errors.append([round(time.time(), 3), str(exc).splitlines()[0][:200]])
                    break
                time.sleep(0.01)
            out["iterations"] = n
        elif mode == "fault":
            import triton, triton.language as tl

            @triton.jit
            def bad(p):
                tl.store(p + (1 << 40), 1.0)

            bad[(1,)](x)
            out["fault_at"] = time.time()
            try:
                torch.cuda.synchronize()
            except Exception as exc:
                errors.append([round(time.time(), 3), str(exc).splitlines()[0][:200]])
        out["errors"] = errors
    except Exception as exc:
        out["error"] = str(exc).splitlines()[0][:300]
    print(json.dumps(out), flush=True)
    """
)

WAITER = textwrap.dedent(
    """
    # The judge's half of no_mps_wait: it opens the faulting process's event, waits on it, and watches.
    import json, os, sys, time, torch
    handle = bytes.fromhex(sys.stdin.readline().strip())
    done = torch.cuda.Event.from_ipc_handle(torch.device("cuda", 0), handle)
    s = torch.cuda.current_stream()
    s.wait_event(done)
    end = torch.cuda.Event()
    end.record(s)
    t0 = time.monotonic()
    seen = None
    while time.monotonic() - t0 < float(sys.argv[1]):
        if end.query():
            seen = time.monotonic() - t0
            break
        time.sleep(0.01)
    other = torch.cuda.Stream()
    ok_other = None
    try:
        with torch.cuda.stream(other):
            y = torch.ones(4, device="cuda") + 1
        other.synchronize()
        ok_other = float(y.sum().item()) == 8.0
    except Exception as exc:
        ok_other = str(exc)[:200]
    print(json.dumps({"end_reached_after_s": seen, "other_stream_ok": ok_other}), flush=True)
    """
)

SIGNALLER = textwrap.dedent(
    """
    # The side's half: an inter-process event recorded after a faulting kernel; exits after sys.argv[1] s.
    import sys, time, torch, triton, triton.language as tl
    done = torch.cuda.Event(interprocess=True)
    x = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    print(bytes(done.ipc_handle()).hex(), flush=True)
    time.sleep(0.5)

    @triton.jit
    def bad(p):
        tl.store(p + (1 << 40), 1.0)

    bad[(1,)](x)
    done.record()
    try:
        torch.cuda.synchronize()
    except Exception as exc:
        print("fault:", str(exc).splitlines()[0][:200], file=sys.stderr, flush=True)
    time.sleep(float(sys.argv[1]))
    """
)


SCRIPTS = Path(tempfile.mkdtemp(prefix="fault-probe-"))


def script(name: str, text: str) -> str:
    """Triton compiles only functions defined in a file."""
    path = SCRIPTS / f"{name}.py"
    path.write_text(text)
    return str(path)


def client(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, script("client", CLIENT), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(p: subprocess.Popen[str], timeout: float = 120.0) -> dict:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return {"error": "timeout", "stderr": err[-300:]}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "no output", "rc": p.returncode, "stderr": err[-500:]}


def gpus() -> list[str]:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU")]


def daemon(root: Path, gpu: str, action: str) -> dict[str, str]:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": gpu,
        "CUDA_MPS_PIPE_DIRECTORY": str(root / f"pipe-{gpu}"),
        "CUDA_MPS_LOG_DIRECTORY": str(root / f"log-{gpu}"),
    }
    for k in ("pipe", "log"):
        (root / f"{k}-{gpu}").mkdir(parents=True, exist_ok=True)
    if action == "start":
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
    else:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True)
    return env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    report: dict = {"gpus": gpus()}
    root = Path(tempfile.mkdtemp(prefix="mps-probe-"))
    ids = report["gpus"]
    # 4. startup, plain
    report["startup"] = result(client({**os.environ, "CUDA_VISIBLE_DEVICES": ids[0]}, "none"))
    # 1. one daemon a GPU
    envs = {g: daemon(root, g, "start") for g in ids}
    clients = {g: {**envs[g], "CUDA_VISIBLE_DEVICES": "0"} for g in ids}  # relative to the daemon's GPU
    time.sleep(0.5)
    placements = {}
    for g in ids:
        for visible in sorted({g, "0"}):
            placements[f"daemon{g}_visible{visible}"] = result(
                client({**envs[g], "CUDA_VISIBLE_DEVICES": visible}, "none")
            )
    report["mps_daemons"] = placements
    # 2. the storm
    honest = {f"gpu{g}_{i}": client(clients[g], "loop", "12") for g in ids for i in range(2)}
    time.sleep(6.0)
    t_fault = time.time()
    faulter = result(client(clients[ids[0]], "fault"))
    storm = {"fault": faulter, "t_fault": t_fault}
    storm["honest"] = {k: result(p) for k, p in honest.items()}
    t_after = time.time()
    tries = []
    while time.time() - t_after < 30:
        r = result(client(clients[ids[0]], "none"), timeout=30)
        tries.append({"t": round(time.time() - t_after, 2), "ok": "init_s" in r, "err": r.get("error")})
        if "init_s" in r:
            break
        time.sleep(0.2)
    storm["gpu0_new_client_tries"] = tries
    report["mps_storm"] = storm
    for g in ids:
        daemon(root, g, "stop")
    time.sleep(1.0)
    # 3. no MPS: an IPC wait on a faulting process's event
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ids[0]}
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    sig = subprocess.Popen(
        [sys.executable, script("signaller", SIGNALLER), "5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    handle = sig.stdout.readline().strip() if sig.stdout else ""
    waiter = subprocess.Popen(
        [sys.executable, script("waiter", WAITER), "15"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    waiter.stdin.write(handle + "\n")
    waiter.stdin.flush()
    sig_out, sig_err = sig.communicate(timeout=60)
    exit_at = time.monotonic() - t0
    w = result(waiter, timeout=60)
    report["no_mps_wait"] = {
        "signaller_exit_after_s": round(exit_at, 2),
        "signaller_stderr": sig_err[-300:],
        **w,
    }
    shutil.rmtree(root, ignore_errors=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
