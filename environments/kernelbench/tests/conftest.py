"""Fixtures: a real kernel service (CPU workers) on loopback that remembers who asked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kb_helpers import RunIds, Service
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service import make_app, start_server


@pytest.fixture(scope="session")
def kernel_service() -> Iterator[Service]:
    """One CPU worker, result cache on: an identical resubmission is answered with the verdict of its
    first evaluation, so a runner's and an environment's measurements of the same kernel agree."""
    service = KernelService(KernelServiceConfig(gpus=[], cpu_workers=1, result_cache=True))
    recorder = RunIds(make_app(service))
    with start_server(recorder) as server:
        yield Service(server.url, service, recorder)
