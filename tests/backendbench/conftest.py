"""Shared fixtures: the backendbench runner on sys.path, and one real kernel service per session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RUNNER_ROOT = Path(__file__).resolve().parents[2] / "runners" / "backendbench-runner"
if str(RUNNER_ROOT) not in sys.path:
    sys.path.insert(0, str(RUNNER_ROOT))


@pytest.fixture(scope="session")
def backendbench_service_url() -> Iterator[str]:
    """The runner's service (the kernel service) over real HTTP; evaluations run in a sandboxed worker."""
    from backendbench_runner.service import make_service

    from benchmark_runner.service import make_app
    from benchmark_runner.service.server import start_server

    with start_server(make_app(make_service())) as server:
        yield server.url


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The roles of the side processes the judge forks from now on, in order (``Run.fork``, still run)."""
    from kernel_service.judging.judging import Run

    roles: list[str] = []
    fork = Run.fork

    def spy(self: Run, role: str, build_dir: str) -> Any:
        roles.append(role)
        return fork(self, role, build_dir)

    monkeypatch.setattr(Run, "fork", spy)
    return roles
