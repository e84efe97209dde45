"""Why ``ncu`` measures nothing inside a worker's sandbox (issue 31): one small CUDA call profiled by Nsight
Compute under each isolation layer alone, so the layer that breaks it is named by data.

    python3 bench/ncu_sandbox_probe.py [--out F]

Variants: plain; ``TMPDIR`` private; Landlock as a worker has it (writes beneath a temp dir only, no TCP);
Landlock with TCP allowed; Landlock with ``/tmp`` writable; ``unshare --net`` (a network namespace of its
own, loopback down); and the same with loopback up. Each prints ncu's exit status, whether a kernel was
measured, and ncu's error lines.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "services" / "kernel-service" / "src"))

APP = """
import torch
x = torch.randn(1 << 20, device="cuda")
for _ in range(3):
    torch.relu(x)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.relu(x)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("app ok")
"""

#: Applies a worker's Landlock policy to itself, then execs the rest of its argv (ncu ...).
HARDEN = """
import os, sys
from pathlib import Path
from kernel_service.judging.sandbox import HardenPolicy, harden_worker
tmp, deny_tcp, extra = Path(sys.argv[1]), sys.argv[2] == "1", [Path(p) for p in sys.argv[3].split(":") if p]
report = harden_worker(HardenPolicy(writable=[tmp, *extra], deny_tcp=deny_tcp))
print("harden:", report.summary() if hasattr(report, "summary") else report, file=sys.stderr)
os.execv(sys.argv[4], sys.argv[4:])
"""


def run(variant: str, prefix: list[str], ncu: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    try:
        proc = subprocess.run(prefix + ncu, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"variant": variant, "exit": None, "measured": False, "errors": ["timeout"]}
    text = proc.stdout + "\n" + proc.stderr
    errors = [ln.strip() for ln in text.splitlines() if "ERROR" in ln or "Error" in ln or "error" in ln][:6]
    measured = "gpu__time_duration" in text and "relu" in text.lower() or "vectorized_elementwise" in text
    return {
        "variant": variant,
        "exit": proc.returncode,
        "measured": measured,
        "errors": errors,
        "tail": text[-600:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    ncu_exe = shutil.which("ncu")
    if ncu_exe is None:
        print("no ncu on PATH")
        return
    import os

    work = Path(tempfile.mkdtemp(prefix="ncu-probe-"))
    app = work / "app.py"
    app.write_text(APP)
    harden = work / "harden.py"
    harden.write_text(HARDEN)
    ncu = [ncu_exe, "--csv", "--page", "raw", "--profile-from-start", "off", "--metrics",
           "gpu__time_duration.sum", sys.executable, str(app)]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "services/kernel-service/src"), env.get("PYTHONPATH", "")]
    )
    private = work / "tmp"
    private.mkdir()
    results = [
        run("plain", [], ncu, env, work),
        run("TMPDIR private", [], ncu, {**env, "TMPDIR": str(private)}, work),
    ]
    for label, deny, extra in (
        ("landlock (worker policy: no TCP)", "1", ""),
        ("landlock, TCP allowed", "0", ""),
        ("landlock, no TCP, /tmp and /dev/shm writable", "1", "/tmp:/dev/shm"),
        ("landlock, TCP allowed, /tmp and /dev/shm writable", "0", "/tmp:/dev/shm"),
    ):
        prefix = [sys.executable, str(harden), str(private), deny, extra, ncu_exe]
        results.append(run(label, prefix, ncu[1:], {**env, "TMPDIR": str(private)}, work))
    unshare = shutil.which("unshare")
    if unshare:
        base = [unshare, "--net", "--map-root-user"]
        results.append(run("unshare --net (loopback down)", base, ncu, env, work))
        up = base + ["sh", "-c", 'ip link set lo up 2>/dev/null || true; exec "$@"', "sh"]
        results.append(run("unshare --net, loopback up", up, ncu, env, work))
    for r in results:
        print(
            f"{r['variant']:52s} exit {r['exit']!s:5s} measured {r['measured']!s:5s} {'; '.join(r['errors'])[:300]}"
        )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
