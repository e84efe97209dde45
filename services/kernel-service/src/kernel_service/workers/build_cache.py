"""Content-addressed build cache for ``load_inline`` extensions, shared by every worker, bounded in size.

One directory per (solution source, backend, torch/CUDA/Python versions, target arch): a resubmitted
kernel finds its built extension and skips the compile; any change gets a fresh directory, so two
solutions that reuse an extension name never race on the same build. A finished build is marked with
``.kernel-service-built`` (JSON: its size and when it was built); the marker's mtime is refreshed on every
hit, which makes eviction least-recently-used.

Eviction (``max_bytes``): after a build is marked, the oldest entries are deleted until the cache fits.
Entries that an in-flight evaluation holds (``pin``) are never deleted, nor are unmarked directories
younger than ``busy_grace_s`` (a build another worker is still writing). Deleting an entry that an idle
warm worker already loaded is safe on Linux: the mapped ``.so`` stays valid until the worker exits.
Several service processes may share one root: eviction runs under an ``fcntl`` lock on ``root/.lock``.
Entries are not relocatable (ninja's logs record absolute paths: a copy under another root rebuilds),
so every process that shares a cache must see it at the same path; across a Ray cluster, builds travel as
artifacts instead (:mod:`kernel_service.workers.artifacts`), kept beside the entry on the service's host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

BUILT_MARKER = ".kernel-service-built"
LOCK_NAME = ".lock"


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    size: int
    last_used: float
    built: bool


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evicted: int = 0
    evicted_bytes: int = 0


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed; vanished files skipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


#: A Ray actor's pool env names the service's build cache limit (bytes) in this variable: each node bounds
#: its own build dirs and artifact cache by it (``ray_executor``).
NODE_CACHE_MAX_ENV = "KS_NODE_CACHE_MAX_BYTES"


class BuildCache:
    """``TORCH_EXTENSIONS_DIR`` per solution under ``root``; ``max_bytes=None`` never evicts."""

    def __init__(self, root: Path, max_bytes: int | None = None, busy_grace_s: float = 3600.0) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"build cache max_bytes must be > 0 or None, got {max_bytes}")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.busy_grace_s = busy_grace_s
        self.stats = CacheStats()
        self._pins: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.root.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(solution: str, backend: str, versions: str) -> str:
        return hashlib.sha256("\0".join([solution, backend, versions]).encode()).hexdigest()[:24]

    def dir_for(self, solution: str, backend: str, versions: str) -> Path:
        return self.root / self.key(solution, backend, versions)

    @staticmethod
    def is_built(path: Path) -> bool:
        return (path / BUILT_MARKER).exists()

    def lookup(self, path: Path) -> bool:
        """Whether ``path`` is built; counts a hit (and refreshes its LRU time) or a miss."""
        marker = path / BUILT_MARKER
        try:
            os.utime(marker)
        except OSError:
            self.stats.misses += 1
            return False
        self.stats.hits += 1
        return True

    def mark_built(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        marker = path / BUILT_MARKER
        marker.write_text(json.dumps({"size": tree_size(path), "built_at": time.time()}))

    # ---- pins: entries an in-flight evaluation uses --------------------------------------------

    @contextlib.contextmanager
    def pinned(self, path: Path) -> Iterator[Path]:
        with self._lock:
            self._pins[path.name] += 1
        try:
            yield path
        finally:
            with self._lock:
                self._pins[path.name] -= 1
                if self._pins[path.name] <= 0:
                    del self._pins[path.name]

    def is_pinned(self, path: Path) -> bool:
        with self._lock:
            return self._pins.get(path.name, 0) > 0

    # ---- size and eviction ---------------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        out: list[CacheEntry] = []
        try:
            children = list(self.root.iterdir())
        except OSError:
            return out
        for child in children:
            if not child.is_dir() or child.is_symlink():
                continue
            marker = child / BUILT_MARKER
            try:
                st = marker.stat()
                size = int(json.loads(marker.read_text()).get("size", 0)) or tree_size(child)
                out.append(CacheEntry(child, size, st.st_mtime, True))
            except (OSError, ValueError, AttributeError):
                try:
                    mtime = child.stat().st_mtime
                except OSError:
                    continue
                out.append(CacheEntry(child, tree_size(child), mtime, False))
        return out

    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries())

    def evict(self) -> list[Path]:
        """Delete least-recently-used entries until the cache is within ``max_bytes``; returns them."""
        if self.max_bytes is None:
            return []
        removed: list[Path] = []
        with open(self.root / LOCK_NAME, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entries = self.entries()
                total = sum(e.size for e in entries)
                now = time.time()
                for e in sorted(entries, key=lambda e: e.last_used):
                    if total <= self.max_bytes:
                        break
                    if self.is_pinned(e.path):
                        continue
                    if not e.built and now - e.last_used < self.busy_grace_s:
                        continue  # a build in progress (or just failed): leave it to its writer
                    shutil.rmtree(e.path, ignore_errors=True)
                    total -= e.size
                    removed.append(e.path)
                    self.stats.evicted += 1
                    self.stats.evicted_bytes += e.size
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        if removed:
            logger.info("build cache: evicted %d entries, now %d bytes", len(removed), total)
        return removed
