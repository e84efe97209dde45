"""``KernelService``: the benchmark service that compiles, checks and times submitted kernels.

Flow of one ``evaluate``: resolve the reference (source or dataset task) -> refuse GPU-only backends
on a host without a GPU (``requires_gpu``) -> for ``cpp``/``cuda``, import the solution once in a CPU
compile worker so its ``load_inline`` builds land in a content-addressed build dir (skipped when that
dir is already marked built) -> run the evaluation in a device worker, which loads the cached
extension -> validate the worker's JSON with pydantic -> remember the reference timing.

A request whose client went away is cancelled (the app cancels its coroutine): a job still waiting for
a worker never starts, a running one stops at its next phase boundary (``WorkerPool.run``). Identical
requests share one evaluation (``SharedRun``), which is cancelled only when the last of them is gone.
``metrics()`` (``GET /v1/metrics``) counts the pools' work and cancellations.

Without a ``work_dir`` the service makes its own under the system temp dir, named after its process
(``kernel-service-<pid namespace>.<pid>.<start time>-*``); each start removes those whose process is
dead (a service killed with ``kill -9`` cannot remove its own).

``KernelService`` is where a request meets the pools, the caches and the datasets; beside it: its settings
(``config.py``), the reference-timing cache (``ref_timing_cache.py``), how a worker's reply becomes an
answer and which failures are run again (``replies.py``), and the benchmarks' own code in their rooms
(``kernelbench/``, ``backendbench/``, ``backendbench_service.py``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, overload

import anyio

from benchmark_runner.schemas import EvalResultData, ScoreRequest, ScoreResult
from benchmark_runner.service import BenchmarkService

from .backendbench.schemas import BackendBenchEvalRequest, BackendBenchEvalResponse
from .backendbench_service import run_batch_in_pool, run_in_pool, suite_tasks
from .config import OWN_BASELINE_ENV, KernelServiceConfig
from .judging.sandbox import IsolationReport
from .judging.schemas import COMPILED_BACKENDS, GPU_BACKENDS, Outcome, excerpt
from .kernelbench.datasets import ProblemStore
from .kernelbench.schemas import Elapsed, KernelEvalRequest, KernelEvalResponse
from .kernelbench.scoring import kernelbench_score
from .ref_timing_cache import RefTimingCache
from .replies import ENVIRONMENT_RETRIES, environment_fault, response_from
from .result_cache import ResultCache, result_key
from .schemas import EvaluateAnyRequest, EvaluateAnyResponse
from .shared_run import SharedRun
from .workers.artifacts import MAX_EXTENSIONS
from .workers.build_cache import BUILT_MARKER, NODE_CACHE_MAX_ENV, BuildCache
from .workers.executor import JobRunner
from .workers.fast_builds import race_light_build
from .workers.mps import MpsDaemon
from .workers.pool import KILL_GRACE_S, Reply, WorkerConfig, WorkerPool, detect_gpus, worker_gpu
from .workers.work_dirs import make_work_dir, sweep_dead_work_dirs
from .workers.worker import HOLD_CPUS_ENV

logger = logging.getLogger(__name__)

__all__ = ["BUILT_MARKER", "BuildCache", "KernelService", "KernelServiceConfig", "RefTimingCache"]


#: Bump when the timing method changes: cached reference timings of another method are not comparable.
TIMING_VERSION = "1"
#: Solutions whose failed builds the service remembers (``KernelService._failed_builds``).
FAILED_BUILDS_KEPT = 1024


def split_cpus(cpus: list[int], gpus: int) -> tuple[list[int], list[int]]:
    """Cores for the GPU eval workers and the rest for compiling, on a GPU host with cores to spare.

    A timed call ends with a host-side device sync; when parallel nvcc builds keep every core busy, the
    timing thread waits to be scheduled and both sides' readings grow by the same delay, which pulls every
    speedup toward 1. Two cores per GPU (at most half the host) are kept for the eval workers.
    """
    reserve = min(2 * gpus, len(cpus) // 2)
    if gpus == 0 or reserve == 0:
        return [], cpus
    return cpus[-reserve:], cpus[:-reserve]


class KernelService(BenchmarkService):
    """KernelBench and BackendBench evaluation behind one API; ``kind`` in the request picks the benchmark."""

    name: ClassVar[str] = "kernel"
    evaluate_request_model = EvaluateAnyRequest
    evaluate_response_model = EvaluateAnyResponse

    def __init__(self, config: KernelServiceConfig | None = None) -> None:
        self.config = config or KernelServiceConfig()
        self.gpus: list[int] = []
        self._own_work_dir: Path | None = None
        self._inflight: dict[str, SharedRun[tuple[KernelEvalResponse, bool]]] = {}
        self._joined = 0  # requests answered by joining an identical evaluation in flight
        self._retries = 0  # jobs run again after a failure outside the submission (``environment_fault``)
        self.eval_pool: JobRunner | None = None
        self.compile_pool: JobRunner | None = None
        self.problems = ProblemStore.from_sources(self.config.dataset_sources)
        self.ref_cache = RefTimingCache(self.config.ref_timing_cache_file)
        self.build_cache: BuildCache | None = None
        self.result_cache: ResultCache | None = None
        self.env_info: dict[str, Any] = {}
        self._ray: Any = None  # the RayCluster handle when executor == "ray"
        self._background: set[Any] = set()  # as-written builds still running after a light one won
        self._compiling = 0  # compile jobs submitted and not yet answered (``compile_spare``)
        self._mps: list[MpsDaemon] = []
        #: Per build dir (a solution), its builds that failed on the compile worker (``Job.failed_builds``),
        #: the most recent ``FAILED_BUILDS_KEPT``: its later evaluations, cache hits included, skip them too.
        self._failed_builds: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def mps_running(self) -> bool:
        """Whether the eval workers time through the service's MPS daemon (``mps="auto"`` falls back to
        off where the host cannot run one)."""
        return bool(self._mps) and all(d.running for d in self._mps)

    async def startup(self) -> None:
        cfg = self.config
        if cfg.executor not in ("local", "ray"):
            raise ValueError(f"executor: expected 'local' or 'ray', got {cfg.executor!r}")
        if cfg.executor == "ray" and cfg.mps == "on":  # Ray's GPU actors run no daemon of the service's
            raise ValueError("mps: 'on' is not supported with executor 'ray' (use 'auto' or 'off')")
        if cfg.executor == "ray":
            from .workers.ray_executor import RayCluster

            self._ray = await anyio.to_thread.run_sync(RayCluster.connect, cfg.ray_address)
            self.gpus = self._ray.gpu_ids(cfg.gpus)
        else:
            self.gpus = detect_gpus() if cfg.gpus is None else list(cfg.gpus)
        if cfg.work_dir is None:
            await anyio.to_thread.run_sync(sweep_dead_work_dirs)
            work = self._own_work_dir = make_work_dir()
        else:
            work = Path(cfg.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        self.build_cache = BuildCache(
            Path(cfg.build_cache_dir) if cfg.build_cache_dir else work / "build-cache",
            max_bytes=cfg.build_cache_max_bytes,
        )
        await anyio.to_thread.run_sync(self.build_cache.evict)  # a restart with a smaller limit trims it
        if cfg.result_cache:
            self.result_cache = ResultCache(cfg.result_cache_dir, cfg.result_cache_max_entries)
        eval_env = {
            "OMP_NUM_THREADS": str(cfg.cpu_threads),
            "MKL_NUM_THREADS": str(cfg.cpu_threads),
            # Inductor compiles in the worker, not in a pool of subprocesses: processes a job leaves
            # behind make the worker recycle itself (a fresh torch import, ~12 s on an H100 host) after
            # every torch.compile submission, and one problem has only a few kernels to compile.
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            OWN_BASELINE_ENV: cfg.own_baseline,
        }
        devices: list[str | None] = (
            [worker_gpu(g) if self._ray is None else str(g) for g in self.gpus]
            if self.gpus
            else [None] * max(1, cfg.cpu_workers)
        )
        # No compile pool (BackendBench's service): nothing to keep the eval workers' cores from, so
        # they get every core (their judge, two sides and the next op's preparation thread).
        eval_cpus, compile_cpus = split_cpus(
            sorted(os.sched_getaffinity(0)),
            0 if self._ray is not None or not cfg.compile_step else len(self.gpus or []),
        )
        if eval_cpus:
            eval_env["KS_CPUS"] = ",".join(map(str, eval_cpus))
            eval_env[HOLD_CPUS_ENV] = ",".join(map(str, compile_cpus))  # standbys import torch there
        # Ray nodes bound their own build dirs and artifacts by the service's limit
        node_limit = (
            {NODE_CACHE_MAX_ENV: str(cfg.build_cache_max_bytes)}
            if self._ray is not None and cfg.build_cache_max_bytes
            else {}
        )
        eval_env.update(node_limit)
        device_env: dict[str, dict[str, str]] = {}
        if self.gpus and cfg.mps != "off" and self._ray is None:
            device_env = await self._start_mps(work, [d for d in devices if d is not None])

        def pool_config(
            role: str, env: dict[str, str], per_device: dict[str, dict[str, str]]
        ) -> WorkerConfig:
            assert self.build_cache is not None
            return WorkerConfig(
                role=role,
                root=work,
                max_jobs_per_worker=cfg.max_jobs_per_worker,
                env=env,
                device_env=per_device,
                fsize_bytes=cfg.fsize_bytes,
                nproc=cfg.nproc,
                sandbox=cfg.sandbox,
                writable=[self.build_cache.root],
            )

        self.eval_pool = self._runner(
            pool_config("eval", eval_env, device_env), devices, cfg.ray_eval_resources
        )
        await self.eval_pool.start()
        self.env_info = dict(self.eval_pool.ready_info or {})
        if cfg.compile_step:
            cores = len(compile_cpus) or os.cpu_count() or 1
            n = cfg.compile_workers or (max(1, cores // 4) if self.gpus else 1)
            compile_env = {"MAX_JOBS": str(max(1, cores // n)), **node_limit}
            if eval_cpus:
                compile_env["KS_CPUS"] = ",".join(map(str, compile_cpus))
            if self.env_info.get("cuda_arch"):
                compile_env["TORCH_CUDA_ARCH_LIST"] = str(self.env_info["cuda_arch"])
            if cfg.build_pch:
                compile_env["KS_BUILD_PCH"] = str(self.build_cache.root / "pch")
            self.compile_pool = self._runner(
                pool_config("compile", compile_env, {}), [None] * n, cfg.ray_compile_resources
            )
            await self.compile_pool.start()
        for role, iso in self.isolation().items():
            if iso is not None:
                self._log_isolation(role, iso)

    def isolation(self) -> dict[str, dict[str, Any] | None]:
        """Each pool's isolation, as its first worker reported it (``sandbox.IsolationReport``: the
        namespaces, Landlock, rlimits, private /dev/shm, and in ``fallbacks`` what is missing and why)."""
        return {
            role: (pool.ready_info or {}).get("isolation") if pool is not None else None
            for role, pool in (("eval", self.eval_pool), ("compile", self.compile_pool))
        }

    @staticmethod
    def _log_isolation(role: str, iso: dict[str, Any]) -> None:
        report = IsolationReport.model_validate(iso)
        missing = f"; missing: {'; '.join(report.fallbacks)}" if report.fallbacks else ""
        level = logging.WARNING if report.fallbacks else logging.INFO
        logger.log(level, "%s workers' isolation: %s%s", role, report.summary(), missing)

    async def info(self) -> dict[str, Any]:
        """``GET /v1/info``: the hardware and versions the workers judge on, and how they are isolated
        (``isolation``: each pool's report, with a one-line ``summary``)."""
        isolation = {
            role: None if iso is None else {"summary": IsolationReport.model_validate(iso).summary(), **iso}
            for role, iso in self.isolation().items()
        }
        return {
            "hardware": self.env_info.get("hardware"),
            "torch_version": self.env_info.get("torch_version"),
            "cuda_version": self.env_info.get("cuda_version"),
            "gpus": self.gpus,
            "mps": self.mps_running,
            "sandbox": self.config.sandbox,
            "isolation": isolation,
        }

    async def _start_mps(self, work: Path, devices: list[str]) -> dict[str, dict[str, str]]:
        """One MPS daemon a GPU (``workers.mps`` says why); each eval worker's environment for its own.
        Where one cannot start, none runs (``mps='auto'``) or the service refuses to start (``'on'``)."""
        self._mps = [MpsDaemon(work, d) for d in devices]
        for daemon in self._mps:
            if not await anyio.to_thread.run_sync(daemon.start):
                await self._stop_mps()
                if self.config.mps == "on":
                    raise RuntimeError(
                        "mps='on' but an MPS control daemon could not be started (see the log)"
                    )
                return {}
        return {d.gpu: d.client_env for d in self._mps}

    async def _stop_mps(self) -> None:
        for daemon in self._mps:
            await anyio.to_thread.run_sync(daemon.stop)
        self._mps = []

    def _runner(
        self, config: WorkerConfig, devices: list[str | None], resources: dict[str, float] | None = None
    ) -> JobRunner:
        if self._ray is not None:
            runner: JobRunner = self._ray.pool(config, devices, resources)
            return runner
        return WorkerPool(config, devices)

    async def shutdown(self) -> None:
        for task in list(self._background):
            task.cancel()
        for pool in (self.eval_pool, self.compile_pool):
            if pool is not None:
                await pool.close()
        if self._ray is not None:
            await anyio.to_thread.run_sync(self._ray.shutdown)
            self._ray = None
        await self._stop_mps()
        if self._own_work_dir is not None:
            own, self._own_work_dir = self._own_work_dir, None
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(own, ignore_errors=True))

    async def metrics(self) -> dict[str, Any]:
        """``GET /v1/metrics``: each pool's jobs, worker-seconds and cancellations (``WorkMeter``), the
        result cache, and ``cancelled``: jobs dropped or stopped because their clients went away."""
        pools: dict[str, Any] = {}
        for name, pool in (("eval", self.eval_pool), ("compile", self.compile_pool)):
            meter = getattr(pool, "meter", None)
            if meter is not None:
                pools[name] = meter.snapshot()
        cache = self.result_cache
        return {
            "pools": pools,
            "cancelled": sum(int(p["cancelled_queued"] + p["cancelled_running"]) for p in pools.values()),
            "in_flight_shared": len(self._inflight),
            "joined_in_flight": self._joined,
            "retries": self._retries,
            "result_cache": None
            if cache is None
            else {"entries": len(cache), "hits": cache.hits, "misses": cache.misses},
        }

    # ---- datasets -----------------------------------------------------------------------------

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        """``backendbench-<suite>``: one task per op; anything else: the KernelBench problem store."""
        if dataset.startswith("backendbench-"):
            return await anyio.to_thread.run_sync(suite_tasks, dataset)
        return [p.as_task() for p in self.problems.dataset(dataset)]

    def _reference_source(self, request: KernelEvalRequest) -> str:
        if request.reference is not None:
            return request.reference
        assert request.task_id is not None
        try:
            return self.problems.find(request.task_id, request.dataset).code
        except KeyError as exc:
            from benchmark_runner.service.app import HTTPError

            raise HTTPError(404, f"task_id: {exc.args[0]}") from exc

    # ---- evaluation ---------------------------------------------------------------------------

    def _versions(self) -> str:
        info = self.env_info
        return "|".join(
            str(x)
            for x in (
                info.get("torch_version"),
                info.get("cuda_version"),
                info.get("cuda_arch"),
                sys.version_info[:2],
            )
        ) + ("|pch" if self.config.build_pch else "")

    def _environment(self) -> dict[str, Any]:
        """What a cached verdict is valid for: the hardware and software that produced it."""
        return {
            "hardware": self.env_info.get("hardware"),
            "versions": self._versions(),
            "timing": TIMING_VERSION,
            "threads": self.config.cpu_threads,
            "mps": self.mps_running,
            "own_baseline": self.config.own_baseline,
        }

    def _base_fields(self, request: KernelEvalRequest) -> dict[str, Any]:
        return {
            "backend": request.backend,
            "hardware": self.env_info.get("hardware"),
            "torch_version": self.env_info.get("torch_version"),
            "cuda_version": self.env_info.get("cuda_version"),
            "correctness_trials": request.options.correctness_trials,
            "precision": request.options.precision,
            "isolation": self.env_info.get("isolation"),
        }

    @overload
    async def evaluate(self, request: KernelEvalRequest) -> KernelEvalResponse: ...
    @overload
    async def evaluate(self, request: BackendBenchEvalRequest) -> EvalResultData: ...
    @overload
    async def evaluate(self, request: EvaluateAnyRequest) -> KernelEvalResponse | EvalResultData: ...

    async def evaluate(
        self, request: KernelEvalRequest | BackendBenchEvalRequest | EvaluateAnyRequest
    ) -> KernelEvalResponse | EvalResultData:
        """Dispatch on the request's kind: KernelBench -> :class:`KernelEvalResponse`, BackendBench ->
        the generic :class:`EvalResultData` (score = overall, verdict under ``details``)."""
        req = request.root if isinstance(request, EvaluateAnyRequest) else request
        if isinstance(req, BackendBenchEvalRequest):
            return (await self.evaluate_backendbench_request(req)).to_eval_result_data()
        return await self.evaluate_kernelbench(req)

    async def evaluate_batch(
        self, requests: list[KernelEvalRequest | BackendBenchEvalRequest | EvaluateAnyRequest]
    ) -> list[KernelEvalResponse | EvalResultData]:
        """``POST /v1/evaluate-batch``: the BackendBench requests judged together (a few worker jobs for
        all of them: ``backendbench_service.run_batch_in_pool``), the others one by one, concurrently."""
        reqs = [r.root if isinstance(r, EvaluateAnyRequest) else r for r in requests]
        answers: list[KernelEvalResponse | EvalResultData | None] = [None] * len(reqs)
        batch = [i for i, r in enumerate(reqs) if isinstance(r, BackendBenchEvalRequest)]

        async def backendbench() -> None:
            todo = []
            for i in batch:
                req = reqs[i]
                assert isinstance(req, BackendBenchEvalRequest)
                if not self.has_gpu and req.options.device == "cuda":
                    answers[i] = BackendBenchEvalResponse.failure(
                        req, "requires_gpu", "device 'cuda' requires a CUDA GPU and this service has none"
                    ).to_eval_result_data()
                else:
                    todo.append(i)
            if todo:
                assert self.eval_pool is not None
                chosen = [reqs[i] for i in todo]
                verdicts = await run_batch_in_pool(self.eval_pool, chosen)  # type: ignore[arg-type]
                for i, verdict in zip(todo, verdicts, strict=True):
                    answers[i] = verdict.to_eval_result_data()

        async def kernelbench(i: int) -> None:
            answers[i] = await self.evaluate(reqs[i])

        if self.eval_pool is None:
            raise RuntimeError("KernelService.startup() was not called")
        async with anyio.create_task_group() as tg:
            if batch:
                tg.start_soon(backendbench)
            for i, req in enumerate(reqs):
                if not isinstance(req, BackendBenchEvalRequest):
                    tg.start_soon(kernelbench, i)
        return [a for a in answers if a is not None]

    async def evaluate_kernelbench(self, request: KernelEvalRequest) -> KernelEvalResponse:
        """A KernelBench evaluation, answered from the result cache when an identical one was judged."""
        started = time.monotonic()
        if self.eval_pool is None or self.build_cache is None:
            raise RuntimeError("KernelService.startup() was not called")
        reference = self._reference_source(request)
        cache = self.result_cache if request.options.use_result_cache else None
        if cache is None:
            return (await self._evaluate_kernelbench(request, reference, started))[0]
        key = result_key(
            reference,
            request.solution,
            request.backend,
            request.options.model_dump(mode="json"),
            self._environment(),
        )
        hit = cache.get(key)
        if hit is not None:
            return self._replayed(hit, started)
        shared = self._inflight.get(key)
        if shared is not None:  # an identical evaluation is running: wait for its verdict
            shared.joined += 1
            self._joined += 1
            done = await shared.wait()
            if done is not None and done[1] and cache.cacheable(done[0]):
                return self._replayed(done[0].model_copy(deep=True), started)
            # not replayable (a timeout, a dead worker): judge this one afresh
        shared = self._share(key, lambda: self._evaluate_and_cache(cache, key, request, reference, started))
        done = await shared.wait()
        if done is None:
            raise RuntimeError("the evaluation was cancelled (the service is shutting down)")
        return done[0] if shared.joined == 0 else done[0].model_copy(deep=True)

    @staticmethod
    def _replayed(response: KernelEvalResponse, started: float) -> KernelEvalResponse:
        response.cached = True
        response.elapsed = Elapsed(total_s=time.monotonic() - started)
        return response

    def _share(
        self, key: str, work: Callable[[], Awaitable[tuple[KernelEvalResponse, bool]]]
    ) -> SharedRun[tuple[KernelEvalResponse, bool]]:
        def forget() -> None:
            if self._inflight.get(key) is shared:
                del self._inflight[key]

        shared = SharedRun(work, forget)
        self._inflight[key] = shared
        shared.task.add_done_callback(lambda _task: forget())
        return shared

    async def _evaluate_and_cache(
        self, cache: ResultCache, key: str, request: KernelEvalRequest, reference: str, started: float
    ) -> tuple[KernelEvalResponse, bool]:
        response, replayable = await self._evaluate_kernelbench(request, reference, started)
        if replayable:
            cache.put(key, response)
        return response, replayable

    async def _evaluate_kernelbench(
        self, request: KernelEvalRequest, reference: str, started: float
    ) -> tuple[KernelEvalResponse, bool]:
        """The verdict, and whether it may be replayed from the result cache: not when a worker died or
        timed out (that says something about the host at that moment, not only about the submission)."""
        assert self.eval_pool is not None and self.build_cache is not None
        opts = request.options
        base = self._base_fields(request)
        if not self.has_gpu and (request.backend in GPU_BACKENDS or opts.device == "cuda"):
            why = f"backend {request.backend!r}" if request.backend in GPU_BACKENDS else "device 'cuda'"
            return KernelEvalResponse.failure(
                Outcome.REQUIRES_GPU,
                f"{why} requires a CUDA GPU and this service has none; submit backend 'torch' or 'cpp' here",
                **base,
            ), False

        built: tuple[KernelEvalResponse | None, float, float] | None = None
        if self.config.light_include and request.backend in COMPILED_BACKENDS and self.compile_pool:
            request, built = await race_light_build(self, request, base)
        build_dir = self.build_cache.dir_for(request.solution, request.backend, self._versions())
        with self.build_cache.pinned(build_dir):
            return await self._evaluate_pinned(request, reference, started, build_dir, base, built)

    async def _evaluate_pinned(
        self,
        request: KernelEvalRequest,
        reference: str,
        started: float,
        build_dir: Path,
        base: dict[str, Any],
        built: tuple[KernelEvalResponse | None, float, float] | None = None,
    ) -> tuple[KernelEvalResponse, bool]:
        """``built``: the compile already done for this build dir (``race_light_build``), if any."""
        assert self.eval_pool is not None and self.build_cache is not None
        opts = request.options
        cache_hit: bool | None = None
        compile_s = 0.0
        queue_s = 0.0
        if request.backend in COMPILED_BACKENDS and self.compile_pool is not None:
            cache_hit = False if built is not None else self.build_cache.lookup(build_dir)
            if not cache_hit:
                early, compile_s, queue_s = built or await self._compile(request, build_dir, base)
                if early is not None:
                    early.elapsed = Elapsed(
                        queue_s=queue_s, compile_s=compile_s, total_s=time.monotonic() - started
                    )
                    early.extension_cache_hit = False
                    # Only a definite build error (the compiler's own verdict) may be replayed.
                    return early, early.compile_log is not None
                await anyio.to_thread.run_sync(self.build_cache.evict)

        ref_key = None
        cached = None
        if self.config.ref_timing_cache and opts.measure_performance:
            timing_cfg = {
                "v": TIMING_VERSION,
                "perf_trials": opts.perf_trials,
                "warmup": opts.warmup,
                "device": opts.device,
                "threads": self.config.cpu_threads,
                "tf32": opts.tf32,
                **(
                    {"precision": opts.precision} if opts.precision != "fp32" else {}
                ),  # fp32: earlier keys hold
                **({"module_mode": opts.module_mode} if opts.module_mode != "train" else {}),
            }
            ref_key = RefTimingCache.key(
                reference,
                str(self.env_info.get("hardware")),
                str(self.env_info.get("torch_version")),
                timing_cfg,
            )
            if opts.reuse_reference_timing:
                cached = self.ref_cache.get(ref_key)

        job = {
            "job_id": uuid.uuid4().hex[:12],
            "kind": "kernelbench",
            "mode": "eval",
            "reference": reference,
            "solution": request.solution,
            "backend": request.backend,
            "options": opts.model_dump(mode="json"),
            "build_dir": str(build_dir),
            "cached_ref_timing": cached.model_dump() if cached else None,
            "failed_builds": self._failed_builds.get(str(build_dir), []),
        }
        reply, waited, retries = await self._run_retrying(job, opts.timeout_s + KILL_GRACE_S)
        queue_s += waited
        response = response_from(reply, base, request)
        response.retries = retries
        response.extension_cache_hit = cache_hit
        response.elapsed.queue_s = queue_s
        response.elapsed.compile_s += compile_s
        response.elapsed.total_s = time.monotonic() - started
        if (
            ref_key is not None
            and response.outcome == Outcome.CORRECT
            and response.ref_timing is not None
            and not response.ref_timing_cached
        ):
            self.ref_cache.put(ref_key, response.ref_timing)
        return response, reply.result is not None

    async def _run_retrying(self, job: dict[str, Any], timeout: float) -> tuple[Reply, float, list[str]]:
        """``job`` on the eval pool, run again (up to ``ENVIRONMENT_RETRIES`` times, a fresh job id each
        time) while it failed before the submission's code ran (:func:`environment_fault`): the reply, the
        seconds spent waiting for workers, and why each retry was made."""
        assert self.eval_pool is not None
        retries: list[str] = []
        waited_s = 0.0
        while True:
            reply, waited = await self.eval_pool.run(job, timeout)
            waited_s += waited
            why = environment_fault(reply)
            if why is None or len(retries) >= ENVIRONMENT_RETRIES:
                return reply, waited_s, retries
            retries.append(why[:300])
            self._retries += 1
            logger.warning(
                "job %s failed before the submission ran (%s): running it again", job["job_id"], why
            )
            job = {**job, "job_id": uuid.uuid4().hex[:12]}

    def compile_spare(self) -> int:
        """Compile workers free for another build now (none queued behind them)."""
        return 0 if self.compile_pool is None else max(0, self.compile_pool.size - self._compiling)

    async def _compile(
        self, request: KernelEvalRequest, build_dir: Path, base: dict[str, Any]
    ) -> tuple[KernelEvalResponse | None, float, float]:
        """Build the solution's extensions on a CPU compile worker; a definite build error ends here.

        Anything else that goes wrong while importing on the compile worker (e.g. the solution touches
        the GPU at import time) is not judged here: the device worker repeats the import and decides.
        """
        assert self.compile_pool is not None and self.build_cache is not None
        job = {
            "job_id": uuid.uuid4().hex[:12],
            "kind": "kernelbench",
            "mode": "compile",
            "solution": request.solution,
            # what the compile worker builds and calls the model with, on ``meta``: lazy builds happen there
            "reference": self._reference_source(request),
            "backend": request.backend,
            "options": request.options.model_dump(mode="json"),
            "build_dir": str(build_dir),
        }
        self._compiling += 1
        try:
            reply, waited = await self.compile_pool.run(job, request.options.timeout_s + KILL_GRACE_S)
        finally:
            self._compiling -= 1
        if reply.result is None:
            if reply.failure == "timeout":
                return (
                    KernelEvalResponse.failure(
                        Outcome.TIMEOUT,
                        f"compilation exceeded timeout_s={request.options.timeout_s:g}",
                        output=excerpt(reply.output),
                        worker_id=reply.worker_id,
                        **base,
                    ),
                    request.options.timeout_s,
                    waited,
                )
            return (
                KernelEvalResponse.failure(
                    Outcome.COMPILATION_FAILURE,
                    f"{reply.message} while importing/compiling the solution",
                    output=excerpt(reply.output),
                    worker_id=reply.worker_id,
                    **base,
                ),
                0.0,
                waited,
            )
        res = reply.result
        compile_s = float(res.get("compile_s", 0.0))
        if res.get("ok"):
            self.build_cache.mark_built(build_dir)
            failed = [f for f in res.get("failed_builds") or [] if isinstance(f, dict)][:MAX_EXTENSIONS]
            if failed:
                self._failed_builds[str(build_dir)] = failed
                while len(self._failed_builds) > FAILED_BUILDS_KEPT:
                    self._failed_builds.popitem(last=False)
            return None, compile_s, waited
        if res.get("build_error"):
            return (
                KernelEvalResponse.failure(
                    Outcome.COMPILATION_FAILURE,
                    str(res.get("message", "build failed")),
                    compile_log=str(res.get("compile_log") or ""),  # a str marks the compiler's verdict
                    traceback=res.get("traceback"),
                    output=excerpt(res.get("output")),
                    worker_id=reply.worker_id,
                    **base,
                ),
                compile_s,
                waited,
            )
        return None, compile_s, waited

    # ---- scoring ------------------------------------------------------------------------------

    async def score(self, request: ScoreRequest) -> ScoreResult:
        """KernelBench metrics over all tasks, and per level (task ids ``levelN/...``); for a
        ``backendbench-*`` dataset, the mean score (= mean overall) and the share correct."""
        if request.dataset.startswith("backendbench-"):
            return await super().score(request)
        return kernelbench_score(request)

    # ---- BackendBench (H6) ----------------------------------------------------------------------

    async def evaluate_backendbench_request(
        self, request: BackendBenchEvalRequest
    ) -> BackendBenchEvalResponse:
        """One op's kernel on a (sandboxed) eval worker; a timeout or a dead worker becomes a verdict.

        ``backendbench_service.run_in_pool`` on whichever executor this service uses.
        """
        if self.eval_pool is None:
            raise RuntimeError("KernelService.startup() was not called")
        if not self.has_gpu and request.options.device == "cuda":
            return BackendBenchEvalResponse.failure(
                request, "requires_gpu", "device 'cuda' requires a CUDA GPU and this service has none"
            )
        return await run_in_pool(self.eval_pool, request)
