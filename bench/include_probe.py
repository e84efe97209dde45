"""How long nvcc takes on the example solutions' ``.cu`` files under each torch include (issue 34).

    python3 bench/include_probe.py [--parallel 4] [--out F]

Each example's ``cuda_source`` (bench/build_examples) is written with its ``torch/extension.h`` include
replaced by each candidate below and compiled alone by nvcc with the flags torch's ``load_inline`` would
use for it (taken from the ``build.ninja`` torch writes for a probe), ``--parallel`` compiles at once.
The ``.cu`` file is a cold build's critical path (``main.cpp`` builds beside it, and the PCH makes it
short), so this says which include could bring a build under 25 s. ``aten`` gives the source ``torch::``
as an alias of ``at::``; ``ops`` is the service's light include (``fast_builds.light_include``: ATen's
``Tensor``, the operators the source names, torch's names for ATen's). One compile per
example is also run with ``--time`` to split the time between nvcc's phases.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "bench" / "build_examples"
_SOURCE = re.compile(r'cuda_source\s*=\s*r?"""(.*?)"""', re.S)
_INCLUDE = re.compile(r"#\s*include\s*[<\"]torch/extension\.h[>\"]")
SHIM = "namespace torch { using namespace at; }"

sys.path.insert(0, str(ROOT / "services" / "kernel-service" / "src"))
from kernel_service.workers.fast_builds import light_include, ninja_variables  # noqa: E402


def includes(source: str) -> dict[str, str]:
    return {
        "extension": "#include <torch/extension.h>",
        "types": "#include <torch/types.h>",
        "aten": f"#include <ATen/ATen.h>\n{SHIM}",
        "ops": light_include(source) if source else "",  # what the service's light build uses
    }


def nvcc_command() -> str:
    """nvcc and the flags torch's ninja file gives a ``.cu`` source of ``load_inline`` ({src}, {obj})."""
    from torch.utils import cpp_extension

    with tempfile.TemporaryDirectory() as tmp:
        ninja = Path(tmp) / "build.ninja"
        cpp_extension._write_ninja_file_to_build_library(
            str(ninja), "probe", [str(Path(tmp) / "k.cu")], [], ["-O3"], [], [], [], True, False, False
        )
        values = ninja_variables(ninja.read_text())
    flags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", values.get("cuda_cflags", ""))
    return f"{values.get('nvcc', 'nvcc')} {flags} -c {{src}} -o {{obj}} {values.get('cuda_post_cflags', '')}"


def compile_one(cmd: str, name: str, variant: str, text: str, work: Path, timed: bool) -> dict[str, Any]:
    src = work / f"{name}-{variant}.cu"
    src.write_text(text)
    extra = f" --time {work / f'{name}-{variant}.csv'}" if timed else ""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd.format(src=src, obj=src.with_suffix(".o")) + extra, shell=True,
                          capture_output=True, text=True)  # fmt: skip
    row: dict[str, Any] = {"example": name, "include": variant, "ok": proc.returncode == 0,
                           "seconds": round(time.perf_counter() - t0, 2)}  # fmt: skip
    if proc.returncode:
        row["error"] = proc.stderr[-600:]
    if timed and proc.returncode == 0:
        phases: dict[str, float] = {}
        with open(work / f"{name}-{variant}.csv") as f:
            for raw in csv.DictReader(f):
                r = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
                phase = r.get("phase name", "")
                phases[phase] = phases.get(phase, 0.0) + float(r.get("metric") or 0) / 1e3
        row["phases_s"] = {k: round(v, 2) for k, v in phases.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cmd = nvcc_command()
    print(cmd, flush=True)
    jobs = []
    for path in sorted(EXAMPLES.glob("*.py")):
        m = _SOURCE.search(path.read_text())
        if not m:
            continue
        source = m.group(1)
        for variant, include in includes(source).items():
            jobs.append((path.stem, variant, _INCLUDE.sub(include, source), variant == "extension"))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(compile_one, cmd, n, v, t, Path(tmp), timed) for n, v, t, timed in jobs]
        for fut in futures:
            row = fut.result()
            rows.append(row)
            print(json.dumps(row), flush=True)
    table: dict[str, dict[str, Any]] = {}
    for r in rows:
        table.setdefault(r["example"], {})[r["include"]] = r["seconds"] if r["ok"] else "failed"
    variants = list(includes("").keys())
    print(f"\n{'example':18}" + "".join(f"{v:>11}" for v in variants))
    for name, cells in table.items():
        print(f"{name:18}" + "".join(f"{cells.get(v, '-')!s:>11}" for v in variants))
    if args.out:
        args.out.write_text(json.dumps({"command": cmd, "parallel": args.parallel, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
