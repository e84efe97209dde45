"""One kernel service, both benchmarks: BackendBench requests through the real KernelService's HTTP API.

``POST /v1/evaluate`` picks the benchmark by ``kind`` (absent: KernelBench); a BackendBench request is
judged in the same sandboxed eval workers and answered as the generic ``EvalResultData`` (score = overall).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ks_sources as S
import pytest
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.schemas import EvalResultData
from benchmark_runner.service.app import API_KEY_HEADER, ServiceConfig, make_app
from benchmark_runner.service.server import start_server

CORRECT_RELU = (
    "import torch\n"
    "def relu_kernel_impl(x):\n"
    "    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)\n"
)
WRONG_RELU = "def relu_kernel_impl(x):\n    return x.abs()\n"


def bb_body(source: str, op: str = "relu", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "backendbench",
        "dataset": "backendbench-smoke",
        "suite": "smoke",
        "op": op,
        "source": source,
        "options": {"perf_trials": 3, "warmup": 1, "timeout_s": 60},
        **extra,
    }


def test_correct_and_wrong_backendbench_ops_via_v1_evaluate(client: httpx.Client) -> None:
    ok = client.post("/v1/evaluate", json=bb_body(CORRECT_RELU, task_id="smoke/relu"))
    assert ok.status_code == 200, ok.text
    good = EvalResultData.model_validate(ok.json())
    assert (good.status, good.outcome) == ("correct", "correct"), good.details.get("feedback")
    assert good.details["kind"] == "backendbench" and good.details["op"] == "relu"
    assert good.details["correctness"] == 1.0 and good.score == pytest.approx(good.details["overall"])
    assert good.score > 0 and good.details["n_correctness_inputs"] > 0 and good.details["n_correct"] > 0

    bad = client.post("/v1/evaluate", json=bb_body(WRONG_RELU))
    assert bad.status_code == 200, bad.text
    wrong = EvalResultData.model_validate(bad.json())
    assert (wrong.status, wrong.outcome, wrong.score) == ("incorrect", "incorrect", 0.0)
    assert wrong.details["correctness"] == 0.0 and "relu" in wrong.details["feedback"]

    # The same service still answers KernelBench requests, with or without an explicit kind.
    for kind in ({}, {"kind": "kernelbench"}):
        body = {"reference": S.REF_ADD, "solution": S.SOL_ADD_OK, "options": S.FAST, **kind}
        kb = client.post("/v1/evaluate", json=body)
        assert kb.status_code == 200, kb.text
        assert KernelEvalResponse.model_validate(kb.json()).outcome == "correct"


def test_backendbench_suite_tasks_from_the_kernel_service(client: httpx.Client) -> None:
    r = client.get("/v1/datasets/backendbench-smoke/tasks")
    assert r.status_code == 200, r.text
    tasks = r.json()["tasks"]
    ids = {t["id"] for t in tasks}
    assert {"smoke/relu", "smoke/add"} <= ids and all(t["suite"] == "smoke" for t in tasks)
    assert client.get("/v1/datasets/backendbench-nosuch/tasks").status_code == 404
    assert client.get("/v1/datasets/level1/tasks").status_code == 200  # KernelBench store still served


def test_bad_kind_and_bad_backendbench_fields_get_422(client: httpx.Client) -> None:
    r = client.post("/v1/evaluate", json={**bb_body(CORRECT_RELU), "kind": "tritonbench"})
    assert r.status_code == 422 and "kind must be one of" in r.text, r.text
    r = client.post("/v1/evaluate", json=bb_body(CORRECT_RELU, dataset="backendbench-opinfo"))
    assert r.status_code == 422 and "dataset must be 'backendbench-smoke'" in r.text, r.text
    r = client.post("/v1/evaluate", json={k: v for k, v in bb_body(CORRECT_RELU).items() if k != "source"})
    assert r.status_code == 422 and "source" in r.text, r.text


@pytest.fixture(scope="module")
def gated_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second service whose tenant may use only backendbench-smoke (the allowlist reads ``dataset``)."""
    service = KernelService(
        KernelServiceConfig(
            gpus=[], cpu_workers=1, compile_step=False, work_dir=tmp_path_factory.mktemp("ks-gated")
        )
    )
    config = ServiceConfig(api_keys={"k1": "acme"}, allowlist={"acme": ["backendbench-smoke"]})
    with start_server(make_app(service, config), startup_timeout=120) as server:
        yield server.url


def test_allowlist_gates_backendbench_datasets(gated_url: str, tmp_path: Path) -> None:
    with httpx.Client(base_url=gated_url, timeout=120, headers={API_KEY_HEADER: "k1"}) as c:
        ok = c.post("/v1/evaluate", json=bb_body(CORRECT_RELU))
        assert ok.status_code == 200 and ok.json()["outcome"] == "correct", ok.text
        denied = c.post("/v1/evaluate", json={"reference": S.REF_ADD, "solution": S.SOL_ADD_OK})
        assert denied.status_code == 403 and "'kernelbench'" in denied.text, denied.text
        assert c.get("/v1/datasets/backendbench-opinfo/tasks").status_code == 403
