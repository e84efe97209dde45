"""A failure outside the submission is not charged to it, and a lost worker is replaced in seconds (issue 50).

What the GPU half of this needs (a fault under MPS, a fault inside timing without it) runs in
``test_gpu_faults.py``; here, on the CPU, the same paths are caused for real: a worker killed before the
submission's code ran (as an OOM kill or a GPU refusing clients would end it) is retried on a fresh worker,
the answer says so and ``/v1/metrics`` counts it; a standby worker takes a dead one's place.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import ks_sources as S
import pytest
from kernel_service.judging.schemas import Outcome
from kernel_service.kernelbench.schemas import KernelEvalRequest
from kernel_service.replies import environment_fault, response_from
from kernel_service.service import KernelService
from kernel_service.workers.pool import Reply, WorkerConfig, WorkerPool

from benchmark_runner.service.server import RunningServer

#: A reference that names its worker (a file in the worker's temp dir) and then loads slowly: the test
#: kills that worker while it loads, before the submission's code was sent anywhere.
REF_SLOW_TO_LOAD = (
    """
import os, time
from pathlib import Path
Path(os.environ["TMPDIR"], "loading-reference").write_text("1")
time.sleep(4)
"""
    + S.REF_ADD
)


def _kill_the_loading_worker(service: KernelService, found: list[str], stop: threading.Event) -> None:
    """SIGKILL (its process group) the first eval worker seen loading ``REF_SLOW_TO_LOAD``."""
    pool = service.eval_pool
    assert isinstance(pool, WorkerPool)
    while not stop.is_set() and not found:
        for w in list(pool._all):
            if (w.tmp / "loading-reference").exists() and w.proc is not None:
                found.append(w.worker_id)
                os.killpg(w.proc.pid, signal.SIGKILL)
                return
        time.sleep(0.05)


def test_a_worker_killed_before_the_submission_ran_is_retried(
    kernel_server: RunningServer, client: httpx.Client
) -> None:
    service: KernelService = kernel_server.service  # type: ignore[attr-defined]
    before = client.get("/v1/metrics").json()
    killed: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_the_loading_worker, args=(service, killed, stop), daemon=True)
    killer.start()
    try:
        body = {"reference": REF_SLOW_TO_LOAD, "solution": S.SOL_ADD_OK, "options": S.FAST}
        got = client.post("/v1/evaluate", json={**body, "options": {**S.FAST, "use_result_cache": False}})
    finally:
        stop.set()
        killer.join()
    res = got.json()
    assert killed, "no worker was seen loading the reference"
    assert res["outcome"] == "correct", res
    assert len(res["retries"]) == 1 and "load_reference" in res["retries"][0], res["retries"]
    assert res["worker_id"] != killed[0]
    after = client.get("/v1/metrics").json()
    assert after["retries"] == before["retries"] + 1
    assert after["pools"]["eval"]["replacements"] >= before["pools"]["eval"]["replacements"] + 1


def test_which_failures_are_the_hosts() -> None:
    """Before the submission's code ran (no ``candidate`` message): the host's, retried; after: its own."""
    assert environment_fault(Reply(None, "startup", "worker eval-0-3 failed to start (eof)")) is not None
    died = Reply(None, "crash", "worker died with SIGKILL", phase="load")
    assert "during load" in (environment_fault(died) or "")
    assert environment_fault(Reply(None, "gpu_fault", "ctx", phase="load", candidate_started=True)) is None
    assert environment_fault(Reply(None, "crash", "died", phase="timing")) is None
    assert environment_fault(Reply(None, "timeout", "late", phase="load")) is None
    said = Reply({"outcome": "unknown_error", "environment_fault": "request 'setup' failed: CUDA busy"})
    assert environment_fault(said) == "request 'setup' failed: CUDA busy"
    assert environment_fault(Reply({"outcome": "execution_failure", "message": "its own"})) is None


def test_a_crash_after_the_submission_loaded_is_its_initialization_failure() -> None:
    """Under MPS a submission whose import or ``__init__`` faults the GPU takes the judge with it: that is
    the submission's ``initialization_failure``, not a sandbox error."""
    request = KernelEvalRequest(reference=S.REF_ADD, solution=S.SOL_ADD_OK)
    fault = Reply(None, "gpu_fault", "the GPU context failed under MPS", phase="load", candidate_started=True)
    assert response_from(fault, {}, request).outcome == Outcome.INITIALIZATION_FAILURE
    before = Reply(None, "gpu_fault", "the GPU context failed under MPS", phase="load")
    assert response_from(before, {}, request).outcome == Outcome.SANDBOX_ERROR


def _job(n: int, build_dir: Path) -> dict[str, Any]:
    return {
        "build_dir": str(build_dir),
        "job_id": f"job{n}",
        "kind": "kernelbench",
        "mode": "eval",
        "reference": S.REF_ADD,
        "solution": S.SOL_ADD_OK,
        "backend": "torch",
        "options": {**S.FAST, "measure_performance": False},
    }


def test_a_standby_worker_replaces_a_dead_one(tmp_path: Path) -> None:
    """The standby has imported torch already: the slot is judging again sooner than a fresh start, the
    worker reports when the submission's code was sent (``candidate_started``), and a new standby waits."""

    async def scenario() -> dict[str, Any]:
        pool = WorkerPool(WorkerConfig(root=tmp_path, standby=True), [None])
        await pool.start()
        try:
            first, _ = await pool.run(_job(1, tmp_path / "build"), 60)
            standby = pool._standby[None]
            (active,) = [w for w in pool._all if w is not standby]
            assert active.proc is not None
            os.killpg(active.proc.pid, signal.SIGKILL)
            dead, _ = await pool.run(_job(2, tmp_path / "build"), 60)
            t0 = time.monotonic()
            second, _ = await pool.run(_job(3, tmp_path / "build"), 60)
            return {
                "first": first,
                "dead": dead,
                "second": second,
                "standby_id": standby.worker_id,
                "next_standby": pool._standby[None].worker_id,
                "second_s": time.monotonic() - t0,
                "meter": pool.meter.snapshot(),
            }
        finally:
            await pool.close()

    got = anyio.run(scenario)
    first, dead, second = got["first"], got["dead"], got["second"]
    assert first.result is not None and first.result["outcome"] == "correct" and first.candidate_started
    assert dead.result is None and dead.failure == "crash" and not dead.candidate_started
    assert second.result is not None and second.result["outcome"] == "correct"
    assert second.worker_id == got["standby_id"], "the standby did not take the dead worker's place"
    assert got["next_standby"] not in (got["standby_id"], second.worker_id)
    assert got["meter"]["replacements"] >= 1 and got["meter"]["replace_s_max"] > 0


@pytest.mark.parametrize("hold", [False, True])
def test_a_held_worker_starts_cuda_only_when_told(tmp_path: Path, hold: bool) -> None:
    """A standby stops before CUDA (``standby``), and its start time excludes the hold."""
    from kernel_service.workers.pool import WorkerProcess

    w = WorkerProcess(WorkerConfig(root=tmp_path), None)
    w.spawn(hold=hold)
    try:
        time.sleep(0.5)
        info = w.wait_ready()
        assert info["type"] == "ready" and (info["held_s"] > 0) == hold
    finally:
        w.close()


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs two cores: one to hold on, one to judge on"
)
def test_a_standby_imports_off_the_judges_cores_and_moves_to_them_on_go(tmp_path: Path) -> None:
    """A standby's torch imports (its own and its zygote's) must not compete with the judges timing on the
    eval cores: it starts on the compile pool's (``KS_HOLD_CPUS``), and it and its zygote take the eval
    cores (``KS_CPUS``) once told to go."""
    from kernel_service.workers.pool import WorkerProcess
    from kernel_service.workers.worker import HOLD_CPUS_ENV

    hold, judge = sorted(os.sched_getaffinity(0))[:2]
    config = WorkerConfig(root=tmp_path, env={"KS_CPUS": str(judge), HOLD_CPUS_ENV: str(hold)})
    w = WorkerProcess(config, None)
    w.spawn(hold=True)
    try:
        assert w.proc is not None
        time.sleep(1.0)  # pinned at its first line; importing torch takes longer
        assert os.sched_getaffinity(w.proc.pid) == {hold}
        w.wait_ready()
        children = Path(f"/proc/{w.proc.pid}/task/{w.proc.pid}/children").read_text().split()
        assert children, "the worker started no zygote"
        assert os.sched_getaffinity(w.proc.pid) == {judge}
        assert {frozenset(os.sched_getaffinity(int(c))) for c in children} == {frozenset({judge})}
    finally:
        w.close()


def test_workers_killed_by_close_get_no_successor(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Closing the pool kills a worker in the middle of a job: the job is answered at once (its wait on
    the worker's pipe used to last to its deadline), and that death being the close's, no replacement
    (nor new standby) starts: it would outlive the pool (and log "did not start")."""
    slow = "import time\ntime.sleep(30)\n" + S.REF_ADD

    async def scenario() -> dict[str, Any]:
        pool = WorkerPool(WorkerConfig(root=tmp_path, standby=True), [None])
        await pool.start()
        running = asyncio.ensure_future(pool.run({**_job(1, tmp_path / "build"), "reference": slow}, 60))
        await asyncio.sleep(1.5)  # the worker is loading the reference
        started = list(pool._all)
        t0 = time.monotonic()
        await pool.close()
        reply, _ = await running
        answered_s = time.monotonic() - t0
        await asyncio.sleep(0.5)
        return {"reply": reply, "answered_s": answered_s, "left": list(pool._all), "started": started,
                "meter": pool.meter.snapshot()}  # fmt: skip

    got = anyio.run(scenario)
    assert got["reply"].result is None and got["reply"].failure == "crash", got["reply"]
    assert got["answered_s"] < 10, got["answered_s"]
    assert got["left"] == [], [w.worker_id for w in got["left"]]
    assert got["meter"]["replacements"] == 0
    assert all(w.proc is None or w.proc.poll() is not None for w in got["started"])
    assert "did not start" not in caplog.text
