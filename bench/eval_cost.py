"""Cost of one KernelBench evaluation, side by side in one run (issue 8, item 0). Run on a GPU host:

    python bench/eval_cost.py --problems .gpudata/problems.jsonl --out bench/results/eval_cost_h100.json

For the same level-1 problems, each submitted as its own solution (``ModelNew = Model``):

* ``upstream_style``: the loop the upstream harness runs in-process: inputs made by the problem's
  ``get_inputs()`` on the CPU (``torch.rand`` of up to billions of elements) and copied to the GPU,
  anew for each of 5 correctness trials and for timing, 100 CUDA-event timed runs of each side;
* ``service``: the same problem through the kernel service's HTTP API (inputs made on the GPU from
  seeded generators, 5 correctness trials, 100 timed runs of each side, L2 flush, full device sync),
  with the phases the service reports.

Both sides run the same number of trials, so the ratio is the harness's overhead, not less work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
#: Elementwise and reduction problems (the slow ones upstream) and two matmuls, by problem id.
DEFAULT_IDS = "19,21,23,26,36,47,1,4"


def upstream_style(code: str, correctness_trials: int, perf_trials: int) -> dict[str, Any]:
    """Mimic the upstream evaluation loop; return phase times in seconds."""
    t0 = time.perf_counter()
    mod = types.ModuleType("problem")
    exec(compile(code, "problem.py", "exec"), mod.__dict__)  # noqa: S102 - our own dataset
    dev = torch.device("cuda")
    torch.manual_seed(42)
    init = mod.get_init_inputs()
    ref = mod.Model(*init).to(dev)
    torch.manual_seed(42)
    new = mod.Model(*init).to(dev)
    t_init = time.perf_counter()
    correct = True
    for trial in range(correctness_trials):
        torch.manual_seed(1000 + trial)
        inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
        with torch.no_grad():
            a, b = ref(*inputs), new(*inputs)
        torch.cuda.synchronize()
        correct &= bool(torch.allclose(a, b, atol=1e-2, rtol=1e-2))
        del inputs, a, b
    t_corr = time.perf_counter()
    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    times: dict[str, list[float]] = {"ref": [], "new": []}
    with torch.no_grad():
        for name, m in (("ref", ref), ("new", new)):
            for _ in range(3):
                m(*inputs)
            torch.cuda.synchronize()
            for _ in range(perf_trials):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                m(*inputs)
                e.record()
                torch.cuda.synchronize()
                times[name].append(s.elapsed_time(e))
    t_time = time.perf_counter()
    del inputs, ref, new
    torch.cuda.empty_cache()
    return {
        "wall_s": t_time - t0,
        "init_s": t_init - t0,
        "correctness_s": t_corr - t_init,
        "timing_s": t_time - t_corr,
        "correct": correct,
        "speedup": statistics.median(times["ref"]) / statistics.median(times["new"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", required=True, type=Path, help="KernelBench problems.jsonl")
    parser.add_argument("--ids", default=DEFAULT_IDS, help="level-1 problem ids, comma-separated")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--skip-upstream", action="store_true", help="only the service side")
    args = parser.parse_args()

    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "services" / "kernel-service" / "src")]
    from kernel_service.service import KernelService, KernelServiceConfig

    from benchmark_runner.service.app import make_app
    from benchmark_runner.service.server import start_server

    rows = [json.loads(line) for line in args.problems.read_text().splitlines() if line.strip()]
    wanted = [int(i) for i in args.ids.split(",")]
    problems = [r for i in wanted for r in rows if r["level"] == 1 and r["problem_id"] == i]
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "trials": {"correctness": 5, "perf": 100},
        "problems": {},
    }

    def save() -> None:  # after each problem: partial results survive a time limit
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))

    # Upstream-style first, in this process, before the service's worker holds GPU memory.
    for p in problems:
        row: dict[str, Any] = result["problems"].setdefault(p["name"], {})
        if not args.skip_upstream:
            row["upstream_style"] = upstream_style(p["code"], 5, 100)
            print(p["name"], "upstream_style", json.dumps(row["upstream_style"]), flush=True)
            save()
    torch.cuda.empty_cache()
    service = KernelService(KernelServiceConfig(work_dir=Path(tempfile.mkdtemp(prefix="eval-cost-"))))
    with (
        start_server(make_app(service), startup_timeout=300) as server,
        httpx.Client(base_url=server.url, timeout=900) as client,
    ):
        for p in problems:
            body = {
                "reference": p["code"],
                "solution": p["code"] + "\n\nModelNew = Model\n",
                "backend": "torch",
                "options": {"correctness_trials": 5, "perf_trials": 100},
            }
            t0 = time.perf_counter()
            r = client.post("/v1/evaluate", json=body)
            r.raise_for_status()
            res = r.json()
            result["problems"][p["name"]]["service"] = {
                "wall_s": time.perf_counter() - t0,
                "outcome": res.get("outcome"),
                "speedup": res.get("speedup"),
                "elapsed": res.get("elapsed"),
                "phases": res.get("phases"),
            }
            print(p["name"], "service", json.dumps(result["problems"][p["name"]]["service"]), flush=True)
            save()
    svc = [r["service"]["wall_s"] for r in result["problems"].values()]
    result["service_mean_s"] = statistics.mean(svc)
    if not args.skip_upstream:
        up = [r["upstream_style"]["wall_s"] for r in result["problems"].values()]
        result["upstream_style_mean_s"] = statistics.mean(up)
        result["ratio_upstream_over_service"] = result["upstream_style_mean_s"] / result["service_mean_s"]
    print(json.dumps({k: v for k, v in result.items() if k != "problems"}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
