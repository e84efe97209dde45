"""One real kernel service (2 CPU eval workers) behind a real HTTP server per test module.

Cases that tamper with a warm worker (patches that outlive the job) get their own module, hence their
own service, so the other cases are judged by clean workers.

The service gets a real API keys file and a secret in its own environment, so the escape cases have
something to steal; the tests assert that nothing of it comes back.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import httpx
import pytest
from adv_helpers import FSIZE, AdversarialService
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.client import API_KEY_HEADER
from benchmark_runner.service.app import ServiceConfig, make_app
from benchmark_runner.service.server import start_server


@pytest.fixture(scope="module")
def adv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdversarialService]:
    marker = "advsecret" + secrets.token_hex(8)
    api_key = f"key-{marker}"
    base = tmp_path_factory.mktemp("adv")
    keys_file = base / "api-keys.yaml"
    keys_file.write_text(f"tenant-a: {api_key}\n")
    outside = base / "outside"
    outside.mkdir()
    work = base / "work"
    old = os.environ.get("ADV_SERVICE_API_KEY")
    os.environ["ADV_SERVICE_API_KEY"] = marker  # a secret in the service's own environment
    service = KernelService(
        KernelServiceConfig(gpus=[], cpu_workers=2, compile_step=False, work_dir=work, fsize_bytes=FSIZE)
    )
    app = make_app(service, ServiceConfig.from_files(keys_file, None))
    try:
        with start_server(app, startup_timeout=120) as server:
            yield AdversarialService(server, service, marker, api_key, keys_file, work, outside)
    finally:
        if old is None:
            os.environ.pop("ADV_SERVICE_API_KEY", None)
        else:
            os.environ["ADV_SERVICE_API_KEY"] = old


@pytest.fixture()
def client(adv: AdversarialService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=adv.server.url, timeout=300, headers={API_KEY_HEADER: adv.api_key}) as c:
        yield c
