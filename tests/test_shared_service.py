"""A runner's embedded service shared by a whole process (what an RL environment worker uses): started
once, served over real loopback HTTP from a background thread, stopped on request; and the client for
one unit of work, which names its run in every request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from benchmark_runner.base import BenchmarkRunner
from benchmark_runner.embedded import open_runner_service, shared_service_url, stop_shared_services
from benchmark_runner.examples.arithmetic import ArithmeticRunner
from benchmark_runner.service import start_server

pytestmark = pytest.mark.anyio


def test_one_service_per_runner_per_process_until_stopped() -> None:
    try:
        url = shared_service_url(ArithmeticRunner)
        assert shared_service_url(ArithmeticRunner) == url  # started once
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    finally:
        stop_shared_services()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")
    try:
        again = shared_service_url(ArithmeticRunner)  # a later caller gets a fresh one
        assert httpx.get(f"{again}/healthz").status_code == 200
    finally:
        stop_shared_services()


def test_a_runner_without_a_service_is_refused() -> None:
    class Bare(BenchmarkRunner):
        NAME = "bare"

    with pytest.raises(RuntimeError, match="bare ships no embedded service"):
        shared_service_url(Bare)


async def test_the_client_names_its_run_and_uses_the_given_url() -> None:
    seen: list[dict[str, str]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b"{}"})

    with start_server(app) as server:
        async with open_runner_service(ArithmeticRunner, server.url + "/", "group-7/task-1") as client:
            assert await client.get("/healthz") == {}
    assert seen[0]["x-run-id"] == "group-7/task-1"
