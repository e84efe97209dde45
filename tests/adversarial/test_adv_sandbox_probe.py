"""The sandbox probe runs what a worker's launch runs (issue 55).

In a podman container (and in Docker with seccomp relaxed) namespaces work but a fresh /proc cannot be
mounted, because the runtime masks parts of the container's /proc: ``bwrap ... --proc /proc`` fails with
"Can't mount proc on /newroot/proc: Operation not permitted" and ``unshare --mount-proc`` fails too. The
old probe ran a lighter bwrap command, which passed, so the service chose bwrap and failed at its first
worker. Here fake ``bwrap`` and ``unshare`` on PATH fail exactly so (everything else is passed to the
real ones): ``auto`` must take bwrap without its PID namespace, say why, and a worker must start and
judge under it; a named launcher must refuse instead of degrading.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from adv_helpers import FAST, REF, source
from kernel_service.judging import sandbox
from kernel_service.workers.pool import WorkerConfig, WorkerPool, resolve_launcher

REAL_BWRAP = shutil.which("bwrap")
REAL_UNSHARE = shutil.which("unshare")
pytestmark = pytest.mark.skipif(
    REAL_BWRAP is None or REAL_UNSHARE is None or not sys.platform.startswith("linux"),
    reason="needs bubblewrap and unshare (apt-get install bubblewrap)",
)

PROC_DENIED = "Can't mount proc on /newroot/proc: Operation not permitted"


def _fake(directory: Path, name: str, real: str | None, refuse_when: str, message: str) -> None:
    script = directory / name
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        f'  if [ "$a" = {refuse_when} ]; then echo {shlex.quote(message)} >&2; exit 1; fi\n'
        "done\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)


def _forget_probe() -> None:
    sandbox.available_launcher.cache_clear()
    sandbox._without_pid.clear()


@pytest.fixture()
def masked_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A PATH on which bwrap and unshare behave as in a container that masks /proc."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake(bin_dir, "bwrap", REAL_BWRAP, "--proc", f"bwrap: {PROC_DENIED}")
    _fake(
        bin_dir,
        "unshare",
        REAL_UNSHARE,
        "--mount-proc",
        "unshare: mount /proc failed: Operation not permitted",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _forget_probe()
    yield bin_dir
    _forget_probe()


def test_the_old_probe_passed_where_the_launch_fails(masked_proc: Path) -> None:
    old_probe = ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--unshare-all", "--", "true"]
    assert subprocess.run(old_probe, capture_output=True, check=False).returncode == 0
    failure = sandbox.try_launch("bwrap", pid_namespace=True)
    assert failure is not None and PROC_DENIED in failure


def test_auto_takes_bwrap_without_a_pid_namespace_and_says_why(masked_proc: Path, tmp_path: Path) -> None:
    launcher, why = sandbox.available_launcher("auto")
    assert launcher == "bwrap"
    assert any(PROC_DENIED in w for w in why), why
    assert any(w.startswith("unshare with a PID namespace fails") for w in why), why
    assert sandbox.namespaces("bwrap") == ("net", "mount", "ipc", "uts")
    prefix = sandbox.launch_prefix("bwrap", writable=[tmp_path / "w"], hidden=[tmp_path / "h"])
    assert "--proc" not in prefix and "--unshare-pid" not in prefix
    assert prefix[prefix.index("--bind") : prefix.index("--bind") + 3] == ["--bind", "/proc", "/proc"]
    assert "--unshare-net" in prefix and prefix[prefix.index("/dev/shm") - 1] == "--tmpfs"


def test_a_named_launcher_refuses_rather_than_degrades(masked_proc: Path) -> None:
    with pytest.raises(RuntimeError, match="sandbox='bwrap' requested") as info:
        resolve_launcher("bwrap")
    assert PROC_DENIED in str(info.value)
    assert "bwrap without a PID namespace works: sandbox='auto' would use it" in str(info.value)
    with pytest.raises(RuntimeError, match="unshare with a PID namespace fails here: unshare: mount /proc"):
        resolve_launcher("unshare")


def test_nothing_works_means_none_with_every_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bwrap", "unshare"):
        _fake(bin_dir, name, "/bin/false", "--", f"{name}: Operation not permitted")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _forget_probe()
    try:
        launcher, why = sandbox.available_launcher("auto")
    finally:
        _forget_probe()
    assert launcher == "none"
    assert [w.split(" fails here")[0] for w in why] == [
        "bwrap with a PID namespace",
        "unshare with a PID namespace",
        "bwrap without a PID namespace",
        "unshare without a PID namespace",
    ]


def test_a_worker_starts_and_judges_under_the_launch_that_works(masked_proc: Path, tmp_path: Path) -> None:
    async def main() -> dict[str, object]:
        pool = WorkerPool(WorkerConfig(root=tmp_path / "work", env={"OMP_NUM_THREADS": "1"}), [None])
        await pool.start()
        try:
            job = {
                "job_id": "probe-1",
                "mode": "eval",
                "reference": REF,
                "solution": source("honest"),
                "backend": "torch",
                "options": FAST,
                "build_dir": str(tmp_path / "work" / "build-cache" / "b"),
            }
            reply, _ = await pool.run(job, timeout=300)
        finally:
            await pool.close()
        assert reply.result is not None, (reply.failure, reply.message, reply.output)
        return reply.result

    result = asyncio.run(main())
    assert result["outcome"] == "correct", result
    iso = result["isolation"]
    assert isinstance(iso, dict)
    assert iso["launcher"] == "bwrap"
    assert (iso["pid_namespace"], iso["net_namespace"], iso["mount_namespace"]) == (False, True, True)
    assert iso["private_shm"] is True
    assert any(PROC_DENIED in f for f in iso["fallbacks"]), iso["fallbacks"]
    assert any(f.startswith("no PID namespace") for f in iso["fallbacks"]), iso["fallbacks"]


def test_a_python_installed_under_tmp_is_bound_back_and_the_rest_of_tmp_stays_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured from a clean clone in /tmp: bwrap's ``--tmpfs /tmp`` hid the virtualenv, every bwrap
    launch failed ("execvp .../.venv/bin/python: No such file or directory") and auto fell back to
    unshare. What runs the worker is bound back read-only, nothing else of /tmp."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site), str(site / "pkg")])
    prefix = sandbox.launch_prefix("bwrap", writable=[tmp_path / "w"], pid_namespace=True)
    binds = [prefix[i + 1] for i, a in enumerate(prefix) if a == "--ro-bind"]
    assert str(site.resolve()) in binds
    assert str((site / "pkg").resolve()) not in binds  # inside one bound already
    assert not [b for b in binds if b.startswith(str(tmp_path / "other"))]
    assert prefix.index("--tmpfs", prefix.index("/dev/shm")) < prefix.index(str(site.resolve()))
    result = subprocess.run(
        [*prefix, sys.executable, "-c", f"import os; print(os.path.isdir({str(site)!r}), os.listdir({str(tmp_path)!r}))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(" ", 1)[0] == "True"
    assert "other" not in result.stdout, result.stdout
