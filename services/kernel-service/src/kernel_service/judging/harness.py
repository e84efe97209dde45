"""What the judge and its side processes share: jobs, loading sources, seeds, inputs, building models.

The evaluation itself is ``judge.py`` (the judge never runs submitted code) and ``candidate.py`` (the side
processes that do). ``compile_only`` runs in the CPU compile workers, whose only product is the build cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .schemas import EvalOptions, Outcome, TimingStats

PhaseReporter = Callable[[str], None]


class HarnessError(Exception):
    """A failure with a known outcome (raised inside a phase, turned into the response)."""

    def __init__(self, outcome: Outcome, message: str, tb: str | None = None, compile_log: str | None = None):
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.tb = tb
        self.compile_log = compile_log
        self.reply: dict[str, Any] = {}  # the side's reply that caused it, when one did


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
    #: Extensions already built in ``build_dir`` (an installed artifact, ``artifacts.seed_prebuilt``).
    prebuilt: list[dict[str, Any]] = field(default_factory=list)
    #: Builds of the solution that failed on the compile worker (``artifacts.failed_builds``).
    failed_builds: list[dict[str, Any]] = field(default_factory=list)

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
            prebuilt=list(d.get("prebuilt") or []),
            failed_builds=list(d.get("failed_builds") or []),
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
        # A name of its own: every worker in a PID namespace of its own has the same PID, and workers on
        # other GPUs probe the same build dir at once (one unlinked another's probe: issue 29).
        fd, probe = tempfile.mkstemp(prefix=".writable-", dir=build_dir)
        os.close(fd)
        os.unlink(probe)
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
    from .build_relocation import relocate_builds

    os.environ["TORCH_EXTENSIONS_DIR"] = usable_build_dir(Path(job.build_dir), workdir)
    reset_extension_versioner()
    relocate_builds()
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
    """Python's, the CPU's and every CUDA generator, not ``torch.manual_seed``: that also defers seeding
    of the XPU and MTIA backends, recording a stack trace in a queue that grows by one per call where
    they never start (1 ms and a few KB per call, twice per timed call on the H100)."""
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


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


def build_model(
    cls: type,
    init_inputs: list[Any],
    seed: int,
    device: torch.device,
    dtype: torch.dtype | None = None,
    on_cpu: bool = False,
    module_mode: str = "train",
) -> torch.nn.Module:
    """Construct after seeding, on the device (``on_cpu``: on the CPU, then moved there, as upstream
    KernelBench does), so reference and solution get identical weights; with ``dtype`` (a precision other
    than fp32), its floating parameters and buffers cast to it after (the weights are drawn in fp32 and
    rounded, as upstream's ``model.to(dtype=precision)``). On the device, a model whose weights are made
    where the device context does not reach draws them from the CPU's generator (:func:`drew_on_cpu`).
    ``module_mode`` "eval": the model's ``eval()`` is called last (``EvalOptions.module_mode``)."""
    seed_all(seed)
    with torch.device("cpu" if on_cpu else device):
        model = cls(*init_inputs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if dtype is not None:
            model = model.to(dtype)
        if module_mode == "eval":
            model.eval()
    return model


def drew_on_cpu(seed: int) -> bool:
    """Whether anything drew from the CPU's generator since ``seed_all(seed)``: a model built on the GPU
    whose weights come from ``torch.Tensor(n, m)`` (which the device context does not reach) and an
    ``nn.init`` call. Upstream builds both models on the CPU, where such weights equal the reference's; on
    the GPU they would not (21 of CUDA-L1's first release's solutions, 16 of its revision's, all judged
    wrong for it), so the judge then builds both on the CPU (``Run.start_pair``)."""
    fresh = torch.Generator().manual_seed(seed).get_state()
    return not torch.equal(fresh, torch.default_generator.get_state())


#: ``EvalOptions.precision`` -> the dtype both sides run at.
PRECISION_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}


def precision_dtype(precision: str) -> torch.dtype | None:
    """The dtype to cast to for ``precision``, or None for fp32: an fp32 evaluation casts nothing (the
    problem's own dtypes stand, as before precisions existed)."""
    if precision == "fp32":
        return None
    try:
        return PRECISION_DTYPES[precision]
    except KeyError:
        raise ValueError(f"precision must be one of {sorted(PRECISION_DTYPES)}, got {precision!r}") from None


def cast_inputs(values: Any, dtype: torch.dtype | None) -> Any:
    """``values`` (a problem's inputs or init inputs, lists and tuples nested) with every real floating
    tensor cast to ``dtype``; integer, boolean and complex tensors and non-tensors are kept (indices and
    labels stay integers). The judge calls it on what it makes, so both sides get the same cast values."""
    if dtype is None:
        return values
    if isinstance(values, torch.Tensor):
        return values.to(dtype) if values.is_floating_point() and values.dtype != dtype else values
    if isinstance(values, list):
        return [cast_inputs(v, dtype) for v in values]
    if isinstance(values, tuple):
        return tuple(cast_inputs(v, dtype) for v in values)
    return values


def resolve_device(options: EvalOptions, env: Environment) -> torch.device:
    if options.device == "cuda" or (options.device == "auto" and env.device == "cuda"):
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return torch.device("cpu")


def apply_tf32(mode: str) -> None:
    """TF32 for one side process (fresh per job, so nothing to restore).

    Under PyTorch's defaults cuDNN convolutions may round through TF32 while matmuls do not, and which
    convolutions do depends on the algorithm cuDNN picks: an exact fp32 kernel, or the same model under
    torch.compile, can then miss the fp32 tolerance (bench/results/compile_numerics_h100.json). 'off'
    makes the reference IEEE fp32; 'default' keeps upstream's verdicts and timings comparable.
    """
    if mode != "default":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = mode == "on"


def excerpt_tb() -> str:
    return traceback.format_exc()
