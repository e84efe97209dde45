"""A runner subprocess held to a device call's budget: stopped the way a user's Ctrl-C stops it (SIGINT,
so it checkpoints), then its whole process group, and resumed by a later call with the same command."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


class _Terminated(Exception):
    """SIGTERM reached the bench script (a device step's ``timeout``): its run is stopped as at the budget."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def run_budgeted(
    cmd: list[str], log: Path, budget_s: float, env: dict[str, str] | None = None
) -> tuple[int | None, float, str]:
    """Run ``cmd`` (its output appended to ``log``), stopped at ``budget_s``, or when this process is sent
    SIGTERM: the run has a session of its own, so it would otherwise outlive the script and go on judging
    on a GPU that a later call of the same run then finds taken (its lock held). (exit code or None when
    stopped, wall seconds, the log's tail)."""
    t0 = time.perf_counter()
    previous = signal.signal(signal.SIGTERM, _terminated)
    with log.open("a") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
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
