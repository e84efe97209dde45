"""The in-worker evaluation of one submission: load, compile, check, time.

Runs inside a worker subprocess (``kernel_service.worker``), never in the server: solution code is
executed here, in-process, so everything this module does is only as trustworthy as the process
boundary around it (see the README for what is and is not defended).

Method, in order: the reference loaded from source into a fresh module and its model built (after
``torch.manual_seed(options.seed)``); then an integrity snapshot (``integrity.PatchGuard``: timers,
torch, this module, the reference module and model weights) and only then the solution is imported and
``ModelNew`` built after the same seed (identical weights). ``correctness_trials`` fresh input sets, one
seed each from ``os.urandom``, generated directly on the device (``get_inputs()`` runs under
``with torch.device(device)``: no host-side giant tensors, no copies), the candidate called FIRST so the
reference's output for the same inputs is never alive while solution code runs. Then warm-up and
``perf_trials`` timed calls per side, interleaved (ABBA) so clock drift hits both sides alike, each on
freshly generated inputs, L2 flushed and the device synchronised around every call; every timed
candidate output is snapshotted right after its call (outputs over ``TIMED_SAMPLE_ELEMENTS`` at that many
positions drawn after the call returned) and compared with a reference computed later on the same
inputs, so a kernel cannot be right only when it expects to be checked. Between phases the
integrity snapshot is re-checked: a patched timer, harness, torch function or reference weight is an
``execution_failure`` whose message starts with ``integrity:`` (and the worker is recycled).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import platform
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from . import integrity
from .compare import compare_outputs, default_tolerance
from .schemas import EvalOptions, Outcome, TimingStats, excerpt, reward_for

# Clocks captured at import, before any solution runs: the Timer uses only these (the integrity guard
# watches this module's globals, so a solution cannot swap them unnoticed).
_perf_counter = time.perf_counter
_cuda_sync = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event

#: Bytes zeroed before every timed CUDA call: larger than any current GPU's L2 (H100: 50 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024
#: Stop timing early (keeping what was measured) once this share of the job's timeout is spent.
TIMING_BUDGET_SHARE = 0.6
MIN_TIMED_TRIALS = 5
#: With a cached reference timing the reference is not re-run per pair: this many timed candidate outputs
#: (at indices drawn from os.urandom) plus the last one are compared with freshly computed references.
CACHED_REF_CHECKS = 3
#: Timed outputs of more elements are checked at this many random positions (all trials' outputs in
#: the correctness phase are compared whole).
TIMED_SAMPLE_ELEMENTS = 1 << 20
#: Messages of failures found by the integrity checks start with this (the worker then recycles itself).
INTEGRITY_PREFIX = "integrity: "

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

    versioner = cpp_extension.JIT_EXTENSION_VERSIONER
    entries = getattr(versioner, "entries", None)
    if isinstance(entries, dict):
        entries.clear()  # in place: replacing the module global would look like a patch to the guard
    else:  # pragma: no cover - a torch without ``entries``
        cpp_extension.JIT_EXTENSION_VERSIONER = cpp_extension.ExtensionVersioner()


def _tb() -> str:
    return traceback.format_exc()


def usable_build_dir(build_dir: Path, workdir: Path) -> str:
    """``build_dir`` if this (sandboxed) worker may write there, else a job-local dir.

    The pool grants the build cache to the worker's Landlock domain (``WorkerConfig.writable``); a
    service that keeps its cache elsewhere without saying so would otherwise fail every build. The
    fallback still builds correctly, only without the cross-job cache, and says so in the output.
    """
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        probe = build_dir / f".writable-{os.getpid()}"
        probe.touch()
        probe.unlink()
        return str(build_dir)
    except PermissionError:
        local = workdir / "torch_extensions"
        local.mkdir(parents=True, exist_ok=True)
        sys.stderr.write(
            f"kernel-service: build cache {build_dir} is not writable in this worker's sandbox; "
            "building in a job-local dir (no build cache). Pass the cache root in WorkerConfig.writable.\n"
        )
        return str(local)


def load_solution(job: Job, workdir: Path) -> ModuleType:
    """Import the solution (this runs its ``load_inline`` calls); failures are compilation failures."""
    os.environ["TORCH_EXTENSIONS_DIR"] = usable_build_dir(Path(job.build_dir), workdir)
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


def fresh_seed() -> int:
    """A seed from the OS, never from the request: a solution cannot precompute the checked inputs."""
    return int.from_bytes(os.urandom(6), "little")


def make_inputs(get_inputs: Callable[[], Any], seed: int, device: torch.device) -> list[Any]:
    """Fresh inputs from ``seed``, created directly on ``device`` (no host-side giant tensors).

    ``torch.rand(...)`` inside ``get_inputs`` allocates on ``device`` under the device context (on a GPU,
    drawn by the CUDA generator: the same seed gives the same values for both sides). A tensor a problem
    pins to another device explicitly is moved; one already on ``device`` is passed through (no copy).
    """
    seed_all(seed)
    with torch.device(device):
        values = list(get_inputs())
    return [v.to(device) if isinstance(v, torch.Tensor) and v.device != device else v for v in values]


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
            _cuda_sync()
            self.flush_buf.zero_()
            _cuda_sync()
            start = _CudaEvent(enable_timing=True)
            end = _CudaEvent(enable_timing=True)
            start.record()
            out = fn(*inputs)
            _cuda_sync()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)), out
        t0 = _perf_counter()
        out = fn(*inputs)
        return (_perf_counter() - t0) * 1e3, out

    def sync(self) -> None:
        if self.cuda:
            _cuda_sync()


# ---- the evaluation -----------------------------------------------------------------------------


def resolve_device(options: EvalOptions, env: Environment) -> torch.device:
    if options.device == "cuda" or (options.device == "auto" and env.device == "cuda"):
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return torch.device("cpu")


def compile_only(job: Job, workdir: Path, env: Environment, report: PhaseReporter) -> dict[str, Any]:
    """Import the solution once so its ``load_inline`` builds land in the shared build cache."""
    report("compile")
    t0 = _perf_counter()
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
            "compile_s": _perf_counter() - t0,
        }
    return {"ok": True, "build_error": False, "message": "", "compile_s": _perf_counter() - t0}


@contextlib.contextmanager
def tf32_mode(mode: str) -> Iterator[dict[str, bool]]:
    """TF32 for both sides of one evaluation, put back afterwards (the worker serves later jobs).

    Under PyTorch's defaults cuDNN convolutions may round through TF32 while matmuls do not, and which
    convolutions do depends on the algorithm cuDNN picks: an exact fp32 kernel, or the same model under
    torch.compile, can then miss the fp32 tolerance (bench/results/compile_numerics_h100.json). 'off'
    makes the reference IEEE fp32; 'default' keeps upstream's verdicts and timings comparable.
    """
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.allow_tf32, matmul.allow_tf32)
    if mode != "default":
        cudnn.allow_tf32 = matmul.allow_tf32 = mode == "on"
    try:
        yield {"cudnn": bool(cudnn.allow_tf32), "matmul": bool(matmul.allow_tf32)}
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = saved


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
    phases: dict[str, float] = {}
    started = _perf_counter()
    try:
        with tf32_mode(opts.tf32) as tf32:
            base["tf32"] = tf32
            result = _evaluate(job, workdir, device, base, _Clock(elapsed, phases, report), started)
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
    result["elapsed"]["total_s"] = _perf_counter() - started
    result["phases"] = {k: round(v, 6) for k, v in phases.items()}
    return result


class _Clock:
    """Per-phase wall time: ``elapsed`` keys feed the response's ``Elapsed`` (coarse, summed), ``phases``
    the fine-grained breakdown (load/init per side, correctness, probe, timing, integrity checks)."""

    def __init__(self, elapsed: dict[str, float], phases: dict[str, float], report: PhaseReporter) -> None:
        self.elapsed, self.phases, self.report = elapsed, phases, report

    def phase(self, key: str | None, name: str, reported: str | None = None) -> _PhaseTimer:
        self.report(reported or name)
        return _PhaseTimer(self, key, name)

    def add(self, key: str | None, name: str, seconds: float) -> None:
        if key is not None:
            self.elapsed[key] = self.elapsed.get(key, 0.0) + seconds
        self.phases[name] = self.phases.get(name, 0.0) + seconds


class _PhaseTimer:
    def __init__(self, clock: _Clock, key: str | None, name: str) -> None:
        self.clock, self.key, self.name = clock, key, name

    def __enter__(self) -> None:
        self.t0 = _perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.clock.add(self.key, self.name, _perf_counter() - self.t0)


def _run_solution(
    what: str,
    fn: Callable[[], Any],
    outcome: Outcome = Outcome.EXECUTION_FAILURE,
    device: torch.device | None = None,
) -> Any:
    try:
        out = fn()
        if device is not None and device.type == "cuda":
            _cuda_sync()  # surface asynchronous CUDA faults here, attributed to the solution
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


class _Integrity:
    """The in-worker integrity checks of one evaluation (H7 hooks 5-9), in one place.

    Built after the reference model and before the solution is imported: it snapshots the identity of
    the trusted namespaces, the reference weights and the Python threads alive.
    """

    def __init__(self, ref_mod: ModuleType, ref_model: Any, clock: _Clock) -> None:
        self.clock = clock
        t0 = _perf_counter()
        with torch.no_grad():  # checks run under no_grad too: grad mode is one of the watched settings
            self.guard = integrity.PatchGuard.for_harness(ref_mod, ref_model)
        self.threads0 = integrity.thread_baseline()
        self.solution_files: list[str] = []
        self.clock.add(None, "integrity", _perf_counter() - t0)

    def check(self, where: str, values: bool = True) -> None:
        """Raise if a watched attribute, setting or (``values``) reference weight changed, or a thread of
        the solution is still running."""
        t0 = _perf_counter()
        with torch.no_grad():
            found = self.guard.violations(check_values=values)
        if self.solution_files:
            found += integrity.solution_threads(self.threads0, self.solution_files)
        self.clock.add(None, "integrity", _perf_counter() - t0)
        if found:
            raise HarnessError(
                Outcome.EXECUTION_FAILURE, f"{INTEGRITY_PREFIX}{where}: " + "; ".join(found[:5])
            )

    def after_reference_call(self) -> None:
        """Accept the reference's own in-place updates (BatchNorm running stats) as the new baseline."""
        t0 = _perf_counter()
        self.guard.rebase_values()
        self.clock.add(None, "integrity", _perf_counter() - t0)


def _reject_output(
    out: Any, where: str, base: dict[str, Any], atol: float | None, rtol: float | None
) -> None:
    why = integrity.output_violation(out)
    if why:
        raise _Incorrect(f"{where}: {why}", base, atol, rtol)


class _Incorrect(Exception):
    """An ``incorrect`` verdict found deep in a phase (turned into the response by ``_evaluate``)."""

    def __init__(self, message: str, base: dict[str, Any], atol: float | None, rtol: float | None) -> None:
        super().__init__(message)
        self.message, self.base, self.atol, self.rtol = message, base, atol, rtol


def _evaluate(
    job: Job,
    workdir: Path,
    device: torch.device,
    base: dict[str, Any],
    clock: _Clock,
    started: float,
) -> dict[str, Any]:
    opts = job.options
    # The reference is loaded and built before any solution code runs (integrity snapshot in between).
    with clock.phase("init_s", "load_reference"):
        ref_mod = _run_reference("loading", lambda: load_module(job.reference, "reference", workdir))
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(ref_mod, attr):
                raise HarnessError(Outcome.UNKNOWN_ERROR, f"the reference defines no `{attr}`")
    with clock.phase("init_s", "init_reference"):
        init_inputs = _run_reference(
            "get_init_inputs", lambda: make_inputs(ref_mod.get_init_inputs, opts.seed, device)
        )
        ref_model = _run_reference(
            "Model(...)", lambda: build_model(ref_mod.Model, init_inputs, opts.seed, device)
        )
    guard = _Integrity(ref_mod, ref_model, clock)
    with clock.phase("compile_s", "load_solution"):
        sol_mod = load_solution(job, workdir)
    guard.solution_files = [str(sol_mod.__file__)]
    guard.check("after loading the solution")
    if opts.device == "cuda" and device.type != "cuda":
        raise HarnessError(Outcome.REQUIRES_GPU, "device 'cuda' requested but this worker has no CUDA device")

    with clock.phase("init_s", "init_solution"):
        # Rebuilt from the same seed (not shared with the reference: ModelNew may mutate them).
        init_inputs_new = make_inputs(ref_mod.get_init_inputs, opts.seed, device)
        new_model = _run_solution(
            "ModelNew(...) raised",
            lambda: build_model(sol_mod.ModelNew, init_inputs_new, opts.seed, device),
            Outcome.INITIALIZATION_FAILURE,
            device,
        )
    guard.check("after ModelNew(...)")

    atol, rtol = opts.atol, opts.rtol
    passed = 0
    max_abs = max_rel = 0.0
    try:
        with clock.phase("correctness_s", "correctness"), torch.no_grad():
            for trial in range(opts.correctness_trials):
                where = f"correctness trial {trial + 1}/{opts.correctness_trials}"
                seed = fresh_seed()
                # Candidate first: the reference's output for these inputs does not exist yet.
                new_inputs = make_inputs(ref_mod.get_inputs, seed, device)
                new_out = _run_solution("forward raised", partial(new_model, *new_inputs), device=device)
                del new_inputs
                _reject_output(new_out, where, base, atol, rtol)
                new_out = integrity.snapshot_outputs(new_out)
                guard.check(f"after {where}")
                ref_inputs = make_inputs(ref_mod.get_inputs, seed, device)  # fresh: the solution may mutate
                ref_out = _run_reference("forward", partial(ref_model, *ref_inputs))
                del ref_inputs
                guard.after_reference_call()
                if atol is None or rtol is None:
                    tol = default_tolerance(_flat(ref_out))
                    atol = tol if atol is None else atol
                    rtol = tol if rtol is None else rtol
                cmp = compare_outputs(ref_out, new_out, atol, rtol)
                del ref_out, new_out
                max_abs = max(max_abs, cmp.max_abs_error or 0.0)
                max_rel = max(max_rel, cmp.max_rel_error or 0.0)
                if not cmp.ok:
                    return {
                        **base,
                        "outcome": Outcome.INCORRECT.value,
                        "reward": reward_for(Outcome.INCORRECT, None),
                        "message": f"{where}: {cmp.message}",
                        "correctness_trials_passed": passed,
                        "max_abs_error": cmp.max_abs_error,
                        "max_rel_error": cmp.max_rel_error,
                        "atol": atol,
                        "rtol": rtol,
                    }
                passed += 1
    except _Incorrect as bad:
        return _incorrect(bad, passed)

    common: dict[str, Any] = {
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

    # KernelBench's point is a custom kernel: one untimed, probed call says whether one ran.
    with clock.phase("correctness_s", "custom_kernel_probe", reported="correctness"), torch.no_grad():
        probe = integrity.KernelProbe(integrity.default_trusted_roots())
        probe_inputs = make_inputs(ref_mod.get_inputs, fresh_seed(), device)
        _run_solution("forward raised", partial(probe.run, partial(new_model, *probe_inputs)), device=device)
        del probe_inputs
    guard.check("after the custom-kernel probe")
    common["uses_custom_kernel"] = probe.usage.uses_custom_kernel
    common["custom_kernels"] = sorted(probe.usage.names)

    if not opts.measure_performance:
        return {
            **common,
            "outcome": Outcome.CORRECT.value,
            "reward": 0.0,
            "message": "performance not measured",
        }

    assert atol is not None and rtol is not None
    try:
        with clock.phase("timing_s", "timing"), torch.no_grad():
            timing = _time_both(job, ref_mod, ref_model, new_model, device, atol, rtol, started, guard, base)
    except _Incorrect as bad:
        return {
            **common,
            "outcome": Outcome.INCORRECT.value,
            "reward": reward_for(Outcome.INCORRECT, None),
            "message": bad.message,
        }
    guard.check("after timing")
    if timing.get("mismatch"):
        return {
            **common,
            "outcome": Outcome.INCORRECT.value,
            "reward": reward_for(Outcome.INCORRECT, None),
            "message": f"a timed call's output differs from the reference: {timing['mismatch']}",
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


def _incorrect(bad: _Incorrect, passed: int) -> dict[str, Any]:
    return {
        **bad.base,
        "outcome": Outcome.INCORRECT.value,
        "reward": reward_for(Outcome.INCORRECT, None),
        "message": bad.message,
        "correctness_trials_passed": passed,
        "atol": bad.atol,
        "rtol": bad.rtol,
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
    guard: _Integrity,
    base: dict[str, Any],
) -> dict[str, Any]:
    """Interleaved timing; every timed candidate output checked (H7 hook 6).

    The candidate's output is snapshotted right after its timed call (work a background thread or an
    unsynchronised stream finishes later is not seen) and queued with its seed; a later reference call
    on the same seed produces the expected output, so the reference's output for a set of inputs is
    never alive while the candidate runs on them. Timed reference calls consume the queue (any seed
    gives equally sized inputs, so which seed a timed reference call uses does not change its time);
    what is left is checked with untimed reference calls at the end.
    """
    opts = job.options
    timer = Timer(device)
    cached = job.cached_ref_timing
    budget = opts.timeout_s * TIMING_BUDGET_SHARE
    # With a cached reference timing, a few timed outputs (chosen by the OS, plus the last) are checked.
    checked = (
        set(range(opts.perf_trials))
        if cached is None
        else {int.from_bytes(os.urandom(4), "little") % opts.perf_trials for _ in range(CACHED_REF_CHECKS)}
    )

    warm_inputs = make_inputs(ref_mod.get_inputs, fresh_seed(), device)
    for _ in range(opts.warmup):
        if cached is None:
            _run_reference("warm-up", partial(ref_model, *warm_inputs))
        _run_solution("forward raised during warm-up", partial(new_model, *warm_inputs), device=device)
    timer.sync()
    del warm_inputs
    guard.check("after warm-up")

    ref_times: list[float] = []
    new_times: list[float] = []
    pending: list[tuple[int, Any]] = []  # (seed, snapshot of the candidate's output), oldest first
    mismatch: str | None = None

    def check_against_reference(snap: Any, out: Any) -> str | None:
        cmp = compare_outputs(out, snap, atol, rtol)
        return None if cmp.ok else cmp.message

    last_seed_snap: tuple[int, Any] | None = None
    for i in range(opts.perf_trials):
        order = ("ref", "new") if i % 2 == 0 else ("new", "ref")
        for side in order:
            if side == "new":
                seed = fresh_seed()
                inputs = make_inputs(ref_mod.get_inputs, seed, device)
                ms, out = _run_solution("forward raised while timed", partial(timer, new_model, inputs))
                new_times.append(ms)
                del inputs
                _reject_output(out, f"timed call {i + 1}", base, atol, rtol)
                snap = integrity.snapshot_outputs(out, sample_above=TIMED_SAMPLE_ELEMENTS)
                del out
                threads = integrity.solution_threads(guard.threads0, guard.solution_files)
                if threads:
                    raise HarnessError(
                        Outcome.EXECUTION_FAILURE,
                        f"{INTEGRITY_PREFIX}after timed call {i + 1}: " + "; ".join(threads[:3]),
                    )
                if i in checked:
                    pending.append((seed, snap))
                else:
                    last_seed_snap = (seed, snap)
            elif cached is None:
                # A timed reference call checks the oldest pending candidate output (fresh seed if none).
                seed, snap = pending.pop(0) if pending else (fresh_seed(), None)
                inputs = make_inputs(ref_mod.get_inputs, seed, device)
                ms, ref_out = timer(ref_model, inputs)
                ref_times.append(ms)
                del inputs
                if snap is not None and mismatch is None:
                    mismatch = check_against_reference(snap, ref_out)
                del ref_out, snap
        guard.check(f"after timed pair {i + 1}", values=False)
        if mismatch is not None:
            break
        if _perf_counter() - started > budget and len(new_times) >= MIN_TIMED_TRIALS:
            break
    # The last timed output is always checked; then everything still pending, with untimed references.
    if last_seed_snap is not None and cached is not None:
        pending.append(last_seed_snap)
    del last_seed_snap
    for seed, snap in pending:
        if mismatch is not None:
            break
        ref_out = _run_reference(
            "forward", partial(ref_model, *make_inputs(ref_mod.get_inputs, seed, device))
        )
        mismatch = check_against_reference(snap, ref_out)
        del ref_out
    pending.clear()
    timer.sync()
    ref_stats = cached if cached is not None else TimingStats.of(ref_times)
    return {
        "ref": ref_stats,
        "new": TimingStats.of(new_times),
        "ref_cached": cached is not None,
        "method": timer.method,
        "mismatch": mismatch,
    }
