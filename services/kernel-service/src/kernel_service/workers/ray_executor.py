"""Ray executor: the same jobs and replies as the local :class:`~kernel_service.workers.pool.WorkerPool`, run by
actors spread over a Ray cluster (``kernel-service serve --executor ray --address ADDR|local``).

Each actor owns one warm, sandboxed worker subprocess (a one-slot ``WorkerPool``), so a Ray node keeps
every local guarantee: hard timeout with a process-group kill, a crash costs one submission, JSON only.
Compile actors ask Ray for one CPU; evaluation actors ask for one GPU each (Ray assigns it and the actor
hands it to its worker as ``CUDA_VISIBLE_DEVICES``), or one CPU on a cluster without GPUs. The service
keeps one queue of idle actors per role, so compiles (CPU nodes) and timing (GPU nodes) overlap exactly
as with local pools, and an actor that dies (node lost) is replaced.

The build cache must be visible at the same path on every node (a shared filesystem): builds are not
relocatable (see :mod:`kernel_service.workers.build_cache`). ``ray`` is an optional dependency
(``pip install 'ray>=2.9'``; the ``ray`` extra of llmbench-kernel-service).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid
from typing import Any

from .pool import Reply, WorkerConfig, WorkerPool

logger = logging.getLogger(__name__)

#: Seconds past a job's own timeout before the driver gives up on an actor that does not answer.
ACTOR_GRACE_S = 60.0
#: A local Ray instance needs no large object store: jobs and replies are small JSON-like dicts.
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("executor 'ray' needs the ray package: pip install 'ray>=2.9'") from exc
    return ray


class WorkerActor:
    """Body of the Ray actor (wrapped with ``ray.remote`` on first use): one sandboxed worker."""

    def __init__(self, config: WorkerConfig, use_gpu: bool) -> None:
        device: str | None = None
        if use_gpu:
            import ray

            # Ray set this actor's CUDA_VISIBLE_DEVICES to the GPU it assigned (its own id list may be
            # indices into a node's CUDA_VISIBLE_DEVICES, not the names the driver knows).
            ids = ray.get_gpu_ids()
            device = os.environ.get("CUDA_VISIBLE_DEVICES") or (
                ",".join(str(i) for i in ids) if ids else None
            )
        # Actors on one host count worker ids from 1 each: a root of its own keeps their temp dirs apart.
        own_root = config.root / "ray" / uuid.uuid4().hex[:8]
        self.pool = WorkerPool(dataclasses.replace(config, root=own_root), [device])

    async def start(self) -> dict[str, Any]:
        await self.pool.start()
        return dict(self.pool.ready_info or {})

    async def run(self, job: dict[str, Any], timeout: float) -> dict[str, Any]:
        reply, _waited = await self.pool.run(job, timeout)
        return dataclasses.asdict(reply)

    async def close(self) -> None:
        await self.pool.close()


class RayActorPool:
    """Idle actors in a queue, one per slot: the :class:`~kernel_service.workers.executor.JobRunner` API."""

    def __init__(self, config: WorkerConfig, devices: list[str | None], actor_cls: Any) -> None:
        if not devices:
            raise ValueError("a Ray actor pool needs at least one slot")
        self.config = config
        self.devices = devices
        self.use_gpu = any(d is not None for d in devices)
        self._actor_cls = actor_cls
        self._idle: asyncio.Queue[Any] | None = None
        self._all: list[Any] = []
        self.ready_info: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        return len(self.devices)

    def _new_actor(self) -> Any:
        resources = {"num_gpus": 1, "num_cpus": 1} if self.use_gpu else {"num_cpus": 1}
        actor = self._actor_cls.options(**resources).remote(self.config, self.use_gpu)
        self._all.append(actor)
        return actor

    async def start(self) -> None:
        self._idle = asyncio.Queue()
        actors = [self._new_actor() for _ in self.devices]
        infos = await asyncio.gather(*(a.start.remote() for a in actors))
        self.ready_info = infos[0]
        for a in actors:
            self._idle.put_nowait(a)

    async def run(self, job: dict[str, Any], timeout: float) -> tuple[Reply, float]:
        assert self._idle is not None, "pool not started"
        ray = _import_ray()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        actor = await self._idle.get()
        waited = loop.time() - t0
        try:
            raw = await asyncio.wait_for(actor.run.remote(job, timeout), timeout + ACTOR_GRACE_S)
            reply = Reply(**raw)
        except (ray.exceptions.RayError, asyncio.TimeoutError) as exc:
            logger.warning("ray actor failed on job %s: %s", job.get("job_id"), exc)
            self._all.remove(actor)
            ray.kill(actor, no_restart=True)
            actor = self._new_actor()
            await actor.start.remote()
            failure = "timeout" if isinstance(exc, asyncio.TimeoutError) else "crash"
            reply = Reply(result=None, failure=failure, message=f"ray actor lost: {type(exc).__name__}")
        finally:
            self._idle.put_nowait(actor)
        return reply, waited

    async def close(self) -> None:
        ray = _import_ray()
        for actor in list(self._all):
            try:
                await asyncio.wait_for(actor.close.remote(), 30)
            except Exception:  # noqa: BLE001 - closing a dead actor: kill it anyway
                pass
            ray.kill(actor, no_restart=True)
        self._all.clear()


class RayCluster:
    """A connection to Ray (a local instance it started, or an existing cluster) that makes pools."""

    def __init__(self, owns: bool) -> None:
        self.ray = _import_ray()
        self.owns = owns
        self._actor_cls = self.ray.remote(WorkerActor)

    @classmethod
    def connect(cls, address: str | None) -> RayCluster:
        ray = _import_ray()
        if ray.is_initialized():  # the embedding process (a test, a notebook) already connected
            return cls(owns=False)
        if address in (None, "", "local"):
            ray.init(
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            )
        else:
            ray.init(address=address, log_to_driver=False)
        return cls(owns=True)

    def gpu_ids(self, requested: list[int] | None) -> list[int]:
        """One evaluation actor per GPU: all the cluster's GPUs (None), none ([]), or as many as listed."""
        total = int(self.ray.cluster_resources().get("GPU", 0))
        if requested is None:
            return list(range(total))
        if len(requested) > total:
            raise RuntimeError(f"--gpus asks for {len(requested)} GPUs but the Ray cluster has {total}")
        return list(requested)

    def pool(self, config: WorkerConfig, devices: list[str | None]) -> RayActorPool:
        return RayActorPool(config, devices, self._actor_cls)

    def shutdown(self) -> None:
        if self.owns and self.ray.is_initialized():
            self.ray.shutdown()
