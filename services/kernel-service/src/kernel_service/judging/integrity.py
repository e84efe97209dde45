"""In-worker integrity checks: catch a solution that games the harness from inside the worker process.

The solution runs in the same Python process as the harness and the reference (that is how upstream
KernelBench works, and what keeps timing comparable). So it can reach everything the harness uses:
``time.perf_counter``, ``torch.cuda.Event``, ``torch.cuda.synchronize``, the harness module itself, the
torch functions the reference calls, the reference model's weights. These helpers turn the common
attacks into detected failures:

* :class:`PatchGuard` snapshots the identity of every attribute of the namespaces the harness trusts
  (timers, torch, ``torch.nn.functional``, ``torch.Tensor`` and the ``torch.nn`` module classes, the
  ``kernel_service`` modules, the reference module and model, global numeric settings such as TF32)
  *before* the solution is imported; :meth:`PatchGuard.violations` names anything replaced since.
* :func:`output_violation` rejects outputs that are not plain tensors (a ``Tensor`` subclass can defer
  its work until the harness compares it, so the timed call returns instantly).
* :func:`snapshot_outputs` copies an output (or, for large ones, random positions of it) right after its
  timed call, so work finished later by a background thread or a side stream the timer did not wait for
  is not seen by the comparison.
* :func:`solution_threads` names threads still running solution code after ``forward`` returned.
* :class:`KernelProbe` records, for one untimed call, whether the solution called a compiled extension
  (``load_inline``/``load``), a custom ``torch.ops`` namespace or a Triton kernel: KernelBench's point is a
  custom kernel, so a solution that only calls PyTorch is reported (``uses_custom_kernel = False``).

What this does NOT defend (see docs/integrity.md): a solution that patches and restores within a single
call, writes process memory through ``ctypes``, or starts native threads. Those need the reference and
the timer in another process; the process sandbox (``sandbox.py``) still bounds the damage to one
submission.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MISSING = object()

#: Module attribute additions are tolerated (torch adds lazily imported submodules as attributes);
#: these prefixes name the trusted modules whose every attribute is watched.
TRUSTED_MODULES = (
    "time",
    "os",
    "random",
    "torch",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.cuda",
    "torch.linalg",
    "torch.fft",
    "torch.special",
    "torch.backends.cuda",
    "torch.backends.cudnn",
    "torch._C._nn",
    "torch._C._linalg",
    "torch._C._fft",
    "torch._C._special",
    "torch.utils.cpp_extension",
)


def _settings() -> dict[str, Callable[[], object]]:
    import torch

    s: dict[str, Callable[[], object]] = {
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (
            lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": (
            lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        "torch.get_default_dtype()": torch.get_default_dtype,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled,
    }
    return s


def _trusted_classes() -> list[tuple[str, type]]:
    import torch

    classes: list[tuple[str, type]] = [
        ("torch.Tensor", torch.Tensor),
        ("torch._C.TensorBase", torch._C.TensorBase),
        ("torch.nn.Parameter", torch.nn.Parameter),
        ("torch.cuda.Event", torch.cuda.Event),
        ("torch.cuda.Stream", torch.cuda.Stream),
        ("torch.no_grad", torch.no_grad),
        ("torch.device", torch.device),
    ]
    for name in dir(torch.nn):
        obj = getattr(torch.nn, name, None)
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            classes.append((f"torch.nn.{name}", obj))
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("kernel_service") and isinstance(mod, types.ModuleType):
            for name, obj in list(vars(mod).items()):
                if isinstance(obj, type) and getattr(obj, "__module__", None) == mod_name:
                    if not _is_pydantic(obj):
                        classes.append((f"{mod_name}.{name}", obj))
    return classes


def _is_pydantic(cls: type) -> bool:
    return any(b.__module__.startswith("pydantic") for b in cls.__mro__[1:])


@dataclass
class _Watched:
    label: str
    namespace: dict[str, Any]
    snapshot: dict[str, Any]
    inherited_from: tuple[type, ...] = ()  # for classes: a new key shadowing a base attribute is a patch
    #: Tolerate plain data (bool/int/float/str/None) changing: torch flips module flags such as
    #: ``torch.cuda._initialized`` itself. Never set for kernel_service or the reference.
    data_may_change: bool = False


@dataclass
class PatchGuard:
    """Identity snapshot of trusted namespaces; take it before the solution is imported."""

    watched: list[_Watched] = field(default_factory=list)
    settings: dict[str, tuple[Callable[[], object], object]] = field(default_factory=dict)
    fingerprints: list[ModelFingerprint] = field(default_factory=list)

    @classmethod
    def for_harness(cls, reference: types.ModuleType | None = None, *models: Any) -> PatchGuard:
        """Watch timers, torch, the kernel_service modules, the reference module and ``models``."""
        guard = cls()
        for name in TRUSTED_MODULES:
            mod = sys.modules.get(name)
            if mod is not None:
                guard.watch_namespace(name, mod, data_may_change=True)
        for mod_name, mod in list(sys.modules.items()):
            if mod_name.startswith("kernel_service") and isinstance(mod, types.ModuleType):
                guard.watch_namespace(mod_name, mod)
        for label, klass in _trusted_classes():
            guard.watch_namespace(label, klass, data_may_change=not label.startswith("kernel_service"))
        if reference is not None:
            guard.watch_namespace("reference module", reference)
            for name, obj in vars(reference).items():
                if isinstance(obj, type) and obj.__module__ == reference.__name__:
                    guard.watch_namespace(f"reference.{name}", obj)
        for model in models:
            guard.watch_model(model)
        for label, getter in _settings().items():
            guard.settings[label] = (getter, getter())
        return guard

    def watch_namespace(self, label: str, obj: Any, data_may_change: bool = False) -> None:
        ns = obj if isinstance(obj, dict) else getattr(obj, "__dict__", None)
        if ns is None:
            return
        bases = tuple(obj.__mro__[1:]) if isinstance(obj, type) else ()
        # mappingproxy for classes: reading it live is fine; the snapshot is a plain dict copy.
        self.watched.append(_Watched(label, ns, dict(ns), bases, data_may_change))

    def rebase_values(self) -> None:
        """Accept the model tensors' current values (call it right after a *reference* call): tensors the
        reference itself updates (BatchNorm running stats) become exempt from the value check."""
        for fp in self.fingerprints:
            fp.rebase()

    def watch_model(self, model: Any, label: str = "reference model") -> None:
        """Watch a model instance: its attributes, submodules, parameters, buffers and their values."""
        import torch

        if not isinstance(model, torch.nn.Module):
            return
        for name, sub in model.named_modules():
            where = f"{label}.{name}" if name else label
            self.watch_namespace(where, sub)
            for part in ("_parameters", "_buffers", "_modules"):
                d = getattr(sub, part, None)
                if isinstance(d, dict):
                    self.watch_namespace(f"{where}.{part}", d)
        self.fingerprints.append(ModelFingerprint.of(model, label))

    def violations(self, check_values: bool = True) -> list[str]:
        """What was replaced, added over an inherited attribute, or deleted since the snapshot."""
        found: list[str] = []
        for w in self.watched:
            ns, snap = w.namespace, w.snapshot
            for key, value in snap.items():
                now = ns.get(key, _MISSING)
                if w.data_may_change and _is_data(value) and _is_data(now):
                    continue
                if now is not value and not _benign_wrapper(value, now):
                    found.append(f"{w.label}.{key} was {'deleted' if now is _MISSING else 'replaced'}")
            if len(ns) != len(snap):
                for key in ns.keys() - snap.keys():
                    if w.inherited_from and any(key in vars(b) for b in w.inherited_from):
                        found.append(f"{w.label}.{key} was overridden")
                    elif isinstance(w.namespace, dict) and w.label.endswith(("_parameters", "_buffers")):
                        found.append(f"{w.label}[{key!r}] was added")
        for label, (getter, value) in self.settings.items():
            try:
                now = getter()
            except Exception as exc:  # noqa: BLE001 - a broken getter is itself a sign of tampering
                now = f"<error {exc}>"
            if now != value:
                found.append(f"{label} changed from {value!r} to {now!r}")
        if check_values:
            for fp in self.fingerprints:
                found.extend(fp.violations())
        return found

    def describe(self) -> str:
        return f"{sum(len(w.snapshot) for w in self.watched)} attributes in {len(self.watched)} namespaces"


def _is_data(v: Any) -> bool:
    return v is None or type(v) in (bool, int, float, str, bytes)


def _torch_dir() -> str:
    import torch

    return str(Path(torch.__file__).parent)


def _benign_wrapper(old: Any, new: Any) -> bool:
    """PyTorch re-wraps some of its own functions when a subsystem is imported or used (``torch._dynamo``
    wraps ``torch.manual_seed`` in ``_disable_dynamo``; ``torch.compile`` wraps ``nn.Module.__init__``): a
    wrapper whose code lives in torch's own files and that calls the original (``__wrapped__`` or a
    closure cell) is the same function, not a patch."""
    code = getattr(new, "__code__", None)
    if code is None or not code.co_filename.startswith(_torch_dir()):
        return False
    if getattr(new, "__wrapped__", None) is old:
        return True
    # ``torch.compile`` (dynamo's install_generation_tagging_init) replaces ``nn.Module.__init__`` and
    # ``__setstate__`` by closures over the originals, without ``__wrapped__``.
    cells = getattr(new, "__closure__", None) or ()
    return any(_cell_is(c, old) for c in cells)


def _cell_is(cell: Any, obj: Any) -> bool:
    try:
        return bool(cell.cell_contents is obj)
    except ValueError:  # an empty cell
        return False


@dataclass
class ModelFingerprint:
    """Per-tensor checksums of a model's parameters and buffers (detects weights changed in place)."""

    label: str
    entries: list[tuple[str, Any, tuple[int, ...], float, float]]
    #: Tensors the reference's own forward changes (seen by :meth:`rebase`): not value-checked.
    volatile: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, model: Any, label: str) -> ModelFingerprint:
        return cls(label, [(name, t, *_checksum(t)) for name, t in _tensors(model)])

    def rebase(self) -> None:
        fresh = []
        for name, t, shape, s, a in self.entries:
            now = _checksum(t)
            if now != (shape, s, a) and not (now[0] == shape and _nan_equal(now[1:], (s, a))):
                self.volatile.add(name)
            fresh.append((name, t, *now))
        self.entries = fresh

    def violations(self) -> list[str]:
        out = []
        for name, t, shape, s, a in self.entries:
            if name in self.volatile:
                continue
            now = _checksum(t)
            if now != (shape, s, a) and not (now[0] == shape and _nan_equal(now[1:], (s, a))):
                out.append(f"{self.label} tensor {name!r} was modified in place")
        return out


def _nan_equal(x: tuple[float, float], y: tuple[float, float]) -> bool:
    return all((a != a and b != b) or a == b for a, b in zip(x, y, strict=True))


def _tensors(model: Any) -> Iterator[tuple[str, Any]]:
    yield from model.named_parameters(recurse=True)
    yield from model.named_buffers(recurse=True)


def _checksum(t: Any) -> tuple[tuple[int, ...], float, float]:
    import torch

    with torch.no_grad():
        d = t.detach()
        if d.numel() == 0:
            return tuple(d.shape), 0.0, 0.0
        f = d.double() if (d.is_floating_point() or d.is_complex()) else d.to(torch.float64)
        if f.is_complex():
            f = torch.view_as_real(f)
        # Weighted sum: a permutation of the values changes it; the abs sum catches sign flips.
        w = torch.arange(1, f.numel() + 1, device=f.device, dtype=torch.float64).reshape(f.shape)
        return tuple(d.shape), float((f * w).sum()), float(f.abs().sum())


# ---- outputs ------------------------------------------------------------------------------------


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        flat: list[Any] = []
        for item in out:
            flat.extend(_flatten(item))
        return flat
    return [out]


def output_violation(out: Any) -> str | None:
    """Why ``out`` may not be accepted as a result, or None: only plain, strided, real tensors."""
    import torch

    for i, t in enumerate(_flatten(out)):
        if isinstance(t, torch.Tensor):
            if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
                return (
                    f"output {i} is a {type(t).__module__}.{type(t).__qualname__} (a Tensor subclass): "
                    "return a plain torch.Tensor"
                )
            if t.layout != torch.strided or t.is_meta:
                return f"output {i} has layout {t.layout} / device {t.device}: return a materialised tensor"
    return None


def snapshot_outputs(out: Any, sample_above: int | None = None) -> Any:
    """A detached copy of every tensor in ``out`` (call it right after the timed call returns).

    With ``sample_above``, a tensor of more elements is kept as a :class:`~.compare.Sample`: its values at
    ``sample_above`` positions drawn now, from the OS's randomness, after the call has returned (so the
    solution cannot know which elements will be read). Cloning and comparing multi-GB outputs of every
    timed call cost several times the kernels being timed; a kernel that skips even a thousandth of its
    output is still caught at a million random positions with certainty for practical purposes.
    """
    import torch

    from .compare import Sample

    if isinstance(out, torch.Tensor):
        if sample_above is None or out.numel() <= sample_above:
            return out.detach().clone()
        return Sample.take(out.detach(), sample_above)
    if isinstance(out, tuple):
        return tuple(snapshot_outputs(x, sample_above) for x in out)
    if isinstance(out, list):
        return [snapshot_outputs(x, sample_above) for x in out]
    return out


# ---- threads ------------------------------------------------------------------------------------


def thread_baseline() -> frozenset[int]:
    """Idents of the Python threads alive now (take it before the solution is imported)."""
    return frozenset(sys._current_frames())


def solution_threads(baseline: Iterable[int], solution_files: Iterable[str]) -> list[str]:
    """Threads started since ``baseline`` that are running (or parked in) code of the solution files.

    A solution that hands its work to a background thread and returns early makes the timed call look
    fast; such a thread is alive (with a solution frame on its stack) when ``forward`` returns.
    """
    files = {str(Path(f)) for f in solution_files}
    base = set(baseline)
    me = threading.get_ident()
    found = []
    for ident, frame in sys._current_frames().items():
        if ident in base or ident == me:
            continue
        f: types.FrameType | None = frame
        while f is not None:
            if f.f_code.co_filename in files:
                found.append(
                    f"thread {ident} is running {f.f_code.co_name} ({Path(f.f_code.co_filename).name})"
                )
                break
            f = f.f_back
    return found


# ---- custom kernels -----------------------------------------------------------------------------

#: ``torch.ops`` namespaces that belong to PyTorch itself (calling them is not a custom kernel).
TORCH_OP_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "_quantized", "inductor", "profiler"})


@dataclass
class KernelUsage:
    """What one call of the solution ran besides plain PyTorch."""

    extension_calls: int = 0
    custom_op_calls: int = 0
    triton_launches: int = 0
    names: set[str] = field(default_factory=set)

    @property
    def uses_custom_kernel(self) -> bool:
        return bool(self.extension_calls or self.custom_op_calls or self.triton_launches)


class KernelProbe:
    """Run one call under ``sys.setprofile`` and record custom-kernel entry points it went through.

    Extension functions are builtins whose module's ``__file__`` lies outside the Python installation's
    own packages (``load_inline``/``load`` outputs); Triton launches go through ``JITFunction.run``; custom
    ops through ``torch.ops.<ns>`` with a namespace that is not PyTorch's.
    """

    def __init__(self, trusted_roots: Iterable[str] = ()) -> None:
        self.usage = KernelUsage()
        self._trusted = tuple(str(Path(r)) for r in trusted_roots)
        self._module_verdict: dict[str, bool] = {}
        self._triton_codes = self._triton_entry_codes()
        self._op_codes = self._torch_op_codes()

    @staticmethod
    def _triton_entry_codes() -> set[types.CodeType]:
        codes: set[types.CodeType] = set()
        if "triton" not in sys.modules:
            return codes
        try:
            from triton.runtime.jit import JITFunction

            codes.add(JITFunction.run.__code__)
        except (ImportError, AttributeError):
            pass
        return codes

    @staticmethod
    def _torch_op_codes() -> set[types.CodeType]:
        import torch._ops as ops

        codes: set[types.CodeType] = set()
        for cls_name in ("OpOverloadPacket", "OpOverload"):
            cls = getattr(ops, cls_name, None)
            call = vars(cls).get("__call__") if cls is not None else None
            if call is not None and hasattr(call, "__code__"):
                codes.add(call.__code__)
        return codes

    def _is_extension(self, module_name: str | None) -> bool:
        if not module_name:
            return False
        verdict = self._module_verdict.get(module_name)
        if verdict is None:
            top = module_name.split(".")[0]
            mod = sys.modules.get(top) or _find_module(top)
            path = getattr(mod, "__file__", None) or ""
            verdict = path.endswith((".so", ".pyd")) and not path.startswith(self._trusted)
            self._module_verdict[module_name] = verdict
        return verdict

    def _hook(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            mod = getattr(arg, "__module__", None)
            if self._is_extension(mod):
                self.usage.extension_calls += 1
                self.usage.names.add(f"{mod}.{getattr(arg, '__name__', '?')}")
        elif event == "call":
            code = frame.f_code
            if code in self._triton_codes:
                self.usage.triton_launches += 1
                fn = frame.f_locals.get("self")
                self.usage.names.add(f"triton:{getattr(fn, '__name__', '?')}")
            elif code in self._op_codes:
                op = frame.f_locals.get("self")
                ns = getattr(op, "namespace", None) or str(op).split("::")[0].split(".")[-1]
                if ns and ns not in TORCH_OP_NAMESPACES:
                    self.usage.custom_op_calls += 1
                    self.usage.names.add(f"torch.ops.{op}")

    def run(self, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` with the probe on (this thread only); the probe is always removed after."""
        previous = sys.getprofile()
        sys.setprofile(self._hook)
        try:
            return fn()
        finally:
            sys.setprofile(previous)


def _find_module(name: str) -> types.ModuleType | None:
    """A module object that is not in ``sys.modules``: ``load_inline`` imports the extension it built
    through importlib without registering it there. Searched once per module name and probe."""
    import gc

    for obj in gc.get_objects():
        try:
            if isinstance(obj, types.ModuleType) and obj.__name__ == name:
                return obj
        except ReferenceError:  # a weak proxy whose referent is gone (torch.compile keeps some)
            continue
    return None


def default_trusted_roots() -> list[str]:
    """Where PyTorch's (and other installed packages') own compiled modules live."""
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(sys.base_prefix)
    return sorted(roots)
