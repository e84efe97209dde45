"""Profiler feedback (``EvalOptions.profile``): where one untimed call of each side spends its time.

Collected in the side processes, after the verdict and the timing (judge.py ``_profile``): the
reference in its own side, the candidate in a side forked again for it (its timed process was killed
before the reference was timed). The side runs a few warm-up calls, times a few plain calls with its
own clock (``call_us``), then profiles one call with ``torch.profiler``: on a GPU the kernels CUPTI saw
(name, launches, GPU time; memcpy/memset too), on the CPU the PyTorch ops' self time. On a GPU with
``ncu`` on the PATH, the candidate's side also replays the call in a child process under Nsight
Compute and reports a few metrics of the heaviest kernel; where ncu is absent or refused, the report
says why.

All of it is advisory: it comes from the candidate's process (a submission can shape or fake its own
profile), so the judge only checks its form (:func:`side_profile`, :func:`ncu_report_of`) and reports
it; no verdict, reward or time depends on it. Nothing here runs unless a request asks for a profile.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Untimed calls before the measured ones (caches, lazy module loading, autotuning, JIT compiles).
WARMUP_CALLS = 3
#: Plain calls whose median wall time is ``call_us`` (the profiled call is slowed by the profiler).
WALL_CALLS = 3
#: Kernels kept per side, heaviest first (``kernel_count`` says how many there were).
TOP_KERNELS = 15
NAME_CHARS = 200
#: Most seconds one ncu replay may take (less where the job's deadline is nearer).
NCU_TIMEOUT_S = 120.0
#: Kernels ncu measures at most in the replayed call (each is replayed once per metric pass).
NCU_LAUNCH_COUNT = 64
#: Nsight Compute metrics of the heaviest kernel, by the name the answer gives them.
NCU_METRICS: dict[str, str] = {
    "gpu_time_us": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
}
CUDA_SOURCE = "GPU kernels seen by CUPTI through torch.profiler: launches and GPU time"
CPU_SOURCE = "PyTorch CPU ops under torch.profiler: calls and self time (slowed by the profiler)"
#: The ``record_function`` range around the profiled call.
MARK = "kernel_service.profiled_call"
NOTE = (
    "advisory: collected in the side processes after the verdict and timing; it decides no verdict, "
    "reward or time"
)


# ---- in a side process ----------------------------------------------------------------------------


def profile_call(call: Callable[[], Any], device: Any, sync: Callable[[], None]) -> dict[str, Any]:
    """Warm-up calls, ``WALL_CALLS`` plain calls timed by this process's clock, then one call under
    ``torch.profiler``: the kernels (GPU) or ops (CPU) it ran, heaviest first."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(WARMUP_CALLS):
        call()
        sync()
    walls = []
    for _ in range(WALL_CALLS):
        t0 = time.perf_counter()
        call()
        sync()
        walls.append((time.perf_counter() - t0) * 1e6)
    cuda = getattr(device, "type", "cpu") == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with record_function(MARK + ".warm"):  # its op's first lookup (~1 ms) must not fall in the mark
        pass
    with profile(activities=activities) as prof:
        if not cuda:  # the profiler's own first-op costs fall here, outside the marked call (GPU
            call()  # times are the device's: unaffected, and every kernel seen is the marked call's)
            sync()
        with record_function(MARK):
            call()
            sync()
    events = list(prof.events())
    mark = next((e for e in events if e.name == MARK and e.device_type == DeviceType.CPU), None)
    if mark is None:
        return {"error": "the profiler recorded no call"}
    lo, hi = float(mark.time_range.start), float(mark.time_range.end)
    totals: dict[str, list[float]] = {}
    spans: list[tuple[float, float]] = []
    for e in events:
        if e is mark or e.name.startswith((MARK, "[")) or getattr(e, "is_user_annotation", False):
            continue
        if not cuda and (float(e.time_range.start) < lo or float(e.time_range.end) > hi):
            continue  # the first, unmarked call's
        if cuda and e.device_type == DeviceType.CUDA:
            start, end = float(e.time_range.start), float(e.time_range.end)
            spent = max(end - start, 0.0)
            spans.append((start, end))
        elif not cuda and e.device_type == DeviceType.CPU and not e.is_async:
            spent = float(e.self_cpu_time_total)
        else:
            continue
        entry = totals.setdefault(e.name, [0, 0.0])
        entry[0] += 1
        entry[1] += spent
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])
    busy = _union(spans) if cuda else sum(t for _, (_, t) in ranked)
    call_us = statistics.median(walls)
    # GPU: kernel times are the device's own, so against a plain call's wall time; CPU: the profiler
    # slows every op, so the ops' self time against the profiled call's own wall time
    profiled_us = hi - lo
    span = call_us if cuda else profiled_us
    report: dict[str, Any] = {
        "call_us": round(call_us, 3),
        "profiled_us": round(profiled_us, 3),
        "kernel_us": round(busy, 3),
        "outside_share": round(min(max(1.0 - busy / span, 0.0), 1.0), 4) if span > 0 else None,
        "kernel_count": len(ranked),
        "kernels": [
            {"name": name[:NAME_CHARS], "calls": int(n), "time_us": round(t, 3)}
            for name, (n, t) in ranked[:TOP_KERNELS]
        ],
    }
    if cuda and not ranked:
        report["error"] = "the profiler saw no GPU kernel (CUPTI unavailable here, or the call launched none)"
    return report


def _union(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``spans`` (kernels of several streams may overlap)."""
    total, end = 0.0, -math.inf
    for lo, hi in sorted(spans):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def ncu_report(
    loaded: dict[str, Any], args: Any, kwargs: Any, device: Any, workdir: Path, timeout_s: float
) -> dict[str, Any]:
    """Nsight Compute's metrics of the heaviest kernel of one call, replayed in a child process of this
    side (same sandbox) that rebuilds the model from ``loaded`` (a BackendBench side: imports the module
    and takes its ``function``) and calls it on copies of ``args``; or ``{"error": why}``."""
    if getattr(device, "type", "cpu") != "cuda":
        return {"error": "no CUDA device: ncu measures GPU kernels only"}
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"error": "ncu (Nsight Compute) is not on the service's PATH"}
    if not loaded:
        return {"error": "no model was loaded to replay"}
    import torch

    def host(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.detach().to("cpu", copy=True)
        if isinstance(v, list | tuple):
            return type(v)(host(x) for x in v)
        if isinstance(v, dict):
            return {k: host(x) for k, x in v.items()}
        return v

    spec = workdir / "ncu-replay.pt"
    log = workdir / "ncu-log.csv"
    try:
        torch.save(
            {**loaded, "args": host(list(args)), "kwargs": host(dict(kwargs)), "device": str(device)}, spec
        )
    except Exception as exc:  # noqa: BLE001 - a disk limit, an unpicklable input: say so
        return {
            "error": f"could not write the call for ncu to replay: {type(exc).__name__}: {str(exc)[:300]}"
        }
    cmd = [
        ncu, "--csv", "--page", "raw", "--profile-from-start", "off", "--launch-count", str(NCU_LAUNCH_COUNT),
        "--metrics", ",".join(NCU_METRICS.values()), "--log-file", str(log),
        sys.executable, "-m", "kernel_service.judging.profiling", "replay", str(spec),
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=workdir,
            env=dict(os.environ),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"ncu did not finish within {timeout_s:.0f} s"}
    except OSError as exc:
        return {"error": f"ncu could not start: {exc}"}
    text = (log.read_text(errors="replace") if log.is_file() else "") + "\n" + (proc.stdout or "")
    return parse_ncu_csv(text, proc.returncode, proc.stderr or "")


def parse_ncu_csv(text: str, returncode: int = 0, stderr: str = "") -> dict[str, Any]:
    """The heaviest kernel's metrics from ncu's ``--csv --page raw`` output, or why there are none."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header_at is None:
        errors = [
            ln.strip() for ln in (text + "\n" + stderr).splitlines() if "==ERROR==" in ln or "ERR_" in ln
        ]
        tail = "; ".join(errors[:3]) or "no output"
        # ncu's own lines say only that the replay failed; the replay's last line says why (its exception).
        app = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("==")]
        if app:
            tail += f"; the replay's last output: {app[-1][-300:]}"
        if "cudaGetDeviceCount" in tail:  # measured on the H100 (bench/ncu_sandbox_probe.py)
            tail += "; under ncu, CUDA does not start inside the worker's Landlock sandbox (it does without Landlock)"
        return {"error": f"ncu measured no kernel (exit status {returncode}): {tail[:600]}"}
    header = rows[header_at]
    best: dict[str, float] | None = None
    best_name = ""
    for row in rows[header_at + 1 :]:
        if len(row) != len(header):
            continue
        record = dict(zip(header, row, strict=True))
        values = {key: _number(record.get(metric)) for key, metric in NCU_METRICS.items()}
        if values["gpu_time_us"] is None:  # the units row, or a kernel without the metric
            continue
        clean = {k: v for k, v in values.items() if v is not None}
        if best is None or clean["gpu_time_us"] > best["gpu_time_us"]:
            best, best_name = clean, record.get("Kernel Name", "")
    if best is None:
        return {"error": "ncu's output held no kernel with metrics"}
    unit = rows[header_at + 1] if header_at + 1 < len(rows) else []
    unit_of_time = dict(zip(header, unit, strict=False)).get(NCU_METRICS["gpu_time_us"], "nsecond")
    best["gpu_time_us"] *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(
        unit_of_time, 1e-3
    )
    return {"kernel": best_name[:NAME_CHARS], "metrics": best}


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        x = float(value.replace(",", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def replay(spec_path: str) -> None:
    """``python -m kernel_service.judging.profiling replay SPEC`` (under ncu): rebuild the model (or import the
    BackendBench kernel's function), warm it up, then one call between ``cudaProfilerStart`` and ``Stop``
    (what ncu measures, with ``--profile-from-start off``)."""
    import torch

    from .harness import build_model, load_module, precision_dtype

    spec = torch.load(spec_path, weights_only=False)
    device = torch.device(spec["device"])
    if device.index is not None:  # a BackendBench side names "cuda" alone: the current device stands
        torch.cuda.set_device(device)
    model: Any
    if "function" in spec:  # a BackendBench kernel: the module's function, called as the judge called it
        model = getattr(load_module(spec["source"], "kernel", Path(spec_path).parent), spec["function"])
    else:
        module = load_module(spec["source"], "solution", Path(spec_path).parent)
        model = build_model(
            getattr(module, spec["cls"]),
            spec["init"],
            spec["seed"],
            device,
            precision_dtype(spec["precision"]),
            module_mode=spec.get("module_mode", "train"),
        )

    def on_device(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.to(device)
        if isinstance(v, list | tuple):
            return type(v)(on_device(x) for x in v)
        if isinstance(v, dict):
            return {k: on_device(x) for k, x in v.items()}
        return v

    args, kwargs = on_device(spec["args"]), on_device(spec["kwargs"])
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            model(*args, **kwargs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        model(*args, **kwargs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


# ---- in the judge ---------------------------------------------------------------------------------


def side_profile(reply: Any) -> dict[str, Any]:
    """A side's profile checked for form (a ``SideProfile``), or an error saying it was not usable: the
    side is untrusted, and a malformed report must not turn into a malformed answer."""
    from .schemas import SideProfile

    if not isinstance(reply, dict):
        return {"error": "the side sent no profile"}
    keys = ("call_us", "profiled_us", "kernel_us", "outside_share", "kernel_count", "kernels", "error")
    data: dict[str, Any] = {k: reply[k] for k in keys if reply.get(k) is not None}
    kernels = data.get("kernels")
    if isinstance(kernels, list):
        data["kernels"] = [
            {**k, "name": k["name"][:NAME_CHARS]}
            if isinstance(k, dict) and isinstance(k.get("name"), str)
            else k
            for k in kernels[:TOP_KERNELS]
        ]
    error = data.get("error")
    if isinstance(error, str):
        data["error"] = error[:500]
    try:
        checked = SideProfile.model_validate(data)
    except ValueError:
        return {"error": "the side's profile was malformed"}
    numbers = [checked.call_us, checked.profiled_us, checked.kernel_us, checked.outside_share]
    numbers += [k.time_us for k in checked.kernels]
    if any(x is not None and not math.isfinite(x) for x in numbers):
        return {"error": "the side's profile was malformed"}
    return checked.model_dump()


def ncu_report_of(reply: Any) -> dict[str, Any] | None:
    """The candidate's ncu report checked for form (a ``NcuReport``), None if there is none."""
    from .schemas import NcuReport

    if reply is None:
        return None
    if not isinstance(reply, dict):
        return {"error": "the side's ncu report was malformed"}
    data = {"kernel": reply.get("kernel"), "metrics": reply.get("metrics") or {}, "error": reply.get("error")}
    if isinstance(data["kernel"], str):
        data["kernel"] = data["kernel"][:NAME_CHARS]
    if isinstance(data["error"], str):
        data["error"] = data["error"][:600]
    try:
        checked = NcuReport.model_validate(data)
    except ValueError:
        return {"error": "the side's ncu report was malformed"}
    if len(checked.metrics) > len(NCU_METRICS) or any(not math.isfinite(v) for v in checked.metrics.values()):
        return {"error": "the side's ncu report was malformed"}
    return checked.model_dump()


if __name__ == "__main__":  # pragma: no cover - run by ncu in a side's child process
    if len(sys.argv) == 3 and sys.argv[1] == "replay":
        replay(sys.argv[2])
    else:
        sys.exit("usage: python -m kernel_service.judging.profiling replay SPEC")
