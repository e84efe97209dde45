"""Build artifacts that travel: a built ``load_inline`` extension as bytes another node can load.

A build dir is not relocatable (ninja's state holds absolute paths, and torch decides whether to rebuild
from an in-process hash that includes the build dir), so a cluster without a shared filesystem needs
something else. An *artifact* is the minimum a node needs to load a solution's extensions without
building them: per extension, the sources ``load_inline`` wrote (``main.cpp``, ``cuda.cu``) and the
shared object, plus a :class:`ArtifactManifest` (pydantic) that names every file with its SHA-256 and
the exact arguments torch hashed when it built them. It is packed as an uncompressed tar, content-addressed
by the build cache key (solution source, backend, torch/CUDA/Python versions, arch, build flags), and
described by an :class:`ArtifactRef` (key, SHA-256 and size of the bytes).

Loading without a build (:func:`seed_prebuilt`): in the process that imports the solution, torch's
``JIT_EXTENSION_VERSIONER`` gets, for each artifact extension, the entry torch itself computes from the
installed files and the recorded arguments at the local build dir. When the solution's own
``load_inline`` call then hashes the same sources and flags, torch sees "no change" and imports the
``.so``; any difference (another source on this node, other flags) bumps the version and torch builds
afresh: a wrong or stale artifact costs a build, never a wrong load.

Trust: the artifact is the candidate's own product (its build ran its code in the sandboxed compile
worker), exactly as a build cache entry is today; what is new is that bytes cross hosts. So packing
(:func:`pack`, in the unsandboxed parent) takes regular files only, never follows links, and caps sizes;
installing (:func:`install`) checks the bytes' SHA-256 and size against the ref the builder's parent
reported, the manifest's key against the job's, and every file against the manifest, writes files itself
(no ``tarfile.extract``: names are checked, links and devices refused), and raises :class:`ArtifactError`
on any mismatch: a corrupt or truncated artifact is never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_NAME = "manifest.json"
FORMAT = 1
#: Largest artifact packed or accepted (a CUDA extension's .so is a few MB; this is a broken build).
MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
#: Most extensions one solution may bring (each is one ``load_inline`` call).
MAX_EXTENSIONS = 16


class ArtifactError(Exception):
    """An artifact that must not be loaded (corrupt, truncated, for another key or another torch)."""


class ArtifactFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str  # "<extension name>/<file name>", one level deep
    sha256: str
    size: int = Field(ge=0)


class BuiltExtension(BaseModel):
    """One ``load_inline`` build: what torch's versioner hashed (to recompute it on another node)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    sources: list[str]  # file names inside the extension's build dir, in torch's order
    build_arguments: list[list[str] | None]  # [extra_cflags, extra_cuda_cflags, extra_ldflags, includes]
    with_cuda: bool | None = None
    with_sycl: bool | None = None
    is_python_module: bool = True
    is_standalone: bool = False

    @property
    def library(self) -> str:
        """The file torch loads: ``<name>.so`` (a standalone build is an executable named ``<name>``)."""
        return self.name if self.is_standalone else f"{self.name}.so"


class ArtifactManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    key: str
    backend: str
    torch_version: str
    cuda_version: str | None
    python: str
    cuda_arch: str | None = None  # TORCH_CUDA_ARCH_LIST of the build (None: torch's default for the host)
    flags: list[str] = Field(default_factory=list)  # the service's build options (pch, light include)
    extensions: list[BuiltExtension]
    files: list[ArtifactFile]
    built_on: str = ""
    built_at: float = 0.0


class ArtifactRef(BaseModel):
    """What the receiver checks the bytes against (reported by the builder's parent, not its worker)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    sha256: str
    size: int = Field(ge=0)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_name(part: str) -> str:
    if not part or part in (".", "..") or "/" in part or "\0" in part or part.startswith("."):
        raise ArtifactError(f"artifact: bad file name {part!r}")
    return part


def local_versions() -> tuple[str, str | None, str]:
    """This process's torch version, CUDA version and Python (major.minor): what a .so is built against."""
    import torch

    return torch.__version__, torch.version.cuda, f"{sys.version_info[0]}.{sys.version_info[1]}"


# ---- recording builds (compile worker) -------------------------------------------------------------


#: Called with each recorded build before torch runs ninja for it (``fast_builds.pch_hook``).
BuildHook = Callable[[dict[str, Any]], None]


@contextlib.contextmanager
def recording_builds(before_build: BuildHook | None = None) -> Iterator[list[dict[str, Any]]]:
    """Record every ``load_inline``/``load`` build the solution starts while importing.

    Wraps the bound method on torch's versioner *instance* (not a module attribute: the integrity guard
    watches those), restoring what was there afterwards. Only builds whose sources lie in their own build
    dir are recorded (inline builds); anything else cannot travel and is rebuilt where it is loaded.
    ``before_build`` sees each build that torch is about to run (a new or changed extension).
    """
    from torch.utils import cpp_extension

    versioner = cpp_extension.JIT_EXTENSION_VERSIONER
    own = vars(versioner).get("bump_version_if_changed")
    original = versioner.bump_version_if_changed
    calls: list[dict[str, Any]] = []

    def record(name: str, source_files: list[str], build_arguments: list[Any], build_directory: str,
               with_cuda: Any, with_sycl: Any, is_python_module: Any, is_standalone: Any) -> int:  # fmt: skip
        old = versioner.get_version(name)
        version: int = original(name, source_files, build_arguments, build_directory, with_cuda, with_sycl,
                                is_python_module, is_standalone)  # fmt: skip
        build_dir = os.path.abspath(build_directory)
        sources = [os.path.abspath(s) for s in source_files]
        call = {
            "name": name,
            "build_directory": build_dir,
            "sources": [os.path.basename(s) for s in sources],
            "build_arguments": [list(map(str, g)) if g else None for g in build_arguments],
            "with_cuda": with_cuda,
            "with_sycl": with_sycl,
            "is_python_module": bool(is_python_module),
            "is_standalone": bool(is_standalone),
        }
        if version == 0 and all(os.path.dirname(s) == build_dir for s in sources):
            calls.append(call)
        if before_build is not None and version != old:
            before_build(call)
        return version

    versioner.bump_version_if_changed = record  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        if own is not None:
            versioner.bump_version_if_changed = own  # type: ignore[method-assign]
        else:
            with contextlib.suppress(AttributeError):
                del versioner.bump_version_if_changed


# ---- builds that failed (compile worker -> the candidate's sides) ----------------------------------


def _arguments(build_arguments: list[Any]) -> list[list[str] | None]:
    return [list(map(str, g)) if g else None for g in build_arguments]


def build_key(name: str, source_files: list[str], build_arguments: list[Any], with_cuda: Any) -> str:
    """What decides a build's outcome here: the extension's name, its sources' bytes and its flags (not
    its build dir, which differs between the compile worker and the sides)."""
    digest = hashlib.sha256(json.dumps([name, _arguments(build_arguments), bool(with_cuda)]).encode())
    for path in source_files:
        with open(path, "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def failed_builds(built: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The recorded builds (``recording_builds``) that left no library in their build dir: the compiler
    failed them and the solution caught the error (most model-written extensions fall back to PyTorch
    when their build fails). Each: its name and ``build_key``."""
    failed = []
    for call in built[:MAX_EXTENSIONS]:
        build_dir, name = str(call["build_directory"]), str(call["name"])
        if any(os.path.exists(os.path.join(build_dir, out)) for out in (f"{name}.so", name)):
            continue
        sources = [os.path.join(build_dir, s) for s in call["sources"]]
        if all(os.path.isfile(s) for s in sources):
            key = build_key(name, sources, call["build_arguments"] or [], call["with_cuda"])
            failed.append({"name": name, "key": key})
    return failed


def refuse_failed_builds(failed: list[dict[str, Any]]) -> None:
    """In a candidate's side (after ``reset_extension_versioner``): a ``load_inline`` of sources and flags
    whose build failed on the compile worker raises torch's own build error at once, without running the
    compiler again. Every fresh side of the job would otherwise pay the failing compile (seconds to a
    minute each, inside the timing phase), to reach the same error and the same fallback. Wraps the
    versioner instance's method, as ``recording_builds`` does. A record can only make the submission's own
    build fail; any other sources or flags build as before."""
    from torch.utils import cpp_extension

    keys = {str(f.get("key")): str(f.get("name")) for f in failed if isinstance(f, dict)}
    if not keys:
        return
    versioner = cpp_extension.JIT_EXTENSION_VERSIONER
    original = versioner.bump_version_if_changed

    def refuse(name: str, source_files: list[str], build_arguments: list[Any], build_directory: str,
               with_cuda: Any, with_sycl: Any, is_python_module: Any, is_standalone: Any) -> int:  # fmt: skip
        try:
            key = build_key(name, list(source_files), list(build_arguments), with_cuda)
        except OSError:
            key = ""
        if key in keys:
            raise RuntimeError(
                f"Error building extension '{name}': the service's compile worker built these sources with "
                "these flags and the compiler failed (not run again here)"
            )
        return int(original(name, source_files, build_arguments, build_directory, with_cuda, with_sycl,
                            is_python_module, is_standalone))  # fmt: skip

    versioner.bump_version_if_changed = refuse  # type: ignore[method-assign]


# ---- packing (the compile side's parent) ---------------------------------------------------------


def _read_regular(path: Path, budget: int) -> bytes:
    """A regular file's bytes, refusing links, devices and anything over ``budget``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ArtifactError(f"artifact: cannot read {path.name}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactError(f"artifact: {path.name} is not a regular file")
        if st.st_size > budget:
            raise ArtifactError(f"artifact: {path.name} is larger than the {MAX_ARTIFACT_BYTES} byte limit")
        return f.read(budget + 1)


def pack(
    extensions_dir: Path,
    key: str,
    backend: str,
    recorded: list[dict[str, Any]],
    cuda_arch: str | None = None,
    flags: list[str] | None = None,
) -> tuple[bytes, ArtifactRef]:
    """The artifact of the builds ``recorded`` under ``extensions_dir`` (the build's TORCH_EXTENSIONS_DIR).

    Raises :class:`ArtifactError` when a recorded build cannot be packed (outside the dir, missing file,
    a link); the caller then ships nothing and the evaluating node builds for itself.
    """
    root = extensions_dir.resolve()
    exts: list[BuiltExtension] = []
    files: dict[str, bytes] = {}
    budget = MAX_ARTIFACT_BYTES
    seen: set[str] = set()
    for raw in recorded[: MAX_EXTENSIONS + 1]:
        if len(exts) >= MAX_EXTENSIONS:
            raise ArtifactError(f"artifact: more than {MAX_EXTENSIONS} extensions")
        ext = BuiltExtension.model_validate({k: v for k, v in raw.items() if k != "build_directory"})
        if ext.name in seen:
            continue
        seen.add(_check_name(ext.name))
        if Path(str(raw.get("build_directory", ""))).resolve() != root / ext.name:
            raise ArtifactError(f"artifact: extension {ext.name!r} was not built in the build dir")
        for fname in [*ext.sources, ext.library]:
            data = _read_regular(root / ext.name / _check_name(fname), budget)
            budget -= len(data)
            files[f"{ext.name}/{fname}"] = data
        exts.append(ext)
    torch_version, cuda_version, python = local_versions()
    manifest = ArtifactManifest(
        key=key,
        backend=backend,
        torch_version=torch_version,
        cuda_version=cuda_version,
        python=python,
        cuda_arch=cuda_arch,
        flags=list(flags or []),
        extensions=exts,
        files=[ArtifactFile(path=p, sha256=_sha256(d), size=len(d)) for p, d in sorted(files.items())],
        built_on=socket.gethostname(),
        built_at=time.time(),
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(MANIFEST_NAME, manifest.model_dump_json().encode()), *sorted(files.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".so") else 0o644
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    return data, ArtifactRef(key=key, sha256=_sha256(data), size=len(data))


# ---- installing (the evaluating side's parent) ---------------------------------------------------


def verify(data: bytes, ref: ArtifactRef, key: str) -> tuple[ArtifactManifest, dict[str, bytes]]:
    """The manifest and files of ``data``, after every check; :class:`ArtifactError` says which failed."""
    if ref.key != key:
        raise ArtifactError(f"artifact for key {ref.key} offered for key {key}")
    if len(data) != ref.size:
        raise ArtifactError(f"artifact {key}: {len(data)} bytes, expected {ref.size} (truncated or padded)")
    digest = _sha256(data)
    if digest != ref.sha256:
        raise ArtifactError(f"artifact {key}: content hash {digest[:16]}… does not match {ref.sha256[:16]}…")
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for info in tar:
                if not info.isreg():
                    raise ArtifactError(f"artifact {key}: {info.name!r} is not a regular file")
                parts = info.name.split("/")
                if info.name != MANIFEST_NAME and (len(parts) != 2 or not all(map(_check_name, parts))):
                    raise ArtifactError(f"artifact {key}: bad member name {info.name!r}")
                f = tar.extractfile(info)
                assert f is not None
                members[info.name] = f.read()
    except (tarfile.TarError, EOFError, ValueError) as exc:
        raise ArtifactError(f"artifact {key}: unreadable archive: {exc}") from exc
    try:
        manifest = ArtifactManifest.model_validate_json(members.pop(MANIFEST_NAME))
    except KeyError:
        raise ArtifactError(f"artifact {key}: no {MANIFEST_NAME}") from None
    except ValueError as exc:
        raise ArtifactError(f"artifact {key}: invalid manifest: {str(exc)[:300]}") from exc
    if manifest.format != FORMAT or manifest.key != key:
        raise ArtifactError(f"artifact {key}: manifest is for key {manifest.key} (format {manifest.format})")
    torch_version, cuda_version, python = local_versions()
    if (manifest.torch_version, manifest.cuda_version, manifest.python) != (
        torch_version,
        cuda_version,
        python,
    ):
        raise ArtifactError(
            f"artifact {key}: built for torch {manifest.torch_version} / CUDA {manifest.cuda_version} / "
            f"Python {manifest.python}, this node has {torch_version} / {cuda_version} / {python}"
        )
    listed = {f.path: f for f in manifest.files}
    if set(listed) != set(members):
        raise ArtifactError(
            f"artifact {key}: files {sorted(members)} differ from the manifest's {sorted(listed)}"
        )
    for path, body in members.items():
        if len(body) != listed[path].size or _sha256(body) != listed[path].sha256:
            raise ArtifactError(f"artifact {key}: {path} does not match its manifest hash")
    for ext in manifest.extensions:
        for fname in [*ext.sources, ext.library]:
            if f"{ext.name}/{fname}" not in members:
                raise ArtifactError(f"artifact {key}: extension {ext.name} lacks {fname}")
    return manifest, members


class ArtifactCache:
    """A node's artifact cache (``<node work dir>/artifacts``): verified artifacts, by key.

    ``store`` keeps the bytes only after :func:`verify` passed; ``materialize`` re-verifies them and writes
    a fresh copy for one job into a dir that job's worker may write (torch takes a lock file in the
    extension dir). A per-job copy means no submission can alter an artifact another job will load.
    """

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / f"{_check_name(key)}.tar"

    def evict(self, keep: str | None = None) -> list[str]:
        """Delete the least recently used artifacts until the cache is within ``max_bytes`` (never ``keep``,
        the one just stored); returns their keys. A node serves many submissions, each a few MB to
        hundreds: without a bound its disk fills. An evicted artifact is fetched again when needed."""
        if self.max_bytes is None:
            return []
        entries = []
        for path in self.root.glob("*.tar"):
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, path in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if path.stem == keep:
                continue
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size
                removed.append(path.stem)
        return removed

    def has(self, key: str) -> bool:
        return self._path(key).is_file()

    def store(self, data: bytes, ref: ArtifactRef) -> ArtifactManifest:
        manifest, _files = verify(data, ref, ref.key)
        tmp = self.root / f".{ref.key}.{uuid.uuid4().hex[:8]}.part"
        tmp.write_bytes(data)
        os.replace(tmp, self._path(ref.key))
        self.evict(keep=ref.key)
        return manifest

    def drop(self, key: str) -> None:
        with contextlib.suppress(OSError):
            self._path(key).unlink()

    def materialize(self, ref: ArtifactRef, dest: Path) -> ArtifactManifest:
        """Verify the stored artifact again and install its files under ``dest`` (a TORCH_EXTENSIONS_DIR)."""
        try:
            data = self._path(ref.key).read_bytes()
            os.utime(self._path(ref.key))  # used now: the last to be evicted
        except OSError as exc:
            raise ArtifactError(f"artifact {ref.key}: not in this node's cache ({exc.strerror})") from exc
        try:
            manifest, files = verify(data, ref, ref.key)
        except ArtifactError:
            self.drop(ref.key)
            raise
        shutil.rmtree(dest, ignore_errors=True)
        for path, body in files.items():
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
        return manifest


# ---- loading without a build (the process that imports the solution) ---------------------------


def seed_prebuilt(extensions_dir: str, extensions: list[dict[str, Any]]) -> list[str]:
    """Tell torch's versioner the artifact's extensions are built, as torch itself would hash them here.

    Calls torch's own ``bump_version_if_changed`` with the installed sources and the recorded arguments
    at this node's build dir, after ``reset_extension_versioner``: the solution's matching
    ``load_inline`` then skips ninja and imports the .so. Returns the names seeded.
    """
    from torch.utils import cpp_extension

    versioner = cpp_extension.JIT_EXTENSION_VERSIONER
    seeded: list[str] = []
    for raw in extensions:
        ext = BuiltExtension.model_validate(raw)
        build_dir = os.path.join(extensions_dir, ext.name)
        sources = [os.path.join(build_dir, s) for s in ext.sources]
        if not all(os.path.isfile(s) for s in [*sources, os.path.join(build_dir, ext.library)]):
            continue
        versioner.bump_version_if_changed(ext.name, sources, ext.build_arguments, build_dir, ext.with_cuda,
                                          ext.with_sycl, ext.is_python_module, ext.is_standalone)  # fmt: skip
        seeded.append(ext.name)
    return seeded


def manifest_extensions(manifest: ArtifactManifest) -> list[dict[str, Any]]:
    """The manifest's extensions as the JSON a job carries to the worker (``Job.prebuilt``)."""
    return [json.loads(e.model_dump_json()) for e in manifest.extensions]
