"""Fixtures shared by the whole suite: real servers on 127.0.0.1 ephemeral ports, stopped after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from benchmark_runner.service.server import RunningServer, start_server
from benchmark_runner.testing.fake_llm import FakeLLMServer


@pytest.fixture
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio (the backend uvicorn and the runners use)."""
    return "asyncio"


@pytest.fixture
def serve_app() -> Iterator[Callable[..., RunningServer]]:
    """``srv = serve_app(app)`` starts ``app`` under uvicorn on an ephemeral port; stopped at teardown."""
    servers: list[RunningServer] = []

    def start(app: Any, **kwargs: Any) -> RunningServer:
        server = start_server(app, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def fake_llm() -> Iterator[Callable[..., FakeLLMServer]]:
    """``fake = fake_llm(script)`` starts a scripted OpenAI-compatible server (``fake.url``: base URL)."""
    fakes: list[FakeLLMServer] = []

    def start(script: Any, **kwargs: Any) -> FakeLLMServer:
        fake = FakeLLMServer(script, **kwargs).start()
        fakes.append(fake)
        return fake

    yield start
    for fake in reversed(fakes):
        fake.stop()
