"""Shared fixtures for the kernelbench runner tests: the runner package on the path and a real
kernel service (CPU workers) started once per session on an ephemeral port."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

RUNNER_ROOT = Path(__file__).resolve().parents[2] / "runners" / "kernelbench-runner"
if importlib.util.find_spec("kernelbench_runner") is None:  # not pip-installed: use the checkout
    sys.path.insert(0, str(RUNNER_ROOT))

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = RUNNER_ROOT / "kernelbench_runner" / "data" / "sample.jsonl"


@pytest.fixture(scope="session")
def kernel_service_url() -> Iterator[str]:
    """A real KernelService (CPU only, one eval worker) behind the real HTTP app; it also hosts the
    upstream-problem fixtures as service datasets (``--dataset-name level1``...)."""
    from kernel_service.service import KernelService, KernelServiceConfig

    from benchmark_runner.service import make_app, start_server

    service = KernelService(
        KernelServiceConfig(gpus=[], cpu_workers=1, dataset_sources=[FIXTURES / "upstream_problems.jsonl"])
    )
    with start_server(make_app(service)) as server:
        yield server.url


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def sample_file() -> Path:
    return SAMPLE
