"""Cold ``load_inline`` build times of solution files under each build option: plain, pch, light, both.

    python3 bench/build_speed.py [SOLUTION.py ...] [--examples] [--options plain,pch,light,both] [--out F]

Each build is a fresh process with an empty ``TORCH_EXTENSIONS_DIR`` (cold: nothing of the solution's
built before), importing the solution as the compile worker does (``harness.load_module``), so the time is
what a first submission waits for its build. ``pch``: the precompiled ``torch/extension.h`` of
``kernel_service.workers.fast_builds`` (made once per option run, in a fresh dir; its own build time is reported
apart, as ``pch_build_s``: a service pays it once per flag set). ``light``: the solution with its
``torch/extension.h`` includes made ``torch/types.h`` and, started at the same moment, the source as
written; the time is until the first usable build (the light one when it builds, else the as-written
one), exactly the service's race. ``both``: light with pch. ``--examples``: the CUDA solutions in
bench/build_examples (modelled on upstream KernelBench's examples; needs nvcc and a CUDA torch).

Prints a table and writes JSON (``--out``): per option and file, seconds, which variant won, errors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "services" / "kernel-service" / "src"))

from kernel_service.workers.fast_builds import light_source  # noqa: E402

OPTIONS = ("plain", "pch", "light", "both")
EXAMPLES = ROOT / "bench" / "build_examples"

_BUILD = """
import json, os, sys, time
from pathlib import Path
from kernel_service.workers.fast_builds import pch_session
from kernel_service.judging.harness import load_module
source, pch = Path(sys.argv[1]).read_text(), sys.argv[2] or None
t0 = time.perf_counter()
try:
    with pch_session(pch) as hook:
        if hook is not None:
            from kernel_service.workers.artifacts import recording_builds
            with recording_builds(hook):
                load_module(source, "solution", Path(os.environ["TORCH_EXTENSIONS_DIR"]))
        else:
            load_module(source, "solution", Path(os.environ["TORCH_EXTENSIONS_DIR"]))
    print(json.dumps({"ok": True, "seconds": time.perf_counter() - t0}))
except Exception as exc:
    print(json.dumps({"ok": False, "seconds": time.perf_counter() - t0, "error": str(exc)[-800:]}))
"""


def _start(source: str, work: Path, pch: Path | None) -> tuple[subprocess.Popen[str], float]:
    """One cold build in a fresh process: its own empty extensions dir."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "solution_src.py"
    path.write_text(source)
    env = {
        **os.environ,
        "TORCH_EXTENSIONS_DIR": str(work),
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "services" / "kernel-service" / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _BUILD, str(path), str(pch or "")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return proc, time.perf_counter()


def _finish(proc: subprocess.Popen[str], started: float, timeout: float) -> dict[str, Any]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return {"ok": False, "seconds": timeout, "error": "timeout"}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    res: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "error": "no answer"}
    res["wall_s"] = time.perf_counter() - started
    return res


def make_pch(work: Path, source: str) -> tuple[Path, float | None]:
    """A PCH dir warmed with the flags this source builds with (one throwaway build of it)."""
    pch = work / "pch"
    pch.mkdir(parents=True, exist_ok=True)
    proc, t0 = _start(source, work / "warm", pch)
    _finish(proc, t0, 1800)
    made = [json.loads(p.read_text()).get("build_s") for p in pch.glob("*/pch.json")]
    return pch, (sum(made) if made else None)


def time_one(option: str, source: str, work: Path, pch: Path | None, timeout: float) -> dict[str, Any]:
    use_pch = pch if option in ("pch", "both") else None
    light = light_source(source) if option in ("light", "both") else None
    if light is None:
        proc, t0 = _start(source, work / "as-written", use_pch)
        res = _finish(proc, t0, timeout)
        res["variant"] = "as-written"
        return res
    light_proc, t0 = _start(light, work / "light", use_pch)  # both at once, as the service races them
    full_proc, _ = _start(source, work / "as-written", use_pch)
    light_res = _finish(light_proc, t0, timeout)
    if light_res.get("ok"):
        full_proc.kill()
        full_proc.wait()
        light_res["variant"] = "light"
        return light_res
    full_res = _finish(full_proc, t0, timeout)
    full_res["variant"] = "as-written"
    full_res["light_error"] = light_res.get("error")
    return full_res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("solutions", nargs="*", type=Path)
    ap.add_argument("--examples", action="store_true", help="add bench/build_examples/*.py")
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--timeout", type=float, default=900.0, help="per build")
    ap.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="solutions built at once per option (a busier host: times are upper bounds)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    files = list(args.solutions) + (sorted(EXAMPLES.glob("*.py")) if args.examples else [])
    if not files:
        ap.error("no solutions (give files or --examples)")
    options = [o for o in args.options.split(",") if o]
    unknown = set(options) - set(OPTIONS)
    if unknown:
        ap.error(f"unknown options {sorted(unknown)}; choose from {OPTIONS}")

    import torch

    report: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "cpus": len(os.sched_getaffinity(0)),
        "max_jobs": os.environ.get("MAX_JOBS"),
        "parallel": args.parallel,
        "results": {},
        "pch_build_s": {},
    }
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="ks-build-speed-") as tmp:
        work = Path(tmp)
        for option in options:
            pch: Path | None = None
            if option in ("pch", "both"):
                pch, built = make_pch(work / option, files[0].read_text())
                report["pch_build_s"][option] = built

            def build(f: Path, option: str = option, pch: Path | None = pch) -> None:
                res = time_one(option, f.read_text(), work / option / f.stem, pch, args.timeout)
                with lock:
                    report["results"].setdefault(f.name, {})[option] = res
                    if args.out:  # after every build: a run cut off by its time limit keeps what it measured
                        args.out.write_text(json.dumps(report, indent=2))
                    print(f"{option:6s} {f.name:24s} {res.get('seconds', 0):7.1f} s  {res.get('variant')}"
                          f"{'' if res.get('ok') else '  FAILED: ' + str(res.get('error'))[:120]}", flush=True)  # fmt: skip

            with ThreadPoolExecutor(max(1, args.parallel)) as pool:
                list(pool.map(build, files))

    print()
    print(f"{'solution':24s}" + "".join(f"{o:>12s}" for o in options))
    for name, row in report["results"].items():
        cells = [f"{row[o]['seconds']:11.1f}{'' if row[o].get('ok') else '!'}" for o in options if o in row]
        print(f"{name:24s}" + " ".join(cells))
    print(f"PCH builds (once per flag set): {report['pch_build_s']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
