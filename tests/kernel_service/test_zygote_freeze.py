"""The zygote's freeze: while the judge times the reference on the CPU, nothing of the candidate may run,
daemons it started included (real zygote, real forked sides, real processes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_service.judging.sides import SideProcess, Zygote

DAEMON = """
import os, time
if os.fork() == 0:  # double fork + setsid: reparented to the zygote, in no process group of the side's
    os.setsid()
    if os.fork() == 0:
        with open("daemon.pid", "w") as f:
            f.write(str(os.getpid()))
        x = 0
        while True:
            x += 1
    os._exit(0)
os.wait()

def f():
    return None
"""


def side_request(tmp: Path) -> dict[str, object]:
    return {"tmp": str(tmp), "writable": [], "readable": [], "fsize": None, "nproc": None,
            "address_space": None, "landlock": True}  # fmt: skip


def state_and_cpu(pid: int) -> tuple[str, int]:
    """(state letter, utime + stime in clock ticks) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[11]) + int(fields[12])


@pytest.fixture()
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    z = Zygote(tmp_path / "zygote-log.txt", preimport=False)
    try:
        yield z
    finally:
        z.sweep()
        z.close()


def test_freeze_stops_the_side_and_its_daemons_but_not_the_other_side(zygote: Zygote, tmp_path: Path) -> None:
    deadline = time.monotonic() + 120
    cand = SideProcess(zygote, "candidate", side_request(tmp_path / "cand"), deadline)
    ref = SideProcess(zygote, "reference", side_request(tmp_path / "ref"), deadline)
    try:
        assert cand.request({"op": "load_fn", "source": DAEMON, "function": "f"}, "load")["ok"]
        pid_file = tmp_path / "cand" / "daemon.pid"
        for _ in range(200):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        daemon = int(pid_file.read_text())
        time.sleep(0.3)
        running = state_and_cpu(daemon)
        assert running[0] == "R" and running[1] > 0, running

        held = zygote.freeze(cand.pid)
        assert held >= 2  # the side and its daemon
        before = state_and_cpu(daemon)
        time.sleep(0.5)
        after = state_and_cpu(daemon)
        assert before[0] == after[0] == "T", (before, after)
        assert after[1] == before[1], "the daemon ran while frozen"
        assert state_and_cpu(cand.pid)[0] == "T"
        # the other side still answers while the candidate is held
        assert ref.request({"op": "sync"}, "sync").get("ok")

        zygote.thaw(cand.pid)
        time.sleep(0.3)
        assert state_and_cpu(daemon)[1] > after[1], "the daemon did not resume"
        assert cand.request({"op": "sync"}, "sync").get("ok")
    finally:
        cand.kill()
        ref.kill()
