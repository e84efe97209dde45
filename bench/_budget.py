"""A runner subprocess held to a device call's budget: stopped the way a user's Ctrl-C stops it (SIGINT,
so it checkpoints), then its whole process group, and resumed by a later call with the same command."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path


class _Terminated(Exception):
    """SIGTERM reached the bench script (a device step's ``timeout``): its run is stopped as at the budget."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _interrupt_when_orphaned() -> None:
    """In the run's process, before it execs: SIGINT (its checkpointing stop) when the bench script dies,
    however it dies (a device call's limit kills it outright)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)


def run_budgeted(
    cmd: list[str], log: Path, budget_s: float, env: dict[str, str] | None = None
) -> tuple[int | None, float, str]:
    """Run ``cmd`` (its output appended to ``log``), stopped at ``budget_s``, when this process is sent
    SIGTERM, or when it dies: the run has a session of its own, so it would otherwise outlive the script and
    go on judging on a GPU where a later call of the same run then finds it holding the run's lock. (exit
    code or None when stopped, wall seconds, the log's tail)."""
    t0 = time.perf_counter()
    previous = signal.signal(signal.SIGTERM, _terminated)
    with log.open("a") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_interrupt_when_orphaned)  # fmt: skip
        try:
            code: int | None = proc.wait(timeout=budget_s)
        except (subprocess.TimeoutExpired, _Terminated) as stop:
            why = "terminated" if isinstance(stop, _Terminated) else f"budget of {budget_s:.0f}s reached"
            print(f"{why}: stopping the run (resume with the same command)", flush=True)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop short
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):  # workers left behind, if any
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        finally:
            signal.signal(signal.SIGTERM, previous)
    return code, time.perf_counter() - t0, log.read_text()[-3000:]
