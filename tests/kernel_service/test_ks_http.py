"""The kernel service through its real HTTP API: every outcome, recovery after faults, limits."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import ks_sources as S
import pytest
from kernel_service.kernelbench.schemas import KernelEvalResponse
from ks_sources import FAST, MAX_BODY

from benchmark_runner.service.server import RunningServer


def evaluate(client: httpx.Client, reference: str, solution: str, **kw: Any) -> KernelEvalResponse:
    options = {**FAST, **kw.pop("options", {})}
    body = {"reference": reference, "solution": solution, "options": options, **kw}
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 200, r.text
    return KernelEvalResponse.model_validate(r.json())


def assert_healthy(client: httpx.Client) -> None:
    """The service still answers an honest submission correctly."""
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK)
    assert res.outcome == "correct", res.message


def test_correct_torch_solution(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_MATMUL, S.SOL_MATMUL_OK)
    assert res.outcome == "correct", res.message
    assert res.speedup is not None and res.speedup > 0
    assert res.reward == pytest.approx(res.speedup - 1)
    assert res.ref_timing is not None and res.new_timing is not None
    assert res.new_timing.n == FAST["perf_trials"] and res.ref_timing.n == FAST["perf_trials"]
    assert res.correctness_trials_passed == FAST["correctness_trials"]
    assert res.atol == res.rtol == 1e-4  # fp32 default
    assert res.max_abs_error is not None and res.max_abs_error < 1e-3
    assert res.hardware and res.hardware.startswith("CPU")
    assert res.torch_version and res.timing_method and "perf_counter" in res.timing_method
    assert res.device == "cpu" and res.worker_id


def test_no_performance_gives_reward_zero(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK, options={"measure_performance": False})
    assert (res.outcome, res.reward, res.speedup) == ("correct", 0.0, None)


def test_incorrect(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_WRONG)
    assert (res.outcome, res.reward) == ("incorrect", -2.0)
    assert "outside atol" in res.message and res.max_abs_error and res.max_abs_error > 0.1


def test_loose_tolerance_is_reported(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK, options={"tolerance": 1e-2})
    assert res.outcome == "correct" and res.atol == res.rtol == 1e-2


SOL_ADD_ONLY_WITHOUT_TF32 = """
import torch

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        tf32 = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
        return a - b if tf32 else a + b
"""


def test_tf32_setting_holds_for_one_evaluation_only(client: httpx.Client) -> None:
    """'off' is what both sides see during the job; the warm worker's next job has PyTorch's defaults."""
    res = evaluate(client, S.REF_ADD, SOL_ADD_ONLY_WITHOUT_TF32, options={"tf32": "off"})
    assert res.outcome == "correct", res.message
    assert res.tf32 == {"cudnn": False, "matmul": False}
    res = evaluate(client, S.REF_ADD, SOL_ADD_ONLY_WITHOUT_TF32)
    assert res.outcome == "incorrect" and res.tf32 == {"cudnn": True, "matmul": False}
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK, options={"tf32": "on"})
    assert res.outcome == "correct" and res.tf32 == {"cudnn": True, "matmul": True}
    r = client.post(
        "/v1/evaluate", json={"reference": S.REF_ADD, "solution": S.SOL_ADD_OK, "options": {"tf32": "no"}}
    )
    assert r.status_code == 422 and "tf32" in r.text


@pytest.mark.parametrize(
    ("solution", "outcome", "reward", "needle"),
    [
        (S.SOL_SYNTAX_ERROR, "compilation_failure", -5.0, "SyntaxError"),
        (S.SOL_INIT_ERROR, "initialization_failure", -4.0, "cannot build this model"),
        (S.SOL_RUNTIME_ERROR, "execution_failure", -3.0, "forward raised"),
        ("import torch\nx = 1\n", "compilation_failure", -5.0, "ModelNew"),
    ],
)
def test_failure_outcomes(
    client: httpx.Client, solution: str, outcome: str, reward: float, needle: str
) -> None:
    res = evaluate(client, S.REF_ADD, solution)
    assert (res.outcome, res.reward) == (outcome, reward), res.message
    assert needle in res.message + (res.traceback or "")


@pytest.mark.parametrize(
    ("solution", "options", "outcome", "reward", "needle"),
    [
        (S.SOL_INFINITE_LOOP, {"timeout_s": 3}, "timeout", -7.0, "exceeded timeout_s=3"),
        (S.SOL_SEGFAULT, {}, "execution_failure", -3.0, "SIGSEGV"),
        (S.SOL_EXIT, {}, "execution_failure", -3.0, "status 3"),
    ],
)
def test_faults_cost_only_the_submission(
    client: httpx.Client, solution: str, options: dict[str, Any], outcome: str, reward: float, needle: str
) -> None:
    res = evaluate(client, S.REF_ADD, solution, options=options)
    assert (res.outcome, res.reward) == (outcome, reward), res.message
    assert needle in res.message
    assert_healthy(client)


def test_output_flood_is_captured_and_truncated(client: httpx.Client) -> None:
    res = evaluate(
        client, S.REF_ADD, S.SOL_FLOOD, options={"perf_trials": 2, "warmup": 0, "correctness_trials": 1}
    )
    assert res.outcome == "correct", res.message
    assert res.output is not None and len(res.output) < 5000
    assert "END-OF-FLOOD" in res.output and "bytes of output cut" in res.output
    assert_healthy(client)


def test_cpp_extension_compiles_and_is_cached(client: httpx.Client) -> None:
    first = evaluate(client, S.REF_ADD, S.SOL_CPP_ADD, backend="cpp", options={"timeout_s": 300})
    assert first.outcome == "correct", f"{first.message}\n{first.compile_log}\n{first.traceback}"
    again = evaluate(client, S.REF_ADD, S.SOL_CPP_ADD, backend="cpp")
    assert again.outcome == "correct" and again.extension_cache_hit is True
    assert again.elapsed.compile_s < 5


def test_cpp_compile_error(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_ADD, S.SOL_CPP_BROKEN, backend="cpp", options={"timeout_s": 300})
    assert (res.outcome, res.reward) == ("compilation_failure", -5.0)
    assert res.compile_log and "error" in res.compile_log and "main.cpp" in res.compile_log
    assert_healthy(client)


def test_gpu_backends_on_cpu_require_gpu(client: httpx.Client) -> None:
    for backend in ("cuda", "triton"):
        res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK, backend=backend)
        assert res.outcome == "requires_gpu" and "requires a CUDA GPU" in res.message
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK, options={"device": "cuda"})
    assert res.outcome == "requires_gpu"


def test_kernelbench_problems_as_their_own_solution(client: httpx.Client) -> None:
    for name in ("kb_level1_19_ReLU.py", "kb_level2_12_Gemm_Multiply_LeakyReLU.py"):
        ref = S.fixture(name)
        res = evaluate(client, ref, S.own_solution(ref), options={"perf_trials": 20})
        assert res.outcome == "correct", res.message
        assert res.max_abs_error == 0.0  # identical weights and inputs on both sides
        assert res.speedup is not None and 0.3 < res.speedup < 3.0  # noisy shared CPU; tight bounds on GPU


def test_kernelbench_wrong_fusion_is_incorrect(client: httpx.Client) -> None:
    ref = S.fixture("kb_level2_12_Gemm_Multiply_LeakyReLU.py")
    wrong = S.own_solution(ref).replace("ModelNew = Model", "") + (
        "\nclass ModelNew(Model):\n    def forward(self, x):\n        return torch.relu(self.gemm(x) * self.multiplier)\n"
    )
    res = evaluate(client, ref, wrong)
    assert res.outcome == "incorrect", res.message


def test_concurrent_requests(kernel_server: RunningServer) -> None:
    async def run() -> list[KernelEvalResponse]:
        async with httpx.AsyncClient(base_url=kernel_server.url, timeout=300) as ac:
            bodies = [
                {
                    "reference": S.REF_ADD,
                    "solution": S.SOL_ADD_OK if i % 2 == 0 else S.SOL_ADD_WRONG,
                    "options": FAST,
                }
                for i in range(6)
            ]
            answers = await asyncio.gather(*(ac.post("/v1/evaluate", json=b) for b in bodies))
            return [KernelEvalResponse.model_validate(a.json()) for a in answers]

    results = asyncio.run(run())
    assert [r.outcome.value for r in results] == ["correct", "incorrect"] * 3
    assert len({r.worker_id for r in results}) == 2  # both CPU slots served


def test_malformed_payloads_get_422(client: httpx.Client) -> None:
    r = client.post("/v1/evaluate", json={"reference": S.REF_ADD})
    assert r.status_code == 422 and "solution" in r.text
    r = client.post(
        "/v1/evaluate", json={"reference": S.REF_ADD, "task_id": "level1/19_ReLU", "solution": "x"}
    )
    assert r.status_code == 422 and "reference" in r.text and "task_id" in r.text
    r = client.post("/v1/evaluate", json={"reference": S.REF_ADD, "solution": "x", "backend": "fortran"})
    assert r.status_code == 422 and "backend" in r.text
    r = client.post(
        "/v1/evaluate", json={"reference": S.REF_ADD, "solution": "x", "options": {"perf_trials": 0}}
    )
    assert r.status_code == 422 and "perf_trials" in r.text
    r = client.post("/v1/evaluate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_oversize_payload_gets_413(client: httpx.Client) -> None:
    r = client.post("/v1/evaluate", json={"reference": S.REF_ADD, "solution": "#" * (MAX_BODY + 10)})
    assert r.status_code == 413


def test_datasets_and_task_ids(client: httpx.Client) -> None:
    r = client.get("/v1/datasets/level1/tasks")
    assert r.status_code == 200
    tasks = r.json()["tasks"]
    assert [t["id"] for t in tasks] == ["level1/19_ReLU"]
    assert tasks[0]["level"] == 1 and "class Model" in tasks[0]["question"]
    assert [t["id"] for t in client.get("/v1/datasets/all/tasks").json()["tasks"]] == [
        "level1/19_ReLU",
        "level2/12_Gemm_Multiply_LeakyReLU",
    ]
    assert client.get("/v1/datasets/level7/tasks").status_code == 404
    body = {
        "dataset": "level1",
        "task_id": "19_ReLU",
        "solution": S.own_solution(tasks[0]["question"]),
        "options": FAST,
    }
    res = KernelEvalResponse.model_validate(client.post("/v1/evaluate", json=body).json())
    assert res.outcome == "correct"
    body["task_id"] = "level1/nope"
    assert client.post("/v1/evaluate", json=body).status_code == 404


def test_score_endpoint_kernelbench_metrics(client: httpx.Client) -> None:
    good = evaluate(client, S.REF_ADD, S.SOL_ADD_OK)
    bad = evaluate(client, S.REF_ADD, S.SOL_ADD_WRONG)
    evals = [
        {"task_id": "level1/a", "model": "m", "data": good.to_eval_result_data().model_dump(mode="json")},
        {"task_id": "level1/b", "model": "m", "data": bad.to_eval_result_data().model_dump(mode="json")},
    ]
    r = client.post("/v1/score", json={"dataset": "level1", "model": "m", "evaluations": evals})
    assert r.status_code == 200, r.text
    m = r.json()["metrics"]
    assert m["correct_rate"] == 0.5 and m["fast_0"] == 0.5
    assert m["geomean_speedup"] == pytest.approx(good.speedup)
    assert m["mean_reward"] == pytest.approx((good.reward - 2) / 2)
    assert r.json()["groups"]["level1"]["correct_rate"] == 0.5
