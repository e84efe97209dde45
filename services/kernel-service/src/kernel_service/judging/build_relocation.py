"""Builds a submission makes outside the build cache, made inside it: one build for all of its processes.

Why: model-written solutions often write their sources into a fresh ``tempfile.mkdtemp()`` and call
``torch.utils.cpp_extension.load(sources=[tmp/x.cu], build_directory=tmp)`` (4 of CUDA-L1's first release,
1 of its revision). Every process that imports such a solution then builds from scratch in a directory of
its own, and ninja, whose build file names the random paths, rebuilds even in a shared one: the compile
pool's build is never used, and each fresh side of the job (eight pairs of them for a call under 10 us)
compiles again on the GPU worker's clock, 30-60 s each.

So in every process that loads a solution (the compile worker, its forked lazy-build run, the candidate's
sides), :func:`relocate_builds` wraps torch's ``_jit_compile``: a build whose sources or build directory
lie outside ``TORCH_EXTENSIONS_DIR`` (the job's build dir) is made in ``relocated/<name>-<key>`` under it,
``<key>`` the hash of the extension's name, its flags and the bytes of its sources and of the files beside
them that they include, which are copied there (bounded: ``MAX_FILES``, ``MAX_BYTES``; a header beside a
source keeps working; a source whose own name is random, a ``NamedTemporaryFile``'s, is named by its
bytes). Identical solutions in any process then name the same paths, so the
compile pool builds and every side only loads (ninja finds nothing to do), and the recorded build
(``artifacts.recording_builds``, ``failed_builds``) covers it like a ``load_inline`` one. Files are
written only when their bytes differ, so an unchanged source keeps its time stamp. Anything else (sources
in several directories, a directory too large, a source that is not a regular file) builds where the
solution asked, as before. Nothing here decides a verdict: the same sources and flags build the same
extension, in another directory.

A name that ends in a number (``f"huber_loss_cuda_{os.getpid()}"``, ``f"fused_conv_{id(self)}"``: 3 of
CUDA-L1's first release) is another name in every process, so every side built again (15-21 s each on the
GPU worker). Such a build is moved the same way, inside the build dir too, and named by its stem and the
same hash (:func:`stable_name`): the module a solution gets back has another ``__name__``, nothing else.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

#: The most files, and bytes, of a sources' directory copied into the build cache (else not relocated).
MAX_FILES = 64
MAX_BYTES = 16 * 1024 * 1024
#: What of the sources' directory is copied besides the sources: what a source may include.
SOURCE_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".inl", ".inc"})
RELOCATED_DIR = "relocated"
_MARK = "_ks_relocating"
#: A name ending in ``_`` and a number: a process's or an object's id, another in every process (a pid in
#: the sandbox's namespace may be one digit).
_NUMBERED = re.compile(r"^(?P<stem>[A-Za-z_][A-Za-z0-9_]*?)_[0-9]+$")


def stable_name(name: str) -> str | None:
    """The stem of a name that ends in a number (``huber_cuda_4242`` -> ``huber_cuda``), else None."""
    match = _NUMBERED.match(name)
    return match["stem"] if match else None


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), root]) == root


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*["<]([^">/\\]+)[">]', re.MULTILINE)


def _files_of(directory: str, sources: list[str]) -> dict[str, bytes] | None:
    """The bytes of ``sources`` (files of ``directory``) and of the files beside them that they include by
    name, transitively, if few and small enough to copy; else None.

    Only what they include: a shared directory (``/tmp``, where ``NamedTemporaryFile`` writes) holds other
    processes' leftovers, which must neither be copied nor change the build's key."""
    own = {os.path.basename(s) for s in sources}
    contents: dict[str, bytes] = {}
    wanted, total = sorted(own), 0
    while wanted:
        name = wanted.pop()
        path = os.path.join(directory, name)
        ours = name in own or (
            Path(name).suffix in SOURCE_SUFFIXES and os.path.isfile(path) and not os.path.islink(path)
        )
        if name in contents or not ours:
            continue  # a system header, or nothing of ours
        try:
            contents[name] = data = Path(path).read_bytes()
        except OSError:
            return None
        total += len(data)
        if len(contents) > MAX_FILES or total > MAX_BYTES:
            return None
        wanted.extend(_included(data))
    return contents


def _included(data: bytes) -> set[str]:
    return {m.decode(errors="replace") for m in _INCLUDE.findall(data)}


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def relocation(
    root: str, name: str, sources: list[str], build_directory: str, flags: list[Any], include_paths: Any
) -> tuple[list[str], str, list[str], str] | None:
    """Where a build of ``sources`` into ``build_directory`` is made instead (its sources, its build dir
    and its include paths, the sources' directory among them moved too) and under which name, or None to
    build as asked. ``flags``: the build's other flags, which name it with its files' bytes."""
    root = os.path.realpath(root)
    stem = stable_name(name)
    inside = _inside(build_directory, root) and all(_inside(s, root) for s in sources)
    if not sources or (inside and stem is None):
        return None
    if not all(os.path.isfile(s) and not os.path.islink(s) for s in sources):
        return None
    dirs = {os.path.dirname(os.path.abspath(s)) for s in sources}
    if len(dirs) != 1:
        return None
    (src_dir,) = dirs
    contents = _files_of(src_dir, sources)
    if contents is None:
        return None
    included = set().union(*map(_included, contents.values()))
    # a source's own name may be random (``NamedTemporaryFile(suffix=".cu")``): named by its bytes unless
    # a file includes it by name
    renamed = {}
    for i, source in enumerate(os.path.basename(s) for s in sources):
        short = hashlib.sha256(contents[source]).hexdigest()[:12]
        renamed[source] = source if source in included else f"source{i}-{short}{Path(source).suffix}"
    placed = {renamed.get(file_name, file_name): data for file_name, data in contents.items()}
    includes = [str(p) for p in include_paths or []]
    # the sources' directory, a random name, is named by its contents only
    named = [("<sources>" if os.path.abspath(p) == src_dir else p) for p in includes]
    digest = hashlib.sha256(json.dumps([stem or name, flags, named], default=str).encode())
    for file_name, data in sorted(placed.items()):
        digest.update(file_name.encode() + b"\0" + hashlib.sha256(data).digest())
    key = digest.hexdigest()[:16]
    new_name = name if stem is None else f"{stem}_{key}"
    dest = Path(root) / RELOCATED_DIR / (new_name if stem else f"{name}-{key}")
    dest.mkdir(parents=True, exist_ok=True)
    for file_name, data in placed.items():
        _write_if_changed(dest / file_name, data)
    moved = [str(dest / renamed[os.path.basename(s)]) for s in sources]
    return moved, str(dest), [(str(dest) if n == "<sources>" else n) for n in named], new_name


def relocate_builds() -> None:
    """Wrap ``cpp_extension._jit_compile`` in this process (once) so that builds outside the job's build
    dir are made inside it (see the module docstring)."""
    from torch.utils import cpp_extension

    original = cpp_extension._jit_compile
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def jit_compile(
        name: str,
        sources: list[str],
        extra_cflags: Any,
        extra_cuda_cflags: Any,
        extra_sycl_cflags: Any,
        extra_ldflags: Any,
        extra_include_paths: Any,
        build_directory: str,
        *rest: Any,
        **kwargs: Any,
    ) -> Any:
        root = os.environ.get("TORCH_EXTENSIONS_DIR")
        flags = [extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags]
        try:
            moved = (
                relocation(root, name, list(sources), build_directory, flags, extra_include_paths)
                if root
                else None
            )
        except OSError:
            moved = None
        if moved is not None:
            sources, build_directory, includes, name = moved
            if extra_include_paths:
                extra_include_paths = includes
        return original(name, sources, extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags,
                        extra_include_paths, build_directory, *rest, **kwargs)  # fmt: skip

    setattr(jit_compile, _MARK, True)
    cpp_extension._jit_compile = jit_compile
