"""Result cache: an identical resubmission is answered from the verdict of its first evaluation.

The key hashes everything the verdict depends on: the reference source, the solution source, the
backend, every evaluation option that changes what is measured (not the cache bypass itself), and the
environment (hardware, torch, CUDA, Python, timing-method version). Only verdicts the submission owns
are stored (``CACHEABLE``): a timeout, a sandbox error, a worker crash or a "requires a GPU" answer says
something about the host at that moment, so those always run again.

Identical submissions that arrive while the first is still running share it (``shared_run.SharedRun``) instead
of running twice. Entries live in memory (LRU, ``max_entries``) and, with ``directory``, as one JSON file
each, so a restarted service keeps them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .judging.schemas import Outcome
from .kernelbench.schemas import KernelEvalResponse

logger = logging.getLogger(__name__)

#: Verdicts that depend only on the submission (and the key's environment), so may be replayed.
CACHEABLE: frozenset[Outcome] = frozenset(
    {
        Outcome.CORRECT,
        Outcome.INCORRECT,
        Outcome.COMPILED,
        Outcome.COMPILATION_FAILURE,
        Outcome.INITIALIZATION_FAILURE,
        Outcome.EXECUTION_FAILURE,
    }
)
#: Options that do not change the verdict: never part of the key.
IGNORED_OPTIONS = frozenset({"use_result_cache"})


def result_key(
    reference: str, solution: str, backend: str, options: dict[str, Any], environment: dict[str, Any]
) -> str:
    opts = {k: v for k, v in sorted(options.items()) if k not in IGNORED_OPTIONS}
    blob = json.dumps(
        {
            "reference": hashlib.sha256(reference.encode()).hexdigest(),
            "solution": hashlib.sha256(solution.encode()).hexdigest(),
            "backend": backend,
            "options": opts,
            "environment": environment,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class ResultCache:
    def __init__(self, directory: Path | None = None, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError(f"result cache max_entries must be >= 1, got {max_entries}")
        self.directory = directory
        self.max_entries = max_entries
        self._mem: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def _file(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}.json"

    def get(self, key: str) -> KernelEvalResponse | None:
        with self._lock:
            raw = self._mem.get(key)
            if raw is not None:
                self._mem.move_to_end(key)
        if raw is None:
            path = self._file(key)
            if path is not None and path.exists():
                try:
                    raw = json.loads(path.read_text())
                    self._remember(key, raw)
                except (OSError, json.JSONDecodeError):
                    raw = None
        if raw is None:
            self.misses += 1
            return None
        try:
            response = KernelEvalResponse.model_validate(raw)
        except ValueError:  # written by an older schema: treat as a miss
            self.misses += 1
            return None
        self.hits += 1
        return response

    @staticmethod
    def cacheable(response: KernelEvalResponse) -> bool:
        return response.outcome in CACHEABLE and not response.cached

    def put(self, key: str, response: KernelEvalResponse) -> bool:
        """Store ``response`` if its verdict belongs to the submission; returns whether it was stored."""
        if not self.cacheable(response):
            return False
        raw = response.model_dump(mode="json")
        self._remember(key, raw)
        path = self._file(key)
        if path is not None:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            try:
                tmp.write_text(json.dumps(raw))
                os.replace(tmp, path)
            except OSError as exc:
                logger.warning("result cache: cannot write %s: %s", path, exc)
        return True

    def _remember(self, key: str, raw: dict[str, Any]) -> None:
        evicted: list[str] = []
        with self._lock:
            self._mem[key] = raw
            self._mem.move_to_end(key)
            while len(self._mem) > self.max_entries:
                evicted.append(self._mem.popitem(last=False)[0])
        for old in evicted:
            path = self._file(old)
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()

    def __len__(self) -> int:
        with self._lock:
            return len(self._mem)
