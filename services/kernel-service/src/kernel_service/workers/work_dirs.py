"""The service's own work dir when none is configured, and the sweep of dead services' work dirs: a
``kill -9`` leaves a service's temp dir behind, so the next service of this user removes those whose
process is gone (named by PID namespace, pid and start time, so a reused pid is told apart).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

WORK_DIR_PREFIX = "kernel-service-"
_OWNED = re.compile(rf"^{re.escape(WORK_DIR_PREFIX)}(\d+)\.(\d+)\.(\d+)-")


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None when there is no such process: with the pid,
    it names one process (a pid alone may be reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def make_work_dir(root: Path | None = None) -> Path:
    """A fresh work dir under ``root`` (default: the system temp dir), named after this process."""
    tag = f"{_pid_namespace()}.{os.getpid()}.{_start_time(os.getpid()) or 0}"
    return Path(tempfile.mkdtemp(prefix=f"{WORK_DIR_PREFIX}{tag}-", dir=root))


def sweep_dead_work_dirs(root: Path | None = None) -> list[Path]:
    """Remove the work dirs (``make_work_dir``) of services whose process is gone; returns them.

    Only dirs of this user, made in this PID namespace (another one's pids mean other processes), whose
    process is dead or is another process now (its start time differs). Others are left alone.
    """
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    ns, uid = _pid_namespace(), os.geteuid()
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _OWNED.match(entry.name)
        if m is None or int(m.group(1)) != ns:
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        if st.st_uid != uid or not entry.is_dir() or entry.is_symlink():
            continue
        pid, started = int(m.group(2)), int(m.group(3))
        if pid == os.getpid() or _start_time(pid) == started:
            continue  # alive
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
            logger.info("removed %s: the service that made it (pid %d) is gone", entry, pid)
    return removed
