"""Work a compile worker does in a forked child of its own: a submission's import and builds, then its lazy run.

Why a child: a compile worker imports one submission after another, and a submission's code runs where it
is imported. In the worker itself it could write anything the worker may write (the whole build cache:
another submission's sources and extensions, planted before that one loads them) and leave state behind
for the next job. A child ends with its job, and :func:`confine` narrows what it may write, with a Landlock
layer of its own on top of the worker's, to its job's dirs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..judging import sandbox

_PR_SET_PDEATHSIG = 1


def confine(writable: list[Path]) -> None:
    """In a forked child: write only under ``writable`` (its job's dirs) from now on, it and its children
    (the compilers); its temp dir, home and working directory the first of them. Reads stay as the worker's
    policy has them. Where the worker has no Landlock, nothing is narrowed (the worker's own report says so).

    The working directory too: model-written solutions build into a relative dir (``os.makedirs(
    "cuda_extensions")``, ``build_directory="tmp_ext"``: 5 of CUDA-L1's first release), which in the
    worker's own directory the child may not write; the build then failed here, the solution fell back,
    and each of its sides (whose working directory is their own) built it on the GPU worker, 14-61 s."""
    base = sandbox.policy_from_env(writable[0])
    os.chdir(writable[0])
    os.environ["TMPDIR"] = os.environ["HOME"] = str(writable[0])
    os.environ["XDG_CACHE_HOME"] = str(writable[0] / "cache")
    tempfile.tempdir = str(writable[0])
    if base.landlock and sandbox.landlock_abi() >= 1:
        policy = sandbox.HardenPolicy(writable=writable, readable=base.readable)
        sandbox.apply_landlock(policy, sandbox.IsolationReport())


def run_forked(work: Callable[[], None], timeout_s: float) -> int | None:
    """Run ``work`` in a forked child; its exit status (0: ``work`` returned, 1: it raised, else the
    signal that ended it, negated), or None when it was still running after ``timeout_s`` and was killed.
    The child dies with this process (a worker killed at its job's timeout leaves no child running)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is what the parent reads back
        code = 1
        try:
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            work()
            code = 0
        except BaseException:  # noqa: BLE001 - its failure is the status the parent reads
            pass
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)
