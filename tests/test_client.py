"""ServiceClient over real HTTP: what it retries, what it never retries, and what its errors say."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from benchmark_runner.client import SERVICE_API_KEY_ENV, SERVICE_URL_ENV, ServiceClient, ServiceError
from benchmark_runner.schemas import EvalResultData, EvalStatus
from benchmark_runner.service import BenchmarkService, RunningServer, ServiceConfig, make_app, start_server

pytestmark = pytest.mark.anyio


class Flaky:
    """``/fail/{status}/{n}`` answers ``status`` n times, then 200; counts every hit per path."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.app = FastAPI()

        @self.app.post("/fail/{status}/{n}")
        async def fail(status: int, n: int, request: Request) -> JSONResponse:
            path = request.url.path
            self.hits[path] = self.hits.get(path, 0) + 1
            if self.hits[path] <= n:
                headers = {"Retry-After": "0"} if status == 429 else None
                return JSONResponse(
                    {"detail": f"scripted {status} #{self.hits[path]}"}, status, headers=headers
                )
            return JSONResponse({"ok": True, "hits": self.hits[path], "echo": await request.json()})

        @self.app.get("/not-json")
        async def not_json() -> Any:
            from fastapi.responses import PlainTextResponse

            return PlainTextResponse("hello")


@pytest.fixture(scope="module")
def flaky() -> Iterator[tuple[Flaky, str]]:
    """One server for the module: every test uses its own path, so hit counts never mix."""
    state = Flaky()
    with start_server(state.app) as server:
        yield state, server.url


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_retries_then_succeeds(flaky: tuple[Flaky, str], status: int) -> None:
    state, url = flaky
    async with ServiceClient(url, retries=3, backoff=0.01) as client:
        answer = await client.post(f"/fail/{status}/2", {"x": 1})
    assert answer == {"ok": True, "hits": 3, "echo": {"x": 1}}
    assert state.hits[f"/fail/{status}/2"] == 3


async def test_gives_up_after_retries_with_last_error(flaky: tuple[Flaky, str]) -> None:
    state, url = flaky
    async with ServiceClient(url, retries=2, backoff=0.01) as client:
        with pytest.raises(ServiceError) as info:
            await client.post("/fail/503/99", {})
    assert state.hits["/fail/503/99"] == 3
    assert "failed after 3 attempts" in str(info.value) and "scripted 503 #3" in str(info.value)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
async def test_never_retries_client_errors(flaky: tuple[Flaky, str], status: int) -> None:
    state, url = flaky
    async with ServiceClient(url, retries=3, backoff=0.01) as client:
        with pytest.raises(ServiceError) as info:
            await client.post(f"/fail/{status}/5", {})
    assert state.hits[f"/fail/{status}/5"] == 1
    assert info.value.status_code == status
    assert f"HTTP {status}" in str(info.value) and f"scripted {status} #1" in str(info.value)
    assert info.value.body == {"detail": f"scripted {status} #1"}


async def test_unknown_route_404_not_retried(flaky: tuple[Flaky, str]) -> None:
    _, url = flaky
    async with ServiceClient(url, retries=3, backoff=0.5) as client:
        start = time.monotonic()
        with pytest.raises(ServiceError, match="HTTP 404.*Not Found"):
            await client.get("/nowhere")
    assert time.monotonic() - start < 0.5  # no backoff was slept


async def test_non_json_success_is_a_clear_error(flaky: tuple[Flaky, str]) -> None:
    _, url = flaky
    async with ServiceClient(url, retries=0) as client:
        with pytest.raises(ServiceError, match="non-JSON: 'hello'"):
            await client.get("/not-json")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connection_refused_is_retried_until_the_server_comes_up() -> None:
    port = _free_port()
    state = Flaky()
    servers: list[RunningServer] = []

    async def start_later() -> None:
        await anyio.sleep(0.3)
        servers.append(await anyio.to_thread.run_sync(lambda: start_server(state.app, port=port)))

    try:
        async with ServiceClient(f"http://127.0.0.1:{port}", retries=6, backoff=0.1) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(start_later)
                answer = await client.post("/fail/500/0", {"late": True})
        assert answer["echo"] == {"late": True}
    finally:
        for server in servers:
            server.stop()


async def test_connection_refused_gives_up_naming_the_error() -> None:
    port = _free_port()
    async with ServiceClient(f"http://127.0.0.1:{port}", retries=1, backoff=0.01) as client:
        with pytest.raises(ServiceError, match=r"failed after 2 attempts: ConnectError"):
            await client.get("/healthz")


# ---- against a real make_app service ---------------------------------------------------------------


class EchoService(BenchmarkService):
    name = "echo"

    async def evaluate(self, request: Any) -> BaseModel:
        return EvalResultData(status=EvalStatus.CORRECT, score=1.0, details={"dataset": request.dataset})


async def test_against_service_auth_allowlist_and_validation(serve_app: Callable[..., RunningServer]) -> None:
    config = ServiceConfig(api_keys={"secret": "acme"}, allowlist={"acme": ["ds"]})
    url = serve_app(make_app(EchoService(), config)).url
    body = {"dataset": "ds", "task": {}, "generation": {"task_id": "t", "model": "m", "payload": "p"}}
    async with ServiceClient(url, api_key="secret", retries=2, backoff=0.01) as client:
        assert (await client.post("/v1/evaluate", body))["details"] == {"dataset": "ds"}
        with pytest.raises(ServiceError) as info:
            await client.post("/v1/evaluate", {**body, "dataset": "other"})
        assert info.value.status_code == 403 and "tenant 'acme' is not allowed to use dataset 'other'" in str(
            info.value
        )
        with pytest.raises(ServiceError) as info:
            await client.post("/v1/evaluate", {"dataset": "ds", "task": {}})
        assert info.value.status_code == 422 and "generation: Field required" in str(info.value)
    async with ServiceClient(url, retries=2, backoff=0.01) as anonymous:
        with pytest.raises(ServiceError, match="HTTP 401.*missing API key"):
            await anonymous.post("/v1/evaluate", body)


async def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVICE_URL_ENV, raising=False)
    with pytest.raises(ServiceError, match=f"pass --service-url or set {SERVICE_URL_ENV}"):
        ServiceClient.from_env()
    monkeypatch.setenv(SERVICE_URL_ENV, "http://example.invalid:1/")
    monkeypatch.setenv(SERVICE_API_KEY_ENV, "k")
    async with ServiceClient.from_env() as client:
        assert client.base_url == "http://example.invalid:1"
        assert client._http.headers["X-API-Key"] == "k"
