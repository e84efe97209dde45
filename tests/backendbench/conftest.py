"""Shared fixtures: the backendbench runner on sys.path, and one real BackendBench service per session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

RUNNER_ROOT = Path(__file__).resolve().parents[2] / "runners" / "backendbench-runner"
if str(RUNNER_ROOT) not in sys.path:
    sys.path.insert(0, str(RUNNER_ROOT))


@pytest.fixture(scope="session")
def backendbench_service_url() -> Iterator[str]:
    """A real HTTP service whose evaluations run in a real sandboxed worker subprocess."""
    from kernel_service.backendbench.service import BackendBenchService

    from benchmark_runner.service import make_app
    from benchmark_runner.service.server import start_server

    with start_server(make_app(BackendBenchService(workers=1))) as server:
        yield server.url
