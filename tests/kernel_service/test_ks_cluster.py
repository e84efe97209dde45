"""A multi-node Ray cluster on one machine (``ray.cluster_utils.Cluster``): a head, two build nodes and an
evaluation node, each with its own work dir and nothing shared but Ray. Builds run only on the nodes with
the ``ks_build`` resource, evaluations only on the one with ``ks_eval`` (the GPU node's role, on CPU here);
built extensions reach the evaluation node as artifacts through Ray's object store. A batch of real C++
``load_inline`` solutions (correct, incorrect, failing to compile, plain torch) is judged while one build
node is removed mid-build: its job runs again on the other, and every verdict is present and right. Then a
corrupted artifact is refused on the evaluation node and rebuilt, never loaded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ks_sources as S
import pytest
from kernel_service.schemas import KernelEvalRequest
from kernel_service.service import KernelService, KernelServiceConfig
from ks_cluster_sources import OP_BROKEN, op_solution

ray = pytest.importorskip("ray", reason="the Ray executor needs the optional 'ray' extra (pip install ray)")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.slow

OPTIONS = {**S.FAST, "timeout_s": 120}


def _forget_address(address: str) -> None:
    """cluster_utils records its address for a bare ``ray.init()``: another test process on this machine
    must not join this cluster by accident (only our own record is removed)."""
    path = Path(ray._private.utils.get_ray_address_file(None))
    try:
        if path.read_text().strip() == address:
            path.unlink()
    except OSError:
        pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("cluster")
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": 100 << 20},
        shutdown_at_exit=True,
    )
    nodes: dict[str, Any] = {}
    try:
        _forget_address(c.address)
        for name, resource in (("build-1", "ks_build"), ("build-2", "ks_build"), ("eval", "ks_eval")):
            work = root / name
            nodes[name] = c.add_node(
                num_cpus=2,
                resources={resource: 2},
                object_store_memory=100 << 20,
                env_vars={"KS_NODE_WORK_DIR": str(work)},
            )
            nodes[name].work_dir = work
        ray.init(address=c.address, log_to_driver=False)
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()
        _forget_address(c.address)


def test_cluster_judges_a_batch_through_artifacts_and_survives_losing_a_build_node(
    cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    c, nodes = cluster
    t0 = time.monotonic()
    service = KernelService(
        KernelServiceConfig(
            gpus=[],
            cpu_workers=1,
            compile_workers=2,
            executor="ray",
            ray_compile_resources={"ks_build": 1},
            ray_eval_resources={"ks_eval": 1},
            work_dir=tmp_path / "driver",
        )
    )

    async def scenario() -> None:
        await service.startup()
        try:
            await judge_batch_and_lose_a_node(service, c, nodes)
            await refuse_a_corrupt_artifact(service, nodes, tmp_path / "driver")
        finally:
            await service.shutdown()

    asyncio.run(scenario())
    assert time.monotonic() - t0 < 240


def _request(solution: str) -> KernelEvalRequest:
    return KernelEvalRequest.model_validate(
        {"reference": S.REF_ADD, "solution": solution, "backend": "cpp", "options": OPTIONS}
    )


async def judge_batch_and_lose_a_node(service: KernelService, c: Cluster, nodes: dict[str, Any]) -> None:
    from kernel_service.workers.ray_executor import RayActorPool

    assert isinstance(service.eval_pool, RayActorPool) and isinstance(service.compile_pool, RayActorPool)
    ids = {name: n.node_id for name, n in nodes.items()}
    # Ray placed them by resource: builds on the two build nodes (one each), timing on the eval node.
    assert sorted(service.compile_pool.nodes.values()) == sorted([ids["build-1"], ids["build-2"]])
    assert list(service.eval_pool.nodes.values()) == [ids["eval"]]
    ok, wrong, slow = op_solution("ks_cl_ok"), op_solution("ks_cl_wrong", sign="-"), op_solution("ks_cl_slow")
    solutions = [ok, wrong, OP_BROKEN, S.SOL_ADD_OK, slow, ok]
    tasks = [asyncio.ensure_future(service.evaluate_kernelbench(_request(s))) for s in solutions]
    # Lose a build node while it builds: the first whose work dir gets a build dir.
    victim = ""
    deadline = time.monotonic() + 90
    while not victim and time.monotonic() < deadline:
        for name in ("build-1", "build-2"):
            cache = nodes[name].work_dir / "build-cache"
            if cache.exists() and any(cache.iterdir()):
                victim = name
                break
        await asyncio.sleep(0.2)
    assert victim, "no build started on a build node"
    await asyncio.to_thread(c.remove_node, nodes[victim])
    answers = list(await asyncio.gather(*tasks))

    got = [(a.outcome.value, a.message[:200]) for a in answers]
    assert [a.outcome for a in answers] == [
        "correct", "incorrect", "compilation_failure", "correct", "correct", "correct"
    ], got  # fmt: skip
    assert answers[0].speedup is not None and answers[1].reward == -2.0
    assert answers[2].compile_log and "error" in answers[2].compile_log
    assert service.compile_pool.actor_deaths >= 1  # the lost node's job ran again on the other
    survivor = "build-2" if victim == "build-1" else "build-1"
    assert set(service.compile_pool.nodes.values()) >= {ids[survivor]}

    # No shared build dir: the eval node received artifacts and never ran a build.
    eval_dir = nodes["eval"].work_dir
    assert len(list((eval_dir / "artifacts").glob("*.tar"))) == 4  # ok, wrong, plain torch, slow
    assert not list(eval_dir.rglob("build.ninja")) and not list(eval_dir.rglob("*.o"))
    assert list(nodes[survivor].work_dir.rglob("build.ninja"))


async def refuse_a_corrupt_artifact(service: KernelService, nodes: dict[str, Any], driver: Path) -> None:
    """Corrupt the driver's bytes of a built solution; a fresh eval node must refuse them, and the pool
    rebuild the artifact on a build node, before the solution is loaded and judged."""
    import json

    from kernel_service.workers.ray_executor import RayActorPool

    assert isinstance(service.eval_pool, RayActorPool) and service.build_cache is not None
    ok = op_solution("ks_cl_ok")
    entry = service.build_cache.dir_for(ok, "cpp", service._versions())
    tar = entry / f"artifact-{json.loads((entry / 'artifact.json').read_text())['sha256'][:16]}.tar"
    data = bytearray(tar.read_bytes())
    data[len(data) // 3] ^= 0xFF
    tar.write_bytes(bytes(data))
    (nodes["eval"].work_dir / "artifacts" / f"{entry.name}.tar").unlink()  # it must take the driver's
    service.eval_pool._refs.clear()  # the driver re-reads its disk, as after a restart

    res = await service.evaluate_kernelbench(_request(ok))
    assert res.outcome == "correct", res.message
    assert service.eval_pool.artifacts_rejected == 1
    assert json.loads((entry / "artifact.json").read_text())["sha256"][:16] not in tar.name
