"""Where a cold fast build's time goes: each ninja target of one example's light build, with the PCH.

    python3 bench/build_paths.py [--example add] [--out F]

Builds ``bench/build_examples/<example>.py`` as the service's fast build does (each light include
variant, the precompiled ``torch/extension.h``; the PCH's own build lands in the first) in fresh
extensions dirs and prints ``.ninja_log``'s time per target (``cuda.cuda.o``, ``main.o``, the link). Then compiles that build's ``main.cpp`` again by hand, with
the PCH, with the PCH and ``-O0``, and without either, to say what the binding file costs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "services" / "kernel-service" / "src"))

from kernel_service.judging.harness import load_module  # noqa: E402
from kernel_service.workers.artifacts import recording_builds  # noqa: E402
from kernel_service.workers.fast_builds import light_sources, ninja_variables, pch_session  # noqa: E402


def ninja_targets(ext_root: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for log in ext_root.rglob(".ninja_log"):
        for line in log.read_text().splitlines():
            if line.startswith("#"):
                continue
            start, end, _, target, *_ = line.split("\t")
            out[target] = round((int(end) - int(start)) / 1e3, 2)
    return out


def main_cpp_times(ext_root: Path, pch_include: str | None) -> dict[str, Any]:
    ninja = next(ext_root.rglob("build.ninja"))
    v = ninja_variables(ninja.read_text())
    base = (
        f"{v['cxx']} {v['cflags']} -c {ninja.parent / 'main.cpp'} -o /tmp/main.o {v.get('post_cflags', '')}"
    )
    times: dict[str, Any] = {}
    for name, extra, cpath in (
        ("plain", "", None),
        ("pch", "", pch_include),
        ("pch_O0", " -O0", pch_include),
    ):
        env = {**os.environ}
        if cpath:
            env["CPATH"] = cpath
        t0 = time.perf_counter()
        proc = subprocess.run(base + extra, shell=True, env=env, capture_output=True, text=True)
        times[name] = round(time.perf_counter() - t0, 2) if proc.returncode == 0 else proc.stderr[-400:]
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", default="add")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    source = (ROOT / "bench" / "build_examples" / f"{args.example}.py").read_text()
    result: dict[str, Any] = {"example": args.example}
    with tempfile.TemporaryDirectory() as tmp:
        pch_root = Path(tmp) / "pch"
        pch_root.mkdir()
        pch_include = None
        # the lightest variant (ATen ops) and the next (torch/types.h), each cold, one PCH for both
        for name, variant in zip(("ops", "types"), light_sources(source), strict=True):
            ext = Path(tmp) / f"ext-{name}"
            ext.mkdir()
            os.environ["TORCH_EXTENSIONS_DIR"] = str(ext)
            t0 = time.perf_counter()
            with pch_session(str(pch_root)) as hook:
                assert hook is not None
                with recording_builds(hook):
                    load_module(variant, f"solution_{name}", ext)
                pch_include = os.environ.get("CPATH")
            result[name] = {
                "load_s": round(time.perf_counter() - t0, 2),
                "ninja_targets_s": ninja_targets(ext),
            }
        result["pch_build_s"] = [
            json.loads(p.read_text()).get("build_s") for p in pch_root.glob("*/pch.json")
        ]
        result["main_cpp_by_hand_s"] = main_cpp_times(Path(tmp) / "ext-ops", pch_include)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
