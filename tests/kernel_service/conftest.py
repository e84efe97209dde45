"""One real kernel service (2 CPU workers + 1 compile worker) behind a real HTTP server for the session.

The build cache is session-scoped, so the suite's only successful C++ compile happens once.

``serve_process``: one real ``kernel-service serve --gpus none`` subprocess (2 CPU workers) for the
session, shared by the tests that treat the service as a hostile or an impatient client would
(test_abandoned_work.py, test_hostile_requests.py): each reads the service's counters as differences,
so one start (a fresh torch import in the server and its workers) serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kernel_service.service import KernelService, KernelServiceConfig
from ks_serve import ServeProcess
from ks_sources import FIXTURES, MAX_BODY

from benchmark_runner.service.app import ServiceConfig, make_app
from benchmark_runner.service.server import RunningServer, start_server


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ks-build-cache")


@pytest.fixture(scope="session")
def kernel_server(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Iterator[RunningServer]:
    service = KernelService(
        KernelServiceConfig(
            gpus=[],
            cpu_workers=2,
            compile_workers=1,
            work_dir=tmp_path_factory.mktemp("ks-work"),
            build_cache_dir=build_cache,
            dataset_sources=[FIXTURES / "problems.jsonl"],
        )
    )
    app = make_app(service, ServiceConfig(max_body_bytes=MAX_BODY))
    with start_server(app, startup_timeout=120) as server:
        server.service = service  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="session")
def serve_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with ServeProcess(tmp_path_factory.mktemp("serve"), "--workers", "2") as srv:
        yield srv


@pytest.fixture()
def client(kernel_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=kernel_server.url, timeout=300) as c:
        yield c
