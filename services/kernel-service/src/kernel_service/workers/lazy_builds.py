"""On a compile worker: run the builds a submission starts only once it runs, so no GPU worker waits on nvcc.

Why: model-written solutions mostly build their extensions lazily, with ``load_inline`` inside
``__init__``, inside their first ``forward`` or an autograd ``Function``, often with flags read from the
device (``torch.cuda.get_device_capability()``). Importing such a module builds nothing, so the compile
pool's import left every build to the GPU worker: 17-67 s of a GPU judging nothing per submission in a
public corpus of model output (issue 51). Here the compile worker goes further than the import: it builds
the model from the reference's init inputs and calls it once on the reference's inputs, everything on the
``meta`` device (no memory, no arithmetic), with the CUDA queries a build makes answered for the GPUs the
service judges on (``TORCH_CUDA_ARCH_LIST``); then once more on fake CUDA tensors (``FakeTensorMode``: a
device of "cuda", shapes only, its streams, events and graphs inert), for the builds a submission starts
only on a CUDA input (``if x.is_cuda: ... load_inline``: 7 solutions of CUDA-L1's first release, each
15-37 s of its GPU's time); then once more on ``meta`` with CUDA tensors kept there and a tensor read as
1, for a build ``__init__`` starts after making a CUDA tensor or reading one (2 of the revision's). Each
``load_inline`` reached on the way builds into the shared build cache, where the GPU worker's identical
call then only loads it. The module is imported again there first, under those answers: a build guarded
at import (``if torch.cuda.is_available():``, ``has_cuda = ...``: 41 of the 73 extensions of CUDA-L1's
first release ask) is skipped by the compile worker's own import, and was made by every fresh side of its
job on the GPU (27-61 s each, 123-146 s of timing).

Nothing here decides a verdict: the run happens in a forked child, whose errors (a meta tensor handed to
the extension, a CUDA call with no GPU), crashes and hangs are ignored; a build it does not reach is still
made where the GPU worker reaches it, as before.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

#: Most seconds the forked run may take (its builds included) before it is killed and left unfinished.
MAX_LAZY_S = 240.0


def target_capability(arch_list: str | None) -> tuple[int, int] | None:
    """The compute capability the service's GPUs have, from ``TORCH_CUDA_ARCH_LIST`` ("9.0a", "8.0;9.0")."""
    if not arch_list:
        return None
    last = arch_list.replace(",", ";").replace(" ", ";").split(";")[-1].split("+")[0]
    major, _, minor = last.partition(".")
    try:
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return None


def _answer_as_target(capability: tuple[int, int]) -> None:
    """In the forked child only: CUDA's availability and the device's capability as the judging GPU's."""
    import torch

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: capability


class _Inert:
    """A CUDA stream, event or graph in the fake-CUDA run: every call answers another, usable as a context."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return _Inert

    def __enter__(self) -> _Inert:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _load_tracing() -> None:
    """torch._dynamo and the fake tensors loaded while ``torch.cuda`` is still itself: dynamo's trace rules
    index ``torch.cuda``'s objects once, when it loads (a fake tensor's first op may load it), and refuse
    one object under two rules (one inert class for them all failed every fake run on the GPU host), and
    a fake CUDA tensor made without a real CUDA context."""
    import torch._dynamo  # noqa: F401
    from torch._subclasses import fake_tensor

    # a fake CUDA tensor starts the real CUDA context first (for autograd, which the run does not use):
    # "No CUDA GPUs are available" on the compile worker, where every fake run failed (H200 host)
    fake_tensor.init_gpu_context = _no_gpu_context  # type: ignore[assignment]


def _no_gpu_context(device: Any) -> None:
    """What a fake CUDA tensor starts in the forked child: nothing (no GPU is there)."""


def _inert_cuda_runtime() -> None:
    """In the forked child only: CUDA's runtime objects inert (no GPU here; a fake tensor needs none), each
    stand-in a class of its own (:func:`_load_tracing`)."""
    import torch

    for name in ("Stream", "Event", "CUDAGraph", "stream", "graph", "current_stream", "default_stream",
                 "synchronize", "set_device", "device", "get_device_properties"):  # fmt: skip
        setattr(torch.cuda, name, type(f"Inert{name}", (_Inert,), {}))


def _run_once(module: ModuleType, reference: ModuleType) -> None:
    """Build ``ModelNew`` and call it once, all on ``meta`` (what a call starts is what it builds)."""
    import torch

    with torch.device("meta"):
        init = list(reference.get_init_inputs())
        model = module.ModelNew(*init)
        inputs = list(reference.get_inputs())
        if isinstance(model, torch.nn.Module):
            model = model.to("meta")
        model(*inputs)


def _run_as_cuda(module: ModuleType, reference: ModuleType) -> None:
    """Build ``ModelNew`` on ``meta`` and call it once with its parameters, buffers and inputs fake CUDA
    tensors: ``x.is_cuda`` holds, so a build behind it is reached (without autograd, whose bookkeeping
    asks a real CUDA device)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cuda = torch.device("cuda", 0)

    def fake(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return FakeTensor(mode, value.detach().to("meta"), cuda)
        return value

    with torch.no_grad():
        with torch.device("meta"):
            model = module.ModelNew(*reference.get_init_inputs())
            inputs = [fake(x) for x in reference.get_inputs()]
        if isinstance(model, torch.nn.Module):
            for sub in model.to("meta").modules():
                for key, param in sub._parameters.items():
                    if param is not None:
                        sub._parameters[key] = torch.nn.Parameter(fake(param), requires_grad=False)
                for key, buffer in sub._buffers.items():
                    if buffer is not None:
                        sub._buffers[key] = fake(buffer)
        with mode:
            model(*inputs)


#: Most tensors :func:`_meta_as_cuda` reads as 1 before it stops the run: a loop until a tensor falls below a
#: tolerance (``while err.item() > tol``) would otherwise hold the compile worker to ``MAX_LAZY_S``.
MAX_READS = 1000


def _meta_as_cuda() -> Any:
    """A mode under which CUDA is ``meta``: a tensor made on, or moved to, "cuda" stays on ``meta``, and a
    tensor read as a number (``.item()``, ``bool(t)``...) reads 1, ``MAX_READS`` times at most."""
    import torch
    from torch.overrides import TorchFunctionMode

    readers = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__}
    reads = iter(range(MAX_READS))

    def meta(value: Any) -> Any:
        if isinstance(value, torch.device | str) and str(value).startswith("cuda"):
            return torch.device("meta")
        return value

    class MetaAsCuda(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = {k: meta(v) for k, v in (kwargs or {}).items()}
            if func is torch.Tensor.cuda:
                return args[0]
            if func in readers:
                if next(reads, None) is None:
                    raise RuntimeError(f"lazy run stopped: {MAX_READS} tensors read as numbers on meta")
                t = args[0]
                return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
            if func is torch.Tensor.to:
                args = tuple(meta(a) for a in args)
            return func(*args, **kwargs)

    return MetaAsCuda()


def _made_as_cuda(module: ModuleType, reference: ModuleType) -> None:
    """Build ``ModelNew`` and call it once on ``meta``, with CUDA answering as the judging GPU and every
    tensor made on or moved to "cuda" kept on ``meta`` (:func:`_meta_as_cuda`): a build that ``__init__``
    starts after making a CUDA tensor (``.cuda()``, ``device="cuda"``) or reading one (``.item()``), where
    both runs above stop (CUDA-L1's revision: L2_23 and L2_24, 20-30 s of a GPU's time each)."""
    import torch

    with torch.no_grad(), torch.device("meta"), _meta_as_cuda():
        model = module.ModelNew(*reference.get_init_inputs())
        model(*reference.get_inputs())


def _import_as_target(source: str, workdir: Path, module: ModuleType) -> ModuleType:
    """In the forked child: ``source`` imported again now that CUDA answers as the judging GPU (the builds
    its import guards on CUDA); ``module`` (the import without a GPU) where that import fails."""
    from ..judging.harness import load_module

    try:
        again = load_module(source, "lazy_solution", workdir)
    except BaseException:  # noqa: BLE001 - e.g. a tensor made on "cuda" at import: no GPU here
        return module
    return again if isinstance(getattr(again, "ModelNew", None), type) else module


def _attempt(step: Callable[[], Any], errors: list[str] | None) -> bool:
    """``step()``; whether it returned (its traceback kept in ``errors``, if given, where it raised)."""
    try:
        step()
        return True
    except BaseException:  # noqa: BLE001 - expected: without a GPU most runs cannot complete
        if errors is not None:
            errors.append(traceback.format_exc(limit=-6))
        return False


def lazy_runs(
    module: ModuleType,
    reference: ModuleType,
    source: str | None,
    workdir: Path,
    after_each: Callable[[], object],
    errors: list[str] | None = None,
) -> None:
    """The forked child's work (:func:`warm_lazy_builds`): the model run once on ``meta`` and, where the
    service judges on GPUs (``TORCH_CUDA_ARCH_LIST``), ``source`` imported again with CUDA answering as
    them and the model run on fake CUDA tensors, then on ``meta`` as CUDA (:func:`_made_as_cuda`);
    ``after_each()`` after each run (a later one may crash the process). ``errors``: each step's traceback where it raised (``bench``'s probe)."""
    runs = [_run_once]
    capability = target_capability(os.environ.get("TORCH_CUDA_ARCH_LIST"))
    if capability is not None:
        fake = _attempt(_load_tracing, errors)
        _answer_as_target(capability)
        fake = _attempt(_inert_cuda_runtime, errors) and fake
        if source is not None:
            module = _import_as_target(source, workdir, module)
        if fake:
            runs.append(_run_as_cuda)
        runs.append(_made_as_cuda)
    for run in runs:
        _attempt(partial(run, module, reference), errors)
        after_each()


def warm_lazy_builds(
    module: ModuleType,
    reference_source: str,
    workdir: Path,
    built: list[dict[str, Any]],
    budget_s: float,
    source: str | None = None,
) -> float:
    """Run ``module``'s model once in a forked child (see the module docstring), importing ``source`` (the
    module's) again there first; the builds it made are appended to ``built``
    (``artifacts.recording_builds``' list, which the child filled). Returns the seconds it took."""
    from ..judging.harness import load_module
    from .forked import run_forked

    t0 = time.perf_counter()
    try:
        reference = load_module(reference_source, "lazy_reference", workdir)
    except Exception:  # noqa: BLE001 - the eval worker reports a broken reference; nothing to warm here
        return 0.0
    record = workdir / "lazy-builds.json"

    def work() -> None:
        lazy_runs(module, reference, source, workdir, lambda: record.write_text(json.dumps(built)))

    run_forked(work, min(budget_s, MAX_LAZY_S))
    try:
        seen = json.loads(record.read_text())
    except (OSError, ValueError):
        seen = []
    for b in seen[len(built) :]:  # the import again loads what the first one built: once each
        if isinstance(b, dict) and b not in built:
            built.append(b)
    return time.perf_counter() - t0
