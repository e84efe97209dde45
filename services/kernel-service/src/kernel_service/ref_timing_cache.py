"""Reference timings kept between evaluations of the same problem on the same host and software."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from .judging.schemas import TimingStats

logger = logging.getLogger(__name__)


class RefTimingCache:
    """Reference timings by (problem source hash, hardware, torch version, timing config).

    Trade-off: a cached reference time skips half of the timing work but is not interleaved with the
    candidate's trials, so slow drift (clocks, thermals, other tenants) between the two runs is not
    cancelled. Only valid on identical hardware and software, which the key enforces; disable per
    request (``reuse_reference_timing: false``) or per service when exact pairing matters.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            try:
                self._data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                logger.warning("ignoring unreadable reference timing cache %s", path)

    @staticmethod
    def key(reference: str, hardware: str, torch_version: str, config: dict[str, Any]) -> str:
        blob = json.dumps([hashlib.sha256(reference.encode()).hexdigest(), hardware, torch_version, config])
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> TimingStats | None:
        with self._lock:
            raw = self._data.get(key)
        return TimingStats.model_validate(raw) if raw else None

    def put(self, key: str, stats: TimingStats) -> None:
        with self._lock:
            self._data[key] = stats.model_dump()
            if self.path is not None:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(self._data))
                os.replace(tmp, self.path)
