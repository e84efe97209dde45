"""The worker's environment is built by name (issue 16): a secret in a variable named with any prefix the
old allow-list passed (``KS_``, ``TORCH``, ``PYTHON``, ``CUDA``, ...) reaches neither the submission nor
the answer. The service runs for real, with the secrets in its own environment; the submission prints its
whole environment (its output comes back in the answer) and tries the process's initial environment too."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import httpx
import pytest
from adv_helpers import FAST, REF
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import start_server

#: Every prefix the worker environment once let through (sandbox.ENV_ALLOW_PREFIXES before issue 16).
PREFIXES = ("KS_", "TORCH", "PYTHON", "CUDA", "NVIDIA_", "TRITON", "OMP_", "MKL_", "NCCL_", "CPATH")
MARKER = "envsecret" + secrets.token_hex(8)
SECRETS = {f"{p}SOMETHING_PASSWORD": f"{MARKER}-{i}" for i, p in enumerate(PREFIXES)}

DUMP = """
import os
import torch.nn as nn

print("ENV-DUMP", sorted(os.environ.items()))
try:
    print("INITIAL-ENV", open("/proc/self/environ", "rb").read())
except OSError as exc:
    print("INITIAL-ENV unreadable", exc)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(__import__("torch").randn(n, n))

    def forward(self, x):
        return x @ self.weight
"""


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    saved = {k: os.environ.get(k) for k in SECRETS}
    os.environ.update(SECRETS)
    try:
        service = KernelService(
            KernelServiceConfig(
                gpus=[], cpu_workers=1, compile_step=False, work_dir=tmp_path_factory.mktemp("env")
            )
        )
        with start_server(make_app(service), startup_timeout=120) as server:
            yield server.url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_secret_under_any_allowed_prefix_reaches_neither_submission_nor_answer(url: str) -> None:
    with httpx.Client(base_url=url, timeout=300) as c:
        r = c.post("/v1/evaluate", json={"reference": REF, "solution": DUMP, "options": FAST})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] == "correct", body["message"]
    printed = body.get("output") or ""
    assert "ENV-DUMP" in printed and "PATH" in printed  # the channel works: the environment came back
    assert MARKER not in r.text, [k for k, v in SECRETS.items() if v in r.text]
