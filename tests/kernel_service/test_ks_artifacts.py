"""Artifacts that travel: a real ``load_inline`` build packed, verified, installed elsewhere and loaded
without a build in a separate process; corrupt, truncated and forged artifacts refused, never loaded."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from kernel_service.judging.harness import load_module, reset_extension_versioner
from kernel_service.workers.artifacts import (
    MANIFEST_NAME,
    ArtifactCache,
    ArtifactError,
    ArtifactRef,
    manifest_extensions,
    pack,
    recording_builds,
    verify,
)
from ks_cluster_sources import op_solution

SOLUTION = op_solution("ks_art_add")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, ArtifactRef]:
    """One real build (in this process, as a compile worker does it) and its packed artifact."""
    build_root = tmp_path_factory.mktemp("node-a") / "build"
    saved = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(build_root)
    try:
        reset_extension_versioner()
        with recording_builds() as calls:
            load_module(SOLUTION, "solution", tmp_path_factory.mktemp("src"))
    finally:
        if saved is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = saved
    assert [c["name"] for c in calls] == ["ks_art_add_ext"] and calls[0]["is_python_module"] is False
    data, ref = pack(build_root, "k" * 24, "cpp", calls)
    return build_root, data, ref


_LOAD = """
import json, os, sys, torch
from pathlib import Path
from kernel_service.workers.artifacts import seed_prebuilt
from kernel_service.judging.harness import load_module, reset_extension_versioner
root, prebuilt, source = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
os.environ["TORCH_EXTENSIONS_DIR"] = root
reset_extension_versioner()
print(json.dumps(seed_prebuilt(root, prebuilt)))
mod = load_module(Path(source).read_text(), "solution", Path(root).parent)
print(json.dumps(mod.ModelNew()(torch.ones(3), torch.full((3,), 2.0)).tolist()))
"""


def test_an_artifact_installed_elsewhere_loads_without_a_build(
    built: tuple[Path, bytes, ArtifactRef], tmp_path: Path
) -> None:
    build_root, data, ref = built
    assert (build_root / "ks_art_add_ext" / "build.ninja").exists()  # the build node's own build dir
    cache = ArtifactCache(tmp_path / "node-b" / "artifacts")
    manifest = cache.store(data, ref)
    assert [e.name for e in manifest.extensions] == ["ks_art_add_ext"] and cache.has(ref.key)
    job_dir = tmp_path / "node-b" / "build-cache" / "job-1"
    cache.materialize(ref, job_dir)
    assert sorted(p.name for p in (job_dir / "ks_art_add_ext").iterdir()) == ["ks_art_add_ext.so", "main.cpp"]
    source = tmp_path / "solution.py"
    source.write_text(SOLUTION)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, str(job_dir), json.dumps(manifest_extensions(manifest)), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    seeded, out = proc.stdout.splitlines()[-2:]
    assert json.loads(seeded) == ["ks_art_add_ext"] and json.loads(out) == [3.0, 3.0, 3.0]
    # Loaded, not built: ninja never ran in the other node's dir (no build file, no object file).
    left = sorted(p.name for p in (job_dir / "ks_art_add_ext").iterdir())
    assert "build.ninja" not in left and "main.o" not in left, left


def test_corrupt_or_truncated_artifacts_are_rejected(
    built: tuple[Path, bytes, ArtifactRef], tmp_path: Path
) -> None:
    _root, data, ref = built
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    with pytest.raises(ArtifactError, match="content hash"):
        verify(bytes(flipped), ref, ref.key)
    with pytest.raises(ArtifactError, match="truncated"):
        verify(data[: len(data) - 100], ref, ref.key)
    with pytest.raises(ArtifactError, match="offered for key"):
        verify(data, ref, "other")
    cache = ArtifactCache(tmp_path / "artifacts")
    with pytest.raises(ArtifactError):
        cache.store(bytes(flipped), ref)
    assert not cache.has(ref.key)  # nothing of it was kept
    # A copy damaged on the node's disk after it was verified: found at the next use, dropped.
    cache.store(data, ref)
    stored = cache.root / f"{ref.key}.tar"
    stored.write_bytes(stored.read_bytes()[:-512])
    with pytest.raises(ArtifactError, match="truncated"):
        cache.materialize(ref, tmp_path / "job")
    assert not cache.has(ref.key) and not (tmp_path / "job").exists()


def _repack(data: bytes, change: dict[str, bytes | None], links: tuple[str, ...] = ()) -> bytes:
    """``data``'s members with some replaced (``None``: removed), plus symlink members."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for info in src:
            f = src.extractfile(info)
            assert f is not None
            body = change.get(info.name, f.read())
            if body is None:
                continue
            info.size = len(body)
            dst.addfile(info, io.BytesIO(body))
        for name in links:
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            dst.addfile(link)
    return out.getvalue()


def _ref_for(data: bytes, key: str) -> ArtifactRef:
    import hashlib

    return ArtifactRef(key=key, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def test_forged_artifacts_with_a_matching_outer_hash_are_rejected(
    built: tuple[Path, bytes, ArtifactRef],
) -> None:
    """Bytes that match their ref but not their own manifest (a .so swapped after the build, a stray
    symlink, a path out of the dir, another torch) are refused all the same."""
    _root, data, ref = built
    so = "ks_art_add_ext/ks_art_add_ext.so"
    cases = {
        "does not match its manifest hash": _repack(data, {so: b"\x7fELF not the build"}),
        "not a regular file": _repack(data, {}, links=("ks_art_add_ext/evil",)),
        "bad (member|file) name": _traversal(data),
        "differ from the manifest": _repack(data, {"ks_art_add_ext/main.cpp": None}),
        "built for torch": _repack(data, {MANIFEST_NAME: _manifest_with(data, torch_version="0.0.1")}),
    }
    for message, forged in cases.items():
        with pytest.raises(ArtifactError, match=message):
            verify(forged, _ref_for(forged, ref.key), ref.key)


def _traversal(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for info in src:
            f = src.extractfile(info)
            assert f is not None
            dst.addfile(info, f)
        bad = tarfile.TarInfo("../escape")
        bad.size = 1
        dst.addfile(bad, io.BytesIO(b"x"))
    return out.getvalue()


def _manifest_with(data: bytes, **change: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as src:
        f = src.extractfile(MANIFEST_NAME)
        assert f is not None
        manifest = json.loads(f.read())
    manifest.update(change)
    return json.dumps(manifest).encode()


def test_pack_refuses_links_out_of_the_build_dir(
    built: tuple[Path, bytes, ArtifactRef], tmp_path: Path
) -> None:
    """A solution that replaced its built library by a link (to a host file) gets no artifact."""
    build_root, _data, _ref = built
    copy = tmp_path / "build"
    import shutil

    shutil.copytree(build_root, copy, symlinks=True)
    so = copy / "ks_art_add_ext" / "ks_art_add_ext.so"
    so.unlink()
    so.symlink_to("/etc/passwd")
    call = {
        "name": "ks_art_add_ext",
        "build_directory": str(copy / "ks_art_add_ext"),
        "sources": ["main.cpp"],
        "build_arguments": [["-O1"], None, None, None],
        "with_cuda": False,
        "with_sycl": False,
        "is_python_module": False,
        "is_standalone": False,
    }
    with pytest.raises(ArtifactError, match="cannot read"):
        pack(copy, "k" * 24, "cpp", [call])
    outside = dict(call, build_directory=str(tmp_path / "elsewhere" / "ks_art_add_ext"))
    with pytest.raises(ArtifactError, match="not built in the build dir"):
        pack(copy, "k" * 24, "cpp", [outside])


def test_a_nodes_artifact_cache_keeps_within_its_limit_least_recently_used_first(tmp_path: Path) -> None:
    """A node serves many submissions: its artifacts are trimmed to the service's build cache limit."""
    cache = ArtifactCache(tmp_path / "artifacts", max_bytes=2500)
    for age, key in enumerate(["old", "mid", "new"]):
        path = cache.root / f"{key}.tar"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    assert cache.evict(keep="old") == ["mid"]  # the oldest is kept when it is the one just stored
    assert sorted(p.stem for p in cache.root.glob("*.tar")) == ["new", "old"]
    assert cache.evict() == []  # within the limit now
    assert ArtifactCache(tmp_path / "other").evict() == []  # no limit: nothing is removed
