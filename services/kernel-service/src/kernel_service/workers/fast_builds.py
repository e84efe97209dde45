"""Shorter ``load_inline`` builds: a precompiled ``torch/extension.h``, and a lighter include for sources.

Most of a small extension's build is the compiler parsing torch's headers: ``main.cpp`` always starts
with ``#include <torch/extension.h>`` (all of ATen, the C++ API and pybind11), and KernelBench-style
``.cu`` sources usually include it too although ``<torch/types.h>`` is enough for a kernel and its launcher.

**Precompiled header** (``KernelServiceConfig.build_pch``, env ``KS_BUILD_PCH=<dir>`` in the compile
workers). torch's own ``load_inline(use_pch=True)`` writes ``extension.h.gch`` into the torch install
(read-only in the sandbox) and every ``use_pch=False`` call deletes it again, so it cannot serve a
shared, sandboxed service. Instead, just before torch runs ninja for a build (``artifacts.recording_builds``
hook), :func:`ensure_pch` builds a PCH with exactly the flags torch will use for that ``main.cpp`` (taken
from the ``build.ninja`` torch writes for a probe with the same arguments) into ``<dir>/<signature>/torch/
extension.h.gch``, once per flag set, and points ``CPATH`` at it: GCC looks for ``torch/extension.h.gch``
in each include dir before the header and ``CPATH`` dirs are searched before torch's ``-isystem`` dirs.
A PCH that does not match (another compiler, flags GCC rejects) is silently skipped by GCC, so the worst
case is the plain build. The PCH lives in the build cache root, which compile workers may write, as they
may write every build dir there: the same trust boundary as the build cache itself.

**Light include** (``KernelServiceConfig.light_include``): :func:`light_source` rewrites the solution's
``#include <torch/extension.h>`` lines to the least a kernel's host code needs: ATen's ``Tensor``, its
dispatch and check macros, the declarations of the ATen operators the source names (``ATen/ops/<op>.h``)
and ``torch::`` as ATen's names (the aliases ``torch/types.h`` adds, such as ``torch::kFloat32``). On the
H100 nvcc took 12-13 s on the example ``.cu`` files with it, 25-27 s with ``torch/types.h`` and 52-55 s as
written (bench/include_probe.py). A source that uses what only the full C++ API has (autograd, the
``nn``/``jit`` modules, ``TORCH_LIBRARY``) gets ``torch/types.h`` instead: ``torch::`` factories differ
from ATen's only in honouring ``requires_grad``; so does host code that uses tensor operators, after the
lightest variant failed (:func:`light_sources`). On an idle compile pool, the service builds the
lightest variant and the as-written source at once and judges the light one when it builds, else the
one as written (whose build was already running: a failed light build costs no second wait).
``main.cpp`` keeps the full include (``load_inline`` prepends it), so bindings are unaffected; only
``.cu`` files get lighter.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .artifacts import BuildHook

PCH_ENV = "KS_BUILD_PCH"
PCH_TIMEOUT_S = 600.0
_EXTENSION_INCLUDE = re.compile(r"#\s*include\s*[<\"]torch/extension\.h[>\"]")
#: The light include for a source that needs torch's C++ API beyond ATen (:func:`light_source`).
TYPES_INCLUDE = "#include <torch/types.h>"
_NEEDS_TORCH_API = re.compile(
    r"requires_grad|autograd|TORCH_LIBRARY|torch::(?:nn|jit|optim|data|serialize)\b"
)
_NAMED_OP = re.compile(r"\b(?:torch|at)::(\w+)\s*[(<]")
#: ``torch::`` as ATen's names, in a namespace of their own: where ``torch/types.h`` is included as well
#: (``main.cpp`` after load_inline's own include), its declarations hide these instead of clashing.
_TORCH_NAMES = """namespace ks_light_torch {
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;
}
namespace torch {
using namespace at;
using namespace ks_light_torch;
}"""


@functools.lru_cache(maxsize=1)
def _ops_dir() -> Path:
    from torch.utils import cpp_extension

    return Path(cpp_extension.include_paths()[0]) / "ATen" / "ops"


def light_include(solution: str, ops_dir: Path | None = None) -> str:
    """What replaces ``torch/extension.h`` in ``solution`` (see the module docstring)."""
    if _NEEDS_TORCH_API.search(solution):
        return TYPES_INCLUDE
    where = ops_dir or _ops_dir()
    ops = sorted({op for op in _NAMED_OP.findall(solution) if (where / f"{op}.h").is_file()})
    lines = [
        "#ifndef KS_LIGHT_TORCH_INCLUDE",
        "#define KS_LIGHT_TORCH_INCLUDE",
        *(f"#include <{h}>" for h in ("cmath", "cstdint", "iostream", "vector")),
        "#include <ATen/core/Tensor.h>",
        "#include <ATen/Dispatch.h>",
        "#include <c10/util/Exception.h>",
        *(f"#include <ATen/ops/{op}.h>" for op in ops),
        _TORCH_NAMES,
        "#endif",
    ]
    return "\n".join(lines)


def light_includes(solution: str, ops_dir: Path | None = None) -> list[str]:
    """The light includes for ``solution``, lightest first: ATen's operators alone (:func:`light_include`),
    then ``torch/types.h``. Host code that uses the tensor operators (``a + b``: ``ATen/TensorOperators.h``
    pulls in every operator's declaration, most of what ``ATen/ATen.h`` costs) fails the first, in
    seconds, and builds with the second."""
    return list(dict.fromkeys((light_include(solution, ops_dir), TYPES_INCLUDE)))


_LOAD_INLINE_CALL = re.compile(r"(?:(?<![\w.])|\b(?:torch\.utils\.)?cpp_extension\.)load_inline(\s*\()")
_FUTURE = re.compile(r"^from __future__ import .*$", re.M)
_SHIM = """
def _ks_light_load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
    # kernel-service's light build: each .cu file starts with the light include where load_inline
    # would put torch/types.h; main.cpp keeps torch/extension.h (the bindings). Anything else: as written.
    import inspect
    from torch.utils import cpp_extension
    if (not cuda_sources or args or "no_implicit_headers" in kwargs
            or "no_implicit_headers" not in inspect.signature(cpp_extension.load_inline).parameters):
        return cpp_extension.load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    cu = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources)
    cu = [{include!r}, "#include <cuda.h>", "#include <cuda_runtime.h>", *cu]
    return cpp_extension.load_inline(name, ["#include <torch/extension.h>", *cpp], cu,
                                     no_implicit_headers=True, **kwargs)
"""


def light_sources(solution: str, ops_dir: Path | None = None) -> list[str]:
    """The solution built lighter, one variant per light include (:func:`light_includes`, lightest
    first); empty if it neither includes ``torch/extension.h`` nor calls ``load_inline``.

    Each variant has its ``torch/extension.h`` includes made that include and its ``load_inline`` calls
    routed through a shim defined at its top: ``load_inline`` itself starts every ``.cu`` file with
    ``torch/types.h`` (half of a cold build: 26-29 s of nvcc on the H100 whatever the source includes,
    bench/build_paths.py), so the shim asks it for no implicit headers and puts the light include there
    instead, and ``torch/extension.h`` at the top of ``main.cpp`` as load_inline would. The shim is part
    of the source, so the compile worker, the eval worker and an artifact's node all hash the same files.
    """
    calls = _LOAD_INLINE_CALL.search(solution)
    if not _EXTENSION_INCLUDE.search(solution) and not calls:
        return []
    variants = []
    for include in light_includes(solution, ops_dir):
        light = _EXTENSION_INCLUDE.sub(lambda _, inc=include: inc, solution)  # type: ignore[misc]
        if calls:
            light = _LOAD_INLINE_CALL.sub(r"_ks_light_load_inline\1", light)
            shim = _SHIM.format(include=include)
            future = list(_FUTURE.finditer(light))
            at = future[-1].end() if future else 0
            light = light[:at] + ("\n" if at else "") + shim + light[at:]
        variants.append(light)
    return variants


def light_source(solution: str, ops_dir: Path | None = None) -> str | None:
    """The lightest of :func:`light_sources`; None if there is none."""
    variants = light_sources(solution, ops_dir)
    return variants[0] if variants else None


def ninja_variables(text: str) -> dict[str, str]:
    """The top-level variables (``cflags = ...``) of a ``build.ninja`` torch wrote."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if " = " in line and not line.startswith((" ", "\t", "build ", "rule ")):
            k, v = line.split(" = ", 1)
            values[k.strip()] = v.strip()
    return values


def pch_command(extra_cflags: list[str], extra_include_paths: list[str], with_cuda: bool) -> tuple[str, str]:
    """The shell command that precompiles ``torch/extension.h`` as torch would compile ``main.cpp`` with
    these arguments (``{out}`` stands for the output), and its signature (hash of the command)."""
    from torch.utils import cpp_extension

    with tempfile.TemporaryDirectory(prefix="ks-pch-probe-") as tmp:
        ninja = Path(tmp) / "build.ninja"
        cpp_extension._write_ninja_file_to_build_library(
            str(ninja), "ks_pch_probe", [str(Path(tmp) / "main.cpp")], extra_cflags, [], [], [],
            extra_include_paths, with_cuda, False, False,
        )  # fmt: skip
        text = ninja.read_text()
    values = ninja_variables(text)
    cflags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", values.get("cflags", ""))
    header = Path(cpp_extension.include_paths()[0]) / "torch" / "extension.h"
    cmd = f"{values.get('cxx', 'c++')} -x c++-header {shlex.quote(str(header))} -o {{out}} {cflags}"
    return cmd, hashlib.sha256(cmd.encode()).hexdigest()[:16]


def ensure_pch(root: Path, extra_cflags: list[str], extra_include_paths: list[str], with_cuda: bool) -> Path:
    """The include dir holding ``torch/extension.h.gch`` for these flags, built under ``root`` if missing.

    One build per flag set across every worker sharing ``root`` (an ``fcntl`` lock per signature); the
    file appears by an atomic rename, so a compiler never sees a half-written PCH.
    """
    from torch.utils import cpp_extension

    cmd, sig = pch_command(extra_cflags, extra_include_paths, with_cuda)
    header = Path(cpp_extension.include_paths()[0]) / "torch" / "extension.h"
    include_dir = root / sig
    gch = include_dir / "torch" / "extension.h.gch"
    if gch.is_file():
        return include_dir
    gch.parent.mkdir(parents=True, exist_ok=True)
    with open(root / f".lock-{sig}", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not gch.is_file():
                part = root / f".{sig}.{uuid.uuid4().hex[:8]}.gch"
                t0 = time.perf_counter()
                proc = subprocess.run(
                    cmd.format(out=shlex.quote(str(part))),
                    shell=True,
                    capture_output=True,
                    text=True,
                    timeout=PCH_TIMEOUT_S,
                )
                if proc.returncode != 0:
                    part.unlink(missing_ok=True)
                    raise RuntimeError(f"precompiling torch/extension.h failed: {proc.stderr[-2000:]}")
                # The header beside its PCH: a source that includes it a second time (``main.cpp`` after
                # load_inline's own include) finds it here, and its include guards end it at once.
                shutil.copyfile(header, gch.parent / "extension.h")
                os.replace(part, gch)
                (include_dir / "pch.json").write_text(
                    json.dumps({"command": cmd, "build_s": time.perf_counter() - t0})
                )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return include_dir


@contextlib.contextmanager
def pch_session(root: str | None = None) -> Iterator[BuildHook | None]:
    """In a compile worker: a build hook that uses (and first makes) a PCH for each build's flags, when
    ``KS_BUILD_PCH`` (or ``root``) names the PCH dir; ``CPATH`` is restored afterwards. A PCH that cannot
    be made is skipped (the build goes on without it, and says so on stderr)."""
    where = root or os.environ.get(PCH_ENV)
    if not where:
        yield None
        return
    saved = os.environ.get("CPATH")

    def hook(call: dict[str, Any]) -> None:
        args = call.get("build_arguments") or []
        cflags = list(args[0] or []) if args else []
        includes = list(args[3] or []) if len(args) > 3 else []
        try:
            include_dir = ensure_pch(Path(where), cflags, includes, bool(call.get("with_cuda")))
        except Exception as exc:  # noqa: BLE001 - a PCH is an optimisation: build without it
            import sys

            sys.stderr.write(f"kernel-service: no precompiled header for {call.get('name')}: {exc}\n")
            return
        os.environ["CPATH"] = os.pathsep.join(p for p in (str(include_dir), saved) if p)

    try:
        yield hook
    finally:
        if saved is None:
            os.environ.pop("CPATH", None)
        else:
            os.environ["CPATH"] = saved


async def race_light_build(service: Any, request: Any, base: dict[str, Any]) -> tuple[Any, Any]:
    """The request to judge (a light variant or the source as written) and its finished compile (None:
    already built).

    On an idle pool of two or more workers (an agent's lone submission), the lightest variant and the
    source as written start at once; the light one is taken when it builds, else the build as written,
    whose result is awaited, never restarted. After a light win, the as-written build runs on in the
    background (``service._background``: a started build stops only at its end) and fills its cache entry:
    the slot is the price of not waiting twice. On a pool already in use (a batch), the light variants
    build one after another, lightest first, and the source as written only if all fail: racing would
    double every solution's nvcc work while other solutions wait for workers. Measured on the H200 host
    (BENCHMARKS.md, issue 34): with racing whenever two workers were free, the first eight solutions of a
    25-solution batch raced, and their as-written builds ran on for a minute after the light ones won,
    holding half the pool: the batch read 7.78 evaluations/min against 9.20 on the older, slower light
    include. A source that builds light but not as written (a name clash with the headers the light
    include leaves out) would be judged on the light build: the one way verdicts could differ, and why
    this is an option, off by default.
    """
    variants = light_sources(request.solution)
    if not variants:
        return request, None
    cache = service.build_cache
    versions = service._versions()
    lights = [(request.model_copy(update={"solution": v}), cache.dir_for(v, request.backend, versions))
              for v in variants]  # fmt: skip
    full_dir = cache.dir_for(request.solution, request.backend, versions)
    for light_request, light_dir in lights:
        if cache.is_built(light_dir):
            return light_request, None
    if cache.is_built(full_dir):
        return request, None

    async def build(req: Any, build_dir: Path) -> Any:
        with cache.pinned(build_dir):
            return await service._compile(req, build_dir, base)

    def won(done: Any, build_dir: Path) -> bool:
        return done[0] is None and cache.is_built(build_dir)

    if service.compile_spare() < max(2, service.compile_pool.size):  # in use: light alone, then as written
        for light_request, light_dir in lights:
            light_done = await build(light_request, light_dir)
            if won(light_done, light_dir):
                return light_request, light_done
        return request, await build(request, full_dir)
    light_request, light_dir = lights[0]
    light_task = asyncio.ensure_future(build(light_request, light_dir))
    full_task = asyncio.ensure_future(build(request, full_dir))
    try:
        light_done = await light_task
    except BaseException:
        full_task.cancel()
        raise
    if won(light_done, light_dir):
        service._background.add(full_task)
        full_task.add_done_callback(service._background.discard)
        return light_request, light_done
    return request, await full_task
