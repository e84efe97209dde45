"""``kill -9`` of a real ``kernelbench-runner run`` (its embedded CPU kernel service) leaves nothing
behind: its worker processes (``unshare``, ``kernel_service.workers.worker``, the zygote, its sides) live in
sessions of their own, out of reach of the kill, and must die with the runner within 2 s; its temp dir
(``kernel-service-*``) must be removed by the next service that starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def processes_under(root: Path) -> dict[int, str]:
    """Processes whose command line, working dir or environment names ``root``: pid -> command line."""
    found = {}
    needle = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            hit = needle in cmdline
            if not hit:
                hit = os.readlink(f"/proc/{entry}/cwd").startswith(str(root))
            if not hit:
                hit = needle in Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if hit:
            found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
    return found


def work_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("kernel-service-*"))


def test_kill_9_of_the_runner_leaves_no_worker_and_no_temp_dir(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "runs"
    env = {**os.environ, "TMPDIR": str(tmp)}
    command = [sys.executable, "-m", "kernelbench_runner.cli", "run", "--model", "reference"]
    command += ["--run-id", "k", "--output-dir", str(out), "--backend", "torch"]
    command += ["--concurrency", "1", "--limit", "3"]  # no --service-url: the embedded service
    evaluations = out / "k" / "evaluations.jsonl"
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while not (evaluations.exists() and evaluations.read_bytes().count(b"\n") >= 1):
            assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stdout.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no evaluation written within 180 s"
            time.sleep(0.05)
        workers = processes_under(tmp)
        assert any("kernel_service.workers.worker" in c for c in workers.values()), workers
        assert len(work_dirs(tmp)) == 1
        os.killpg(proc.pid, signal.SIGKILL)  # the runner's process group: not the workers' sessions
        killed_at = time.monotonic()
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()

    while processes_under(tmp) and time.monotonic() - killed_at < 2.0:
        time.sleep(0.02)
    left = processes_under(tmp)
    assert not left, f"still alive {time.monotonic() - killed_at:.1f} s after the kill: {left}"
    assert len(work_dirs(tmp)) == 1  # a killed service cannot remove its own

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert work_dirs(tmp) == []  # the dead one's removed at start, its own at its end
    assert not processes_under(tmp)
