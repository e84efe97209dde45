"""Ray executor: the same jobs and replies as the local :class:`~kernel_service.workers.pool.WorkerPool`, run by
actors spread over a Ray cluster (``kernel-service serve --executor ray --address ADDR|local``).

Each actor owns one warm, sandboxed worker subprocess (a one-slot ``WorkerPool``), so a Ray node keeps
every local guarantee: hard timeout with a process-group kill, a crash costs one submission, JSON only.
Compile actors ask Ray for one CPU; evaluation actors ask for one GPU each (Ray assigns it and the actor
hands it to its worker as ``CUDA_VISIBLE_DEVICES``), or one CPU on a cluster without GPUs. The service
keeps one queue of idle actors per role, so compiles (CPU nodes) and timing (GPU nodes) overlap exactly
as with local pools, and an actor that dies (node lost) is replaced.

No shared filesystem is needed: a compile actor builds in its node's own work dir and packs what the
solution built into an artifact (:mod:`kernel_service.workers.artifacts`) that comes back to the driver as bytes;
the driver keeps it beside its build cache entry and hands it to evaluation actors through Ray's object
store; an evaluation actor verifies it, keeps it in its node's artifact cache and loads it from a fresh
per-job copy. A node's work dir is ``$KS_NODE_WORK_DIR`` where the node was started with it (``ray start``
inherits the shell's environment), else the service's work dir path. A rejected artifact (bad hash,
truncated, another torch) is dropped and rebuilt, never loaded. An actor that dies (its node lost) is
replaced and its job run again on the replacement, at most ``ACTOR_RETRIES`` times: a lost node is not
the submission's fault. ``ray`` is an optional dependency (``pip install 'ray>=2.9'``; the ``ray`` extra
of llmbench-kernel-service).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .artifacts import ArtifactCache, ArtifactError, ArtifactRef, manifest_extensions, pack
from .build_cache import NODE_CACHE_MAX_ENV, BuildCache
from .pool import STARTUP_TIMEOUT_S, Reply, WorkerConfig, WorkerPool

logger = logging.getLogger(__name__)

#: Seconds past a job's own timeout before the driver gives up on an actor that does not answer.
ACTOR_GRACE_S = 60.0
#: A local Ray instance needs no large object store: jobs and replies are small JSON-like dicts.
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024
#: Times a job is run again on a replacement actor after its actor died (node lost).
ACTOR_RETRIES = 2
#: Artifacts whose object-store copies the driver keeps (the bytes stay on its disk either way).
DRIVER_ARTIFACT_REFS = 64
#: The env var naming a node's own work dir (build dirs, artifact cache, worker temp dirs).
NODE_WORK_DIR_ENV = "KS_NODE_WORK_DIR"
ARTIFACT_REF_FILE = "artifact.json"


def _tar_name(ref: ArtifactRef) -> str:
    """The driver's file of an artifact: named by its hash, so a second build of a key never overwrites
    the bytes the first one's ``artifact.json`` still names."""
    return f"artifact-{ref.sha256[:16]}.tar"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("executor 'ray' needs the ray package: pip install 'ray>=2.9'") from exc
    return ray


class WorkerActor:
    """Body of the Ray actor (wrapped with ``ray.remote`` on first use): one sandboxed worker, in its node's
    own work dir, with that node's build dirs and artifact cache."""

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
        node_root = Path(os.environ.get(NODE_WORK_DIR_ENV) or config.root)
        self.builds = node_root / "build-cache"
        # the service's build cache limit applies to each node's build dirs and artifacts alike
        limit = int(config.env[NODE_CACHE_MAX_ENV]) if config.env.get(NODE_CACHE_MAX_ENV) else None
        self.build_cache = BuildCache(self.builds, max_bytes=limit)
        self.artifacts = ArtifactCache(node_root / "artifacts", max_bytes=limit)
        self.role = config.role
        self.flags = ["pch"] if config.env.get("KS_BUILD_PCH") else []
        self.arch = config.env.get("TORCH_CUDA_ARCH_LIST")
        # Actors on one host count worker ids from 1 each: a root of its own keeps their temp dirs apart.
        own_root = node_root / "ray" / uuid.uuid4().hex[:8]
        env = dict(config.env)
        if "KS_BUILD_PCH" in env:
            env["KS_BUILD_PCH"] = str(self.builds / "pch")
        self.pool = WorkerPool(
            dataclasses.replace(config, root=own_root, writable=[self.builds], env=env), [device]
        )

    async def start(self) -> dict[str, Any]:
        await self.pool.start()
        info = dict(self.pool.ready_info or {})
        import ray

        info["node_id"] = ray.get_runtime_context().get_node_id()
        return info

    async def run(self, job: dict[str, Any], timeout: float, artifact: list[Any]) -> dict[str, Any]:
        """Run ``job`` with its build dir on this node. A compile answers its artifact too; an evaluation
        given one (``[ArtifactRef as JSON, ObjectRef]``) loads it, or answers ``failure="artifact"``.
        Then the node's build dirs are trimmed to the limit (this job's and the PCH kept)."""
        key = Path(str(job.get("build_dir") or "none")).name
        with self.build_cache.pinned(self.builds / key), self.build_cache.pinned(self.builds / "pch"):
            try:
                return await self._run(job, timeout, artifact, key)
            finally:
                self.build_cache.evict()

    async def _run(
        self, job: dict[str, Any], timeout: float, artifact: list[Any], key: str
    ) -> dict[str, Any]:
        if job.get("mode") == "compile":
            return await self._compile(job, timeout, key)
        if not artifact:
            job = {**job, "build_dir": str(self.builds / key)}
            reply, _waited = await self.pool.run(job, timeout)
            return dataclasses.asdict(reply)
        ref = ArtifactRef.model_validate(artifact[0])
        job_dir = self.builds / f"{key}-job-{uuid.uuid4().hex[:8]}"
        try:
            manifest = None
            if self.artifacts.has(key):
                try:
                    manifest = self.artifacts.materialize(ref, job_dir)
                except ArtifactError:  # another build of the key, or damaged here: fetch it again
                    manifest = None
            if manifest is None:
                data = await artifact[1]
                self.artifacts.store(data, ref)
                manifest = self.artifacts.materialize(ref, job_dir)
        except ArtifactError as exc:
            shutil.rmtree(job_dir, ignore_errors=True)
            return dataclasses.asdict(Reply(result=None, failure="artifact", message=str(exc)))
        try:
            job = {**job, "build_dir": str(job_dir), "prebuilt": manifest_extensions(manifest)}
            reply, _waited = await self.pool.run(job, timeout)
            return dataclasses.asdict(reply)
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    async def _compile(self, job: dict[str, Any], timeout: float, key: str) -> dict[str, Any]:
        local = self.builds / key
        reply, _waited = await self.pool.run({**job, "build_dir": str(local)}, timeout)
        out = dataclasses.asdict(reply)
        result = reply.result or {}
        if result.get("ok"):
            try:
                data, ref = pack(
                    local, key, str(job.get("backend")), list(result.pop("extensions", None) or []),
                    cuda_arch=self.arch, flags=self.flags,
                )  # fmt: skip
            except (ArtifactError, ValueError) as exc:  # the evaluating node will build for itself
                logger.warning("compile %s: no artifact: %s", key, exc)
            else:
                out["artifact"] = data
                out["artifact_ref"] = ref.model_dump()
        return out

    async def close(self) -> None:
        await self.pool.close()


class RayActorPool:
    """Idle actors in a queue, one per slot: the :class:`~kernel_service.workers.executor.JobRunner` API.

    ``resources``: custom Ray resources every actor asks for (``{"ks_build": 1}`` places compile actors
    only on nodes started with ``--resources '{"ks_build": N}'``); actors are spread over those nodes.
    An evaluation pool given its ``compiler`` (the compile pool) rebuilds an artifact an actor rejected.
    """

    def __init__(
        self,
        config: WorkerConfig,
        devices: list[str | None],
        actor_cls: Any,
        resources: dict[str, float] | None = None,
    ) -> None:
        if not devices:
            raise ValueError("a Ray actor pool needs at least one slot")
        self.config = config
        self.devices = devices
        self.use_gpu = any(d is not None for d in devices)
        self.resources = dict(resources or {})
        self.compiler: RayActorPool | None = None
        self._actor_cls = actor_cls
        self._idle: asyncio.Queue[Any] | None = None
        self._all: list[Any] = []
        self._refs: OrderedDict[str, tuple[ArtifactRef, Any]] = OrderedDict()
        self.ready_info: dict[str, Any] | None = None
        self.nodes: dict[str, str] = {}  # actor id -> node id (where Ray placed it)
        self.actor_deaths = 0
        self.artifacts_rejected = 0

    @property
    def size(self) -> int:
        return len(self.devices)

    def _new_actor(self) -> Any:
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1} if self.use_gpu else {"num_cpus": 1}
        if self.resources:
            options["resources"] = self.resources
        actor = self._actor_cls.options(**options, scheduling_strategy="SPREAD").remote(
            self.config, self.use_gpu
        )
        self._all.append(actor)
        return actor

    async def _start_actor(self, actor: Any) -> dict[str, Any]:
        info: dict[str, Any] = await actor.start.remote()
        self.nodes[actor._actor_id.hex()] = str(info.get("node_id"))
        return info

    async def start(self) -> None:
        self._idle = asyncio.Queue()
        actors = [self._new_actor() for _ in self.devices]
        infos = await asyncio.gather(*(self._start_actor(a) for a in actors))
        self.ready_info = infos[0]
        for a in actors:
            self._idle.put_nowait(a)

    async def run(self, job: dict[str, Any], timeout: float) -> tuple[Reply, float]:
        if job.get("mode") == "compile":
            raw, waited = await self._call(job, timeout, [])
            self._keep_artifact(job, raw)
            return Reply(**raw), waited
        artifact = self._artifact_for(job)
        raw, waited = await self._call(job, timeout, artifact)
        if raw.get("failure") == "artifact":
            # Rejected (corrupt, truncated, another torch): drop it, build it again, never load it.
            self.artifacts_rejected += 1
            logger.warning("ray: artifact for job %s rejected: %s", job.get("job_id"), raw.get("message"))
            self._drop_artifact(job)
            if self.compiler is not None:
                compile_job = {k: job[k] for k in ("kind", "solution", "backend", "options", "build_dir")}
                compile_job.update(job_id=f"{job['job_id']}-rebuild", mode="compile")
                await self.compiler.run(compile_job, timeout)
            raw, more = await self._call(job, timeout, self._artifact_for(job))
            waited += more
            if raw.get("failure") == "artifact":
                raw = dataclasses.asdict(
                    Reply(
                        result=None, failure="protocol", message=f"artifact rejected twice: {raw['message']}"
                    )
                )
        return Reply(**raw), waited

    async def _call(
        self, job: dict[str, Any], timeout: float, artifact: list[Any]
    ) -> tuple[dict[str, Any], float]:
        """One job on an idle actor; an actor that dies is replaced and the job run again on another."""
        assert self._idle is not None, "pool not started"
        ray = _import_ray()
        loop = asyncio.get_running_loop()
        waited = 0.0
        for attempt in range(ACTOR_RETRIES + 1):
            t0 = loop.time()
            actor = await self._idle.get()
            waited += loop.time() - t0
            try:
                raw: dict[str, Any] = await asyncio.wait_for(
                    actor.run.remote(job, timeout, artifact), timeout + ACTOR_GRACE_S
                )
                self._idle.put_nowait(actor)
                return raw, waited
            except (ray.exceptions.RayError, asyncio.TimeoutError) as exc:
                logger.warning("ray actor failed on job %s: %s", job.get("job_id"), exc)
                actor = await self._replace(actor)
                self._idle.put_nowait(actor)
                if isinstance(exc, asyncio.TimeoutError):
                    return dataclasses.asdict(
                        Reply(result=None, failure="timeout", message="ray actor did not answer")
                    ), waited
                self.actor_deaths += 1
                if attempt == ACTOR_RETRIES:
                    message = f"ray actor lost {attempt + 1} times: {type(exc).__name__}"
                    return dataclasses.asdict(Reply(result=None, failure="crash", message=message)), waited
        raise AssertionError("unreachable")

    async def _replace(self, actor: Any) -> Any:
        ray = _import_ray()
        if actor in self._all:
            self._all.remove(actor)
        ray.kill(actor, no_restart=True)
        fresh = self._new_actor()
        # Bounded: a replacement that Ray cannot place (no node left with the resource) must not hang
        # every later job; the error reaches the request instead.
        await asyncio.wait_for(self._start_actor(fresh), STARTUP_TIMEOUT_S)
        return fresh

    # ---- artifacts, on the driver: bytes beside the build cache entry, copies in the object store -----

    def _keep_artifact(self, job: dict[str, Any], raw: dict[str, Any]) -> None:
        """Keep a compile's artifact beside the driver's build cache entry: ``artifact-<hash>.tar``, then
        ``artifact.json`` naming it (written last, atomically: two builds of one key never mix)."""
        data = raw.pop("artifact", None)
        ref_json = raw.pop("artifact_ref", None)
        if data is None or ref_json is None:
            return
        ref = ArtifactRef.model_validate(ref_json)
        entry = Path(str(job["build_dir"]))
        entry.mkdir(parents=True, exist_ok=True)
        (entry / _tar_name(ref)).write_bytes(data)
        part = entry / f".{ARTIFACT_REF_FILE}.{uuid.uuid4().hex[:8]}"
        part.write_text(ref.model_dump_json())
        os.replace(part, entry / ARTIFACT_REF_FILE)  # the evaluation pool puts it in the object store

    def _remember(self, ref: ArtifactRef, obj: Any) -> None:
        self._refs[ref.key] = (ref, obj)
        self._refs.move_to_end(ref.key)
        while len(self._refs) > DRIVER_ARTIFACT_REFS:
            self._refs.popitem(last=False)

    def _artifact_for(self, job: dict[str, Any]) -> list[Any]:
        """``[ref JSON, ObjectRef]`` of the job's artifact, or ``[]`` (none: the node builds for itself)."""
        raw = job.get("build_dir")
        if not raw:
            return []
        entry = Path(str(raw))
        held = self._refs.get(entry.name)
        if held is None:
            try:
                ref = ArtifactRef.model_validate_json((entry / ARTIFACT_REF_FILE).read_text())
                data = (entry / _tar_name(ref)).read_bytes()
            except (OSError, ValueError):
                return []
            held = (ref, _import_ray().put(data))
            self._remember(ref, held[1])
        return [held[0].model_dump(), held[1]]

    def _drop_artifact(self, job: dict[str, Any]) -> None:
        entry = Path(str(job["build_dir"]))
        self._refs.pop(entry.name, None)
        try:
            ref = ArtifactRef.model_validate_json((entry / ARTIFACT_REF_FILE).read_text())
        except (OSError, ValueError):
            return
        (entry / ARTIFACT_REF_FILE).unlink(missing_ok=True)
        (entry / _tar_name(ref)).unlink(missing_ok=True)

    async def close(self) -> None:
        ray = _import_ray()
        for actor in list(self._all):
            try:
                await asyncio.wait_for(actor.close.remote(), 30)
            except Exception:  # noqa: BLE001 - closing a dead actor: kill it anyway
                pass
            ray.kill(actor, no_restart=True)
        self._all.clear()
        self._refs.clear()


class RayCluster:
    """A connection to Ray (a local instance it started, or an existing cluster) that makes pools."""

    def __init__(self, owns: bool) -> None:
        self.ray = _import_ray()
        self.owns = owns
        self._actor_cls = self.ray.remote(WorkerActor)
        self._eval_pool: RayActorPool | None = None

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

    def pool(
        self, config: WorkerConfig, devices: list[str | None], resources: dict[str, float] | None = None
    ) -> RayActorPool:
        """A pool for ``config.role``; a compile pool becomes the rebuilder of the evaluation pool made
        before it (the service makes the evaluation pool first)."""
        pool = RayActorPool(config, devices, self._actor_cls, resources)
        if config.role == "compile" and self._eval_pool is not None:
            self._eval_pool.compiler = pool
        elif config.role == "eval":
            self._eval_pool = pool
        return pool

    def shutdown(self) -> None:
        if self.owns and self.ray.is_initialized():
            self.ray.shutdown()
