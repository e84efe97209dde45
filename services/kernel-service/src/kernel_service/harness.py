"""The in-worker evaluation of one submission: load, compile, check, time.

Runs inside a worker subprocess (``kernel_service.worker``), never in the server: solution code is
executed here, in-process, so everything this module does is only as trustworthy as the process
boundary around it (see the README for what is and is not defended).

Method, in order: reference and solution loaded from source into fresh modules; both models built
after the same ``torch.manual_seed`` (identical weights); ``correctness_trials`` fresh input sets
(one seed each, generated the same way for both sides, directly on the device); then warm-up and
``perf_trials`` timed calls per side, interleaved (ABBA) so clock drift hits both sides alike, each on
freshly generated inputs, L2 flushed and the device synchronised around every call; finally the last
timed outputs are compared again so a kernel cannot be right only when it is being checked.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .compare import compare_outputs, default_tolerance
from .schemas import EvalOptions, Outcome, TimingStats, excerpt, reward_for

#: Bytes zeroed before every timed CUDA call: larger than any current GPU's L2 (H100: 50 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024
#: Stop timing early (keeping what was measured) once this share of the job's timeout is spent.
TIMING_BUDGET_SHARE = 0.6
MIN_TIMED_TRIALS = 5

PhaseReporter = Callable[[str], None]


class HarnessError(Exception):
    """A failure with a known outcome (raised inside a phase, turned into the response)."""

    def __init__(self, outcome: Outcome, message: str, tb: str | None = None, compile_log: str | None = None):
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.tb = tb
        self.compile_log = compile_log


@dataclass
class Job:
    """One evaluation as the worker receives it (already validated by the parent)."""

    job_id: str
    reference: str
    solution: str
    backend: str
    options: EvalOptions
    build_dir: str
    cached_ref_timing: TimingStats | None = None
    mode: str = "eval"  # "eval" | "compile" (load the solution only, to fill the build cache)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        cached = d.get("cached_ref_timing")
        return cls(
            job_id=str(d["job_id"]),
            reference=str(d.get("reference") or ""),
            solution=str(d["solution"]),
            backend=str(d.get("backend", "torch")),
            options=EvalOptions.model_validate(d.get("options") or {}),
            build_dir=str(d["build_dir"]),
            cached_ref_timing=TimingStats.model_validate(cached) if cached else None,
            mode=str(d.get("mode", "eval")),
        )


@dataclass
class Environment:
    """Facts about the worker that go into every response."""

    device: str
    hardware: str
    torch_version: str = field(default_factory=lambda: torch.__version__)
    cuda_version: str | None = field(default_factory=lambda: torch.version.cuda)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU: " + (platform.processor() or platform.machine())


def probe_environment() -> Environment:
    if torch.cuda.is_available():
        return Environment(device="cuda", hardware=torch.cuda.get_device_name(0))
    return Environment(device="cpu", hardware=cpu_name())


# ---- loading ------------------------------------------------------------------------------------


def load_module(source: str, name: str, directory: Path) -> ModuleType:
    """Execute ``source`` as a fresh module backed by a real file (Triton and tracebacks need one)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    mod_name = f"{name}_{digest}_{os.getpid()}_{time.monotonic_ns()}"
    path = directory / f"{mod_name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses, pickling and Triton look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def reset_extension_versioner() -> None:
    """Forget extensions built earlier in this (persistent) worker.

    ``load_inline`` bumps a per-process version (``name_v1``...) when a name was already built with other
    sources; in a warm worker that would make the name depend on history, so the content-addressed
    build cache would miss. Each job has its own build dir, so version 0 is always right.
    """
    from torch.utils import cpp_extension

    cpp_extension.JIT_EXTENSION_VERSIONER = cpp_extension.ExtensionVersioner()


def _tb() -> str:
    return traceback.format_exc()


def load_solution(job: Job, workdir: Path) -> ModuleType:
    """Import the solution (this runs its ``load_inline`` calls); failures are compilation failures."""
    os.environ["TORCH_EXTENSIONS_DIR"] = job.build_dir
    Path(job.build_dir).mkdir(parents=True, exist_ok=True)
    reset_extension_versioner()
    try:
        module = load_module(job.solution, "solution", workdir)
    except BaseException as exc:  # SystemExit included: a solution must not end the worker
        if isinstance(exc, KeyboardInterrupt):
            raise
        tb = _tb()
        raise HarnessError(
            Outcome.COMPILATION_FAILURE,
            f"solution failed to load/compile: {type(exc).__name__}: {str(exc)[:500]}",
            tb=tb,
            compile_log=str(exc),
        ) from exc
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise HarnessError(Outcome.COMPILATION_FAILURE, "solution defines no class `ModelNew`")
    return module


# ---- inputs and calls ---------------------------------------------------------------------------


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator


def make_inputs(get_inputs: Callable[[], Any], seed: int, device: torch.device) -> list[Any]:
    """Fresh inputs from ``seed``, created directly on ``device`` (no host-side giant tensors)."""
    seed_all(seed)
    with torch.device(device):
        values = list(get_inputs())
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def build_model(cls: type, init_inputs: list[Any], seed: int, device: torch.device) -> torch.nn.Module:
    """Construct after seeding, on the device, so reference and solution get identical weights."""
    seed_all(seed)
    with torch.device(device):
        model = cls(*init_inputs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    return model


class Timer:
    """Times one call the same way for both sides.

    CUDA: device synchronised, L2 flushed (a 256 MB buffer zeroed), start event, the call, a full
    ``torch.cuda.synchronize()`` (so work the call queued on any stream is finished), then the end event:
    the reading covers all streams plus a constant few microseconds of sync latency, identical for both
    sides. CPU: ``time.perf_counter`` around the call.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.flush_buf = (
            torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if self.cuda else None
        )
        self.method = (
            "cuda_events+device_sync, L2 flush (256 MB) per trial, interleaved ABBA, median"
            if self.cuda
            else "time.perf_counter per call, interleaved ABBA, median"
        )

    def __call__(self, fn: Callable[..., Any], inputs: list[Any]) -> tuple[float, Any]:
        if self.cuda:
            assert self.flush_buf is not None
            torch.cuda.synchronize()
            self.flush_buf.zero_()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*inputs)
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)), out
        t0 = time.perf_counter()
        out = fn(*inputs)
        return (time.perf_counter() - t0) * 1e3, out

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


# ---- the evaluation -----------------------------------------------------------------------------


def resolve_device(options: EvalOptions, env: Environment) -> torch.device:
    if options.device == "cuda" or (options.device == "auto" and env.device == "cuda"):
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return torch.device("cpu")


def compile_only(job: Job, workdir: Path, env: Environment, report: PhaseReporter) -> dict[str, Any]:
    """Import the solution once so its ``load_inline`` builds land in the shared build cache."""
    report("compile")
    t0 = time.perf_counter()
    try:
        load_solution(job, workdir)
    except HarnessError as err:
        build_error = "Error building extension" in (err.compile_log or "") or "ninja" in (err.tb or "")
        return {
            "ok": False,
            "build_error": build_error,
            "message": err.message,
            "compile_log": excerpt(err.compile_log),
            "traceback": excerpt(err.tb),
            "compile_s": time.perf_counter() - t0,
        }
    return {"ok": True, "build_error": False, "message": "", "compile_s": time.perf_counter() - t0}


def evaluate(job: Job, workdir: Path, env: Environment, report: PhaseReporter) -> dict[str, Any]:
    """Run one evaluation; never raises for a bad submission. Returns a KernelEvalResponse dict."""
    opts = job.options
    device = resolve_device(opts, env)
    base: dict[str, Any] = {
        "backend": job.backend,
        "device": str(device),
        "hardware": env.hardware,
        "torch_version": env.torch_version,
        "cuda_version": env.cuda_version,
        "correctness_trials": opts.correctness_trials,
    }
    elapsed: dict[str, float] = {}
    started = time.perf_counter()
    try:
        result = _evaluate(job, workdir, device, base, elapsed, report, started)
    except HarnessError as err:
        result = {
            **base,
            "outcome": err.outcome.value,
            "reward": reward_for(err.outcome, None),
            "message": err.message,
            "traceback": excerpt(err.tb),
            "compile_log": excerpt(err.compile_log),
        }
    except BaseException as exc:  # a harness bug, or SystemExit/KeyboardInterrupt raised by the solution
        result = {
            **base,
            "outcome": Outcome.UNKNOWN_ERROR.value,
            "reward": reward_for(Outcome.UNKNOWN_ERROR, None),
            "message": f"unexpected {type(exc).__name__}: {str(exc)[:500]}",
            "traceback": excerpt(_tb()),
        }
    result.setdefault("elapsed", {}).update(elapsed)
    result["elapsed"]["total_s"] = time.perf_counter() - started
    return result


def _phase(report: PhaseReporter, elapsed: dict[str, float], key: str, name: str) -> _PhaseTimer:
    report(name)
    return _PhaseTimer(elapsed, key)


class _PhaseTimer:
    def __init__(self, elapsed: dict[str, float], key: str) -> None:
        self.elapsed, self.key = elapsed, key

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.elapsed[self.key] = self.elapsed.get(self.key, 0.0) + time.perf_counter() - self.t0


def _run_solution(
    what: str,
    fn: Callable[[], Any],
    outcome: Outcome = Outcome.EXECUTION_FAILURE,
    device: torch.device | None = None,
) -> Any:
    try:
        out = fn()
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize()  # surface asynchronous CUDA faults here, attributed to the solution
        return out
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise HarnessError(outcome, f"{what}: {type(exc).__name__}: {str(exc)[:1000]}", tb=_tb()) from exc


def _run_reference(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise HarnessError(
            Outcome.UNKNOWN_ERROR, f"the reference failed ({what}): {type(exc).__name__}: {exc}", tb=_tb()
        ) from exc


def _evaluate(
    job: Job,
    workdir: Path,
    device: torch.device,
    base: dict[str, Any],
    elapsed: dict[str, float],
    report: PhaseReporter,
    started: float,
) -> dict[str, Any]:
    opts = job.options
    with _phase(report, elapsed, "init_s", "load_reference"):
        ref_mod = _run_reference("loading", lambda: load_module(job.reference, "reference", workdir))
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(ref_mod, attr):
                raise HarnessError(Outcome.UNKNOWN_ERROR, f"the reference defines no `{attr}`")
    with _phase(report, elapsed, "compile_s", "load_solution"):
        sol_mod = load_solution(job, workdir)
    if opts.device == "cuda" and device.type != "cuda":
        raise HarnessError(Outcome.REQUIRES_GPU, "device 'cuda' requested but this worker has no CUDA device")

    with _phase(report, elapsed, "init_s", "init_reference"):
        init_inputs = _run_reference(
            "get_init_inputs", lambda: make_inputs(ref_mod.get_init_inputs, opts.seed, device)
        )
        ref_model = _run_reference(
            "Model(...)", lambda: build_model(ref_mod.Model, init_inputs, opts.seed, device)
        )
    with _phase(report, elapsed, "init_s", "init_solution"):
        init_inputs_new = make_inputs(ref_mod.get_init_inputs, opts.seed, device)
        new_model = _run_solution(
            "ModelNew(...) raised",
            lambda: build_model(sol_mod.ModelNew, init_inputs_new, opts.seed, device),
            Outcome.INITIALIZATION_FAILURE,
            device,
        )

    atol, rtol = opts.atol, opts.rtol
    passed = 0
    max_abs = max_rel = 0.0
    with _phase(report, elapsed, "correctness_s", "correctness"), torch.no_grad():
        for trial in range(opts.correctness_trials):
            seed = opts.seed * 1000 + 17 * (trial + 1)
            ref_inputs = make_inputs(ref_mod.get_inputs, seed, device)
            ref_out = _run_reference("forward", partial(ref_model, *ref_inputs))
            del ref_inputs
            if atol is None or rtol is None:
                tol = default_tolerance(_flat(ref_out))
                atol = tol if atol is None else atol
                rtol = tol if rtol is None else rtol
            new_inputs = make_inputs(ref_mod.get_inputs, seed, device)
            new_out = _run_solution("forward raised", partial(new_model, *new_inputs), device=device)
            cmp = compare_outputs(ref_out, new_out, atol, rtol)
            max_abs = max(max_abs, cmp.max_abs_error or 0.0)
            max_rel = max(max_rel, cmp.max_rel_error or 0.0)
            if not cmp.ok:
                return {
                    **base,
                    "outcome": Outcome.INCORRECT.value,
                    "reward": reward_for(Outcome.INCORRECT, None),
                    "message": f"correctness trial {trial + 1}/{opts.correctness_trials}: {cmp.message}",
                    "correctness_trials_passed": passed,
                    "max_abs_error": cmp.max_abs_error,
                    "max_rel_error": cmp.max_rel_error,
                    "atol": atol,
                    "rtol": rtol,
                }
            passed += 1
            del ref_out, new_out, new_inputs

    common = {
        **base,
        "correctness_trials_passed": passed,
        "max_abs_error": max_abs if passed else None,
        "max_rel_error": max_rel if passed else None,
        "atol": atol,
        "rtol": rtol,
    }
    if opts.correctness_trials == 0:
        return {
            **common,
            "outcome": Outcome.COMPILED.value,
            "reward": 0.0,
            "message": "correctness not checked",
        }
    if not opts.measure_performance:
        return {
            **common,
            "outcome": Outcome.CORRECT.value,
            "reward": 0.0,
            "message": "performance not measured",
        }

    assert atol is not None and rtol is not None
    with _phase(report, elapsed, "timing_s", "timing"), torch.no_grad():
        timing = _time_both(job, ref_mod, ref_model, new_model, device, atol, rtol, started)
    if timing.get("mismatch"):
        return {
            **common,
            "outcome": Outcome.INCORRECT.value,
            "reward": reward_for(Outcome.INCORRECT, None),
            "message": f"output of the last timed call differs from the reference: {timing['mismatch']}",
        }
    speedup = timing["ref"].median / timing["new"].median if timing["new"].median > 0 else None
    return {
        **common,
        "outcome": Outcome.CORRECT.value,
        "reward": reward_for(Outcome.CORRECT, speedup),
        "speedup": speedup,
        "ref_timing": timing["ref"].model_dump(),
        "new_timing": timing["new"].model_dump(),
        "ref_timing_cached": timing["ref_cached"],
        "timing_method": timing["method"],
    }


def _flat(out: Any) -> list[Any]:
    from .compare import flatten_outputs

    return flatten_outputs(out)


def _time_both(
    job: Job,
    ref_mod: ModuleType,
    ref_model: Any,
    new_model: Any,
    device: torch.device,
    atol: float,
    rtol: float,
    started: float,
) -> dict[str, Any]:
    opts = job.options
    timer = Timer(device)
    cached = job.cached_ref_timing
    # Timing seeds come from the OS, not from the request: a solution cannot precompute them.
    base_seed = int.from_bytes(os.urandom(6), "little")
    budget = opts.timeout_s * TIMING_BUDGET_SHARE

    warm_inputs = make_inputs(ref_mod.get_inputs, base_seed, device)
    for _ in range(opts.warmup):
        if cached is None:
            ref_model(*warm_inputs)
        _run_solution("forward raised during warm-up", partial(new_model, *warm_inputs), device=device)
    timer.sync()
    del warm_inputs

    ref_times: list[float] = []
    new_times: list[float] = []
    last_ref: Any = None
    last_new: Any = None
    for i in range(opts.perf_trials):
        seed = base_seed + i + 1
        order = ("ref", "new") if i % 2 == 0 else ("new", "ref")
        for side in order:
            inputs = make_inputs(ref_mod.get_inputs, seed, device)
            if side == "ref":
                if cached is not None:
                    continue
                ms, last_ref = timer(ref_model, inputs)
                ref_times.append(ms)
            else:
                ms, last_new = _run_solution("forward raised while timed", partial(timer, new_model, inputs))
                new_times.append(ms)
            del inputs
        if time.perf_counter() - started > budget and len(new_times) >= MIN_TIMED_TRIALS:
            break
    last_seed = base_seed + len(new_times)
    if cached is not None or last_ref is None:
        last_ref = ref_model(*make_inputs(ref_mod.get_inputs, last_seed, device))
    timer.sync()
    cmp = compare_outputs(last_ref, last_new, atol, rtol)
    ref_stats = cached if cached is not None else TimingStats.of(ref_times)
    return {
        "ref": ref_stats,
        "new": TimingStats.of(new_times),
        "ref_cached": cached is not None,
        "method": timer.method,
        "mismatch": None if cmp.ok else cmp.message,
    }
