"""What binds a worker to its own GPU and its own inter-process names, checked on the CPU (issue 29).

The GPU half (every GPU judging at once) is ``test_gpu_multi.py``; these are the two mechanisms under it:
each worker's ``/dev/shm`` is its own (the CUDA driver names inter-process events by PID there, and workers
in PID namespaces of their own have the same PIDs), and a worker's ``CUDA_VISIBLE_DEVICES`` names the GPU
the service counted, whatever the service's own variable says.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kernel_service.judging import sandbox
from kernel_service.workers.pool import worker_gpu

from benchmark_runner.service.server import RunningServer

CHILD = r"""
import os, sys, time
from kernel_service.judging.sandbox import private_shm
why = private_shm()
if why:
    sys.exit(why)
path = "/dev/shm/" + sys.argv[1]
with open(path, "w") as f:
    f.write(sys.argv[2])
time.sleep(1.0)  # both children hold their file at once
print(open(path).read(), sorted(os.listdir("/dev/shm")))
"""


def _unshare() -> None:
    launcher, why = sandbox.available_launcher("unshare")
    if launcher != "unshare":
        pytest.skip(f"unshare cannot make namespaces on this host: {'; '.join(why)}")


def test_workers_under_unshare_each_get_a_private_dev_shm(tmp_path: Path) -> None:
    _unshare()
    name = f"ks-probe-{uuid.uuid4().hex[:8]}"  # the same name in both: as two judges' PID 1
    prefix = sandbox.launch_prefix("unshare", writable=[tmp_path])
    children = [
        subprocess.Popen(
            [*prefix, sys.executable, "-c", CHILD, name, f"worker-{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [c.communicate(timeout=60) for c in children]
    for i, (child, (out, err)) in enumerate(zip(children, outs, strict=True)):
        assert child.returncode == 0, err
        content, listing = out.split(" ", 1)
        assert content == f"worker-{i}", out  # never the other worker's
        assert listing.strip() == repr([name]), listing  # an empty tmpfs: nothing of the host's
    assert not Path("/dev/shm", name).exists()  # nothing reached the host's /dev/shm


def test_the_service_workers_report_no_shared_dev_shm(kernel_server: RunningServer) -> None:
    service = kernel_server.service  # type: ignore[attr-defined]
    iso = service.eval_pool.ready_info["isolation"]
    assert not [n for n in iso["fallbacks"] if "/dev/shm" in n], iso


PROBE_LOOP = r"""
import sys
from pathlib import Path
from kernel_service.judging.harness import usable_build_dir
for _ in range(3000):
    assert usable_build_dir(Path(sys.argv[1]), Path(sys.argv[2])) == sys.argv[1]
print("ok")
"""


def test_workers_with_the_same_pid_probe_one_build_dir_at_once(tmp_path: Path) -> None:
    """Two workers (each PID 1 in its namespace) check the shared build cache is writable, at once: a
    probe file named by PID was unlinked by the other worker (FileNotFoundError, an unknown_error)."""
    _unshare()
    build = tmp_path / "build-cache" / "key"
    build.mkdir(parents=True)
    prefix = sandbox.launch_prefix("unshare", writable=[tmp_path])
    children = [
        subprocess.Popen(
            [*prefix, sys.executable, "-c", PROBE_LOOP, str(build), str(tmp_path / f"w{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert list(build.iterdir()) == []  # no probe left behind


@pytest.mark.parametrize(
    ("visible", "index", "expected"),
    [
        (None, 1, "1"),
        ("2,3", 0, "2"),
        ("2,3", 1, "3"),
        ("GPU-aaaa, GPU-bbbb", 1, "GPU-bbbb"),
    ],
)
def test_a_workers_gpu_is_the_one_the_service_counted(visible: str | None, index: int, expected: str) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert worker_gpu(index, env) == expected


def test_a_gpu_the_service_cannot_see_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"gpus: GPU 2 is not visible.*indices 0\.\.1"):
        worker_gpu(2, {"CUDA_VISIBLE_DEVICES": "4,5"})
