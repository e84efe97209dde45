"""The Ray executor against a real local Ray cluster (CPU): same HTTP API, evaluations run by Ray actors."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import ks_sources as S
import pytest
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import start_server

ray = pytest.importorskip("ray", reason="the Ray executor needs the optional 'ray' extra (pip install ray)")


@pytest.fixture(scope="module")
def ray_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KernelService]]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 1024 * 1024)
    try:
        service = KernelService(
            KernelServiceConfig(
                gpus=[],
                cpu_workers=1,
                compile_workers=1,
                executor="ray",
                ray_address="local",
                work_dir=tmp_path_factory.mktemp("ks-ray"),
            )
        )
        with start_server(make_app(service), startup_timeout=120) as srv:
            yield srv.url, service
    finally:
        ray.shutdown()


def test_ray_executor_evaluates_correct_and_incorrect_over_http(
    ray_service: tuple[str, KernelService],
) -> None:
    url, service = ray_service
    from kernel_service.workers.ray_executor import RayActorPool

    assert isinstance(service.eval_pool, RayActorPool) and isinstance(service.compile_pool, RayActorPool)
    # One compile actor and one eval actor hold the cluster's 2 CPUs: Ray, not this process, placed them.
    assert ray.cluster_resources().get("CPU") == 2 and ray.available_resources().get("CPU", 0) == 0
    with httpx.Client(base_url=url, timeout=120) as c:
        body = {"reference": S.REF_ADD, "options": S.FAST}
        ok = c.post("/v1/evaluate", json={**body, "solution": S.SOL_ADD_OK})
        bad = c.post("/v1/evaluate", json={**body, "solution": S.SOL_ADD_WRONG})
    assert ok.status_code == bad.status_code == 200, (ok.text, bad.text)
    good, wrong = KernelEvalResponse.model_validate(ok.json()), KernelEvalResponse.model_validate(bad.json())
    assert good.outcome == "correct" and good.speedup is not None and good.speedup > 0, good.message
    assert (wrong.outcome, wrong.reward) == ("incorrect", -2.0)
    assert good.worker_id and good.worker_id.startswith("eval-")
    assert good.hardware and good.hardware.startswith("CPU")
