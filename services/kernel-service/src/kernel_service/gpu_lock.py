"""One GPU shared by several eval workers: untimed jobs together, a timed job alone.

A job that times anything must have the GPU to itself: no other judge's work, and no other job's side
processes, whose submissions may run GPU work whenever they like (a kernel of one job running during
another's reference timing would inflate that job's speedup). Untimed jobs (BackendBench's opinfo suite,
correctness-only requests) lose nothing by sharing it, and a suite's correctness pass is mostly host
work (Python in the judge and the sides), which several workers then do at once.

So each worker of a shared GPU holds a ``flock`` on that GPU's lock file for a whole job, shared or
exclusive, and releases it only after the job's side processes are gone. A waiting exclusive holder
takes a turnstile first, so that a stream of shared jobs cannot starve it. The worker opens the files
before it restricts itself; its side processes never see them.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The service sets this (a directory) when several eval workers share a GPU.
LOCK_DIR_ENV = "KS_GPU_LOCK_DIR"


class GpuLock:
    """The lock of one GPU (``None`` paths: a GPU of this worker's own, nothing to take)."""

    def __init__(self, path: Path | None) -> None:
        self._fd: int | None = None
        self._turn: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._turn = os.open(f"{path}.turn", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> GpuLock:
        """The lock of the GPU this worker was given (``CUDA_VISIBLE_DEVICES``), when it is shared."""
        env = os.environ if environ is None else environ
        where, gpu = env.get(LOCK_DIR_ENV), env.get("CUDA_VISIBLE_DEVICES", "")
        if not where or not gpu:
            return cls(None)
        return cls(Path(where) / f"gpu-{gpu.replace(',', '-')}.lock")

    @property
    def shared_gpu(self) -> bool:
        return self._fd is not None

    @contextmanager
    def hold(self, exclusive: bool) -> Iterator[None]:
        """The GPU for one job: alone (``exclusive``) or with other untimed jobs."""
        if self._fd is None or self._turn is None:
            yield
            return
        fcntl.flock(self._turn, fcntl.LOCK_EX)  # behind a waiting exclusive holder, not before it
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in (self._fd, self._turn):
            if fd is not None:
                os.close(fd)
        self._fd = self._turn = None
