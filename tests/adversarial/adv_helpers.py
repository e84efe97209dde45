"""Helpers shared by the adversarial test modules (issue 7).

Each case in ``cases/`` is a real solution file. Cheats must not come back ``correct`` (or, where the
output is legitimately right, must show no speed gain / must be flagged); escapes must leave no trace
of the service's secrets in the answer and no side effect on the host; after every case the service
must still judge an honest submission ``correct``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.service import KernelService

from benchmark_runner.service.server import RunningServer

CASES = Path(__file__).parent / "cases"
#: Small enough that the whole suite stays well under two minutes on two cores.
#: 30 timed pairs: a 2-core VM's timing noise must not decide a "no gain" verdict (each call is ~1 ms).
FAST = {"correctness_trials": 3, "perf_trials": 30, "warmup": 1, "timeout_s": 60}
#: File-size limit of the adversarial service's workers.
FSIZE = 64 << 20

REF = (CASES / "ref_matmul.py").read_text()


def source(case: str, **subs: object) -> str:
    text = (CASES / f"{case}.py").read_text()
    for key, value in subs.items():
        text = text.replace(f"__{key.upper()}__", str(value))
    return text


def evaluate(client: httpx.Client, solution: str, **options: Any) -> tuple[KernelEvalResponse, str]:
    r = client.post(
        "/v1/evaluate", json={"reference": REF, "solution": solution, "options": {**FAST, **options}}
    )
    assert r.status_code == 200, r.text
    return KernelEvalResponse.model_validate(r.json()), r.text


def assert_healthy(client: httpx.Client) -> None:
    """An honest submission is still judged right, and its speedup is not distorted by a leftover patch."""
    for _ in range(2):  # both CPU workers
        res, _ = evaluate(client, source("honest"))
        assert res.outcome == "correct", f"honest submission after the attack: {res.outcome}: {res.message}"
        assert res.speedup is not None and 0.4 < res.speedup < 2.5, f"honest speedup distorted: {res.speedup}"


def needs(hook: str) -> pytest.MarkDecorator:
    """A defence whose code exists (integrity.py / sandbox.py) but is not wired into the service yet."""
    return pytest.mark.xfail(strict=True, reason=f"needs hook: {hook} (see /work/notes/H7_TO_H3.md)")


@dataclass
class AdversarialService:
    server: RunningServer
    service: KernelService
    marker: str
    api_key: str
    keys_file: Path
    work_dir: Path
    outside_dir: Path
