"""Clients that go away cancel their work: a real ``kernel-service serve --gpus none`` (2 CPU workers),
five clients that close their connections 0.5 s after sending slow submissions, and the service's own
metrics (``GET /v1/metrics``) to tell what their jobs cost after that. A job still waiting for a worker
never starts; a running one stops at its next phase boundary; an evaluation another waiting request
shares goes on."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest
from ks_serve import ServeProcess, post
from ks_sources import REF_ADD

#: Each call of the candidate takes 0.25 s: a job is ~3 correctness calls + ~12 timed ones, several
#: seconds, in phases (load, correctness, probe, timing) of about a second or more each.
SOL_SLOW = """
import time
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        time.sleep(0.25)
        return torch.add(a, b)
"""
OPTIONS = {"correctness_trials": 3, "perf_trials": 10, "warmup": 1, "timeout_s": 120}


def slow_request(seed: int) -> dict[str, Any]:
    return {"reference": REF_ADD, "solution": SOL_SLOW, "options": {**OPTIONS, "seed": seed}}


@pytest.fixture(scope="module")
def service(serve_process: ServeProcess) -> ServeProcess:
    """The session's ``kernel-service serve`` subprocess (conftest.py), shared with test_hostile_requests.py."""
    return serve_process


def eval_pool(service: ServeProcess) -> dict[str, Any]:
    return dict(service.metrics()["pools"]["eval"])


def wait_idle(service: ServeProcess, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        pool = eval_pool(service)
        if pool["jobs_running"] == 0:
            return pool
        assert time.monotonic() < deadline, f"the service is still busy: {pool}"
        time.sleep(0.05)


def send_and_leave(service: ServeProcess, bodies: list[dict[str, Any]], after_s: float) -> None:
    """Open a connection per body, send it, and close them all ``after_s`` later without reading."""
    socks = []
    for body in bodies:
        sock = socket.create_connection(("127.0.0.1", service.port))
        sock.sendall(post("/v1/evaluate", json.dumps(body).encode()))
        socks.append(sock)
    time.sleep(after_s)
    for sock in socks:
        sock.close()


def test_abandoned_requests_are_cancelled_and_cost_less_than_one_job(service: ServeProcess) -> None:
    with httpx.Client(base_url=service.url, timeout=300) as client:
        before = wait_idle(service)
        t0 = time.monotonic()
        honest = client.post("/v1/evaluate", json=slow_request(seed=1))
        job_wall = time.monotonic() - t0
        assert honest.status_code == 200 and honest.json()["outcome"] == "correct", honest.text
        one_job = wait_idle(service)["work_s"] - before["work_s"]
        assert one_job > 2.0, one_job  # the job is slow enough for the measure to mean something

        start = service.metrics()
        send_and_leave(service, [slow_request(seed=100 + i) for i in range(5)], after_s=0.5)
        left = eval_pool(service)  # the clients are gone from here on
        t_left = time.monotonic()
        deadline = t_left + 60
        while service.metrics()["cancelled"] - start["cancelled"] < 5 or eval_pool(service)["jobs_running"]:
            assert time.monotonic() < deadline, service.metrics()
            time.sleep(0.05)
        idle_after = time.monotonic() - t_left
        end = service.metrics()
        pool = end["pools"]["eval"]
        after_leaving = pool["work_s"] - left["work_s"]
        assert after_leaving < one_job, (after_leaving, one_job, end)
        assert idle_after < job_wall, (idle_after, job_wall)
        assert end["http"]["abandoned"] - start["http"]["abandoned"] == 5
        cancelled_running = pool["cancelled_running"] - start["pools"]["eval"]["cancelled_running"]
        cancelled_queued = pool["cancelled_queued"] - start["pools"]["eval"]["cancelled_queued"]
        assert cancelled_running + cancelled_queued == 5
        assert cancelled_running >= 1 and cancelled_queued >= 1, pool  # 2 workers, 5 requests
        assert pool["work_after_cancel_s"] - start["pools"]["eval"]["work_after_cancel_s"] < one_job

        # The workers stayed warm and judge the next submission as before.
        t0 = time.monotonic()
        again = client.post("/v1/evaluate", json=slow_request(seed=2))
        assert again.status_code == 200 and again.json()["outcome"] == "correct", again.text
        assert time.monotonic() - t0 < 3 * job_wall


def test_a_shared_evaluation_goes_on_for_the_request_still_waiting(service: ServeProcess) -> None:
    """Two identical requests share one evaluation (result cache on): the first client leaves, the
    second still gets the verdict, and nothing was cancelled."""
    with httpx.Client(base_url=service.url, timeout=300) as client:
        wait_idle(service)
        start = service.metrics()
        body = slow_request(seed=42)
        leaver = socket.create_connection(("127.0.0.1", service.port))
        leaver.sendall(post("/v1/evaluate", json.dumps(body).encode()))
        time.sleep(0.3)  # the leaver's evaluation is under way
        answers: list[httpx.Response] = []
        stayer = threading.Thread(target=lambda: answers.append(client.post("/v1/evaluate", json=body)))
        stayer.start()
        deadline = time.monotonic() + 30
        while service.metrics()["joined_in_flight"] == start["joined_in_flight"]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        leaver.close()  # the stayer waits for the same evaluation
        stayer.join(300)
        (answer,) = answers
        assert answer.status_code == 200 and answer.json()["outcome"] == "correct", answer.text
        end = client.get("/v1/metrics").json()
        assert end["joined_in_flight"] - start["joined_in_flight"] == 1
        assert end["cancelled"] == start["cancelled"]
        assert end["pools"]["eval"]["jobs_done"] - start["pools"]["eval"]["jobs_done"] == 1
        assert end["http"]["abandoned"] - start["http"]["abandoned"] == 1
