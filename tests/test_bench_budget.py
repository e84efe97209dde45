"""bench/_budget.py: a budgeted run is stopped, checkpointing, at its budget and when its bench script is
terminated (a device step's ``timeout``) or killed (a device call's limit); none leaves the run going on
without it. Real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"

#: A run that checkpoints on Ctrl-C (SIGINT), as ``kernelbench-runner run`` does, and otherwise runs on.
RUN = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    marker = Path(sys.argv[1])
    def stop(*_):
        marker.write_text("checkpointed")
        sys.exit(130)
    signal.signal(signal.SIGINT, stop)
    Path(sys.argv[2]).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from _budget import run_budgeted
    tmp = Path(sys.argv[2])
    code, wall, tail = run_budgeted(
        [sys.executable, str(tmp / "run.py"), str(tmp / "marker"), str(tmp / "started")], tmp / "run.log", float(sys.argv[3])
    )
    (tmp / "result").write_text(f"{code} {wall:.1f}")
    """
)


def _script(tmp_path: Path, budget_s: float) -> subprocess.Popen[bytes]:
    (tmp_path / "run.py").write_text(RUN)
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(BENCH), str(tmp_path), str(budget_s)])


def _wait_for(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running: a zombie (exited, not yet reaped by whoever adopted it) is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_run_is_stopped_and_checkpoints_at_its_budget(tmp_path: Path) -> None:
    script = _script(tmp_path, budget_s=3)  # past the run's start on a loaded host
    assert script.wait(timeout=60) == 0
    assert (tmp_path / "marker").read_text() == "checkpointed"
    assert (tmp_path / "result").read_text().startswith("None ")


def test_a_terminated_script_stops_its_run_instead_of_leaving_it_going(tmp_path: Path) -> None:
    script = _script(tmp_path, budget_s=600)
    _wait_for(tmp_path / "started")
    run_pid = int((tmp_path / "started").read_text())
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=60) == 0  # the script goes on to write what it has
    assert (tmp_path / "marker").read_text() == "checkpointed"
    assert (tmp_path / "result").read_text().startswith("None ")
    assert not _alive(run_pid)


def test_a_killed_script_stops_its_run_too(tmp_path: Path) -> None:
    script = _script(tmp_path, budget_s=600)
    _wait_for(tmp_path / "started")
    run_pid = int((tmp_path / "started").read_text())
    script.kill()
    script.wait(timeout=30)
    _wait_for(tmp_path / "marker")  # the run was interrupted, and checkpointed
    deadline = time.monotonic() + 30
    while _alive(run_pid):
        assert time.monotonic() < deadline, "the run outlived its killed bench script"
        time.sleep(0.05)
