"""Several eval workers on one GPU: untimed jobs together, a timed job alone (``gpu_lock``), with real
processes holding real ``flock`` locks, and which jobs count as timed."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

from kernel_service.gpu_lock import LOCK_DIR_ENV, GpuLock
from kernel_service.worker import times_anything


def _hold(path: str, exclusive: bool, delay: float, hold: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    time.sleep(delay)
    lock = GpuLock(Path(path))
    asked = time.monotonic()
    with lock.hold(exclusive):
        got = time.monotonic()
        time.sleep(hold)
        left = time.monotonic()
    out.put((delay, exclusive, asked, got, left))


def _run(path: Path, plan: list[tuple[bool, float, float]]) -> list[tuple[float, bool, float, float, float]]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(str(path), ex, d, h, out)) for ex, d, h in plan]
    for p in procs:
        p.start()
    rows = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    return sorted(rows)


def test_untimed_jobs_share_the_gpu_and_a_timed_job_waits_for_them_then_goes_before_later_ones(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "gpu-0.lock"
    # shared from 0.0 for 1.0 s; shared from 0.2 (overlaps it); exclusive asked at 0.4; shared asked at
    # 0.7, while the exclusive one waits: it must go after the exclusive one, not before it
    rows = _run(lock, [(False, 0.0, 1.0), (False, 0.2, 0.5), (True, 0.4, 0.5), (False, 0.7, 0.2)])
    first, second, timed, late = rows
    assert second[3] < first[4], "two untimed jobs held the GPU together"
    assert timed[3] >= max(first[4], second[4]), "the timed job started while untimed ones still ran"
    assert late[3] >= timed[4], "an untimed job asked later than a waiting timed job went before it"


def test_two_timed_jobs_never_overlap(tmp_path: Path) -> None:
    rows = _run(tmp_path / "gpu-0.lock", [(True, 0.0, 0.4), (True, 0.1, 0.4)])
    (_, _, _, got_a, left_a), (_, _, _, got_b, _) = rows
    assert got_b >= left_a


def test_a_gpu_of_its_own_takes_no_lock(tmp_path: Path) -> None:
    assert not GpuLock.from_env({"CUDA_VISIBLE_DEVICES": "0"}).shared_gpu
    assert not GpuLock.from_env({LOCK_DIR_ENV: str(tmp_path)}).shared_gpu  # no GPU: nothing to share
    lock = GpuLock.from_env({LOCK_DIR_ENV: str(tmp_path / "locks"), "CUDA_VISIBLE_DEVICES": "3"})
    assert lock.shared_gpu and (tmp_path / "locks" / "gpu-3.lock").exists()
    lock.close()


def test_which_jobs_time_anything() -> None:
    def bb(suite: str, **options: object) -> dict[str, object]:
        return {"op": "relu", "suite": suite, "options": options}

    assert times_anything({"kind": "kernelbench", "options": {}})
    assert not times_anything({"kind": "kernelbench", "options": {"measure_performance": False}})
    assert not times_anything({"kind": "kernelbench", "options": {"correctness_trials": 0}})
    assert not times_anything({"kind": "kernelbench", "mode": "compile"})
    assert not times_anything({"kind": "backendbench_batch", "requests": [bb("opinfo"), bb("facto")]})
    assert times_anything({"kind": "backendbench_batch", "requests": [bb("opinfo"), bb("smoke")]})
    assert not times_anything({"kind": "backendbench", "request": bb("torchbench", measure_performance=False)})
    assert times_anything({"kind": "backendbench", "request": bb("torchbench")})
    assert times_anything({"kind": "backendbench_batch", "requests": None})  # unclear: timed, the safe side
