"""Fixtures: a real kernel service (CPU workers) on loopback that remembers who asked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bb_helpers import RunIds, Service
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service import make_app, start_server


@pytest.fixture(scope="session")
def kernel_service() -> Iterator[Service]:
    """One CPU worker, as ``backendbench-runner`` embeds it (no compile step: kernels are modules)."""
    service = KernelService(KernelServiceConfig(gpus=[], cpu_workers=1, compile_step=False))
    recorder = RunIds(make_app(service))
    with start_server(recorder) as server:
        yield Service(server.url, service, recorder)
