"""``KernelService``: the benchmark service that compiles, checks and times submitted kernels.

Flow of one ``evaluate``: resolve the reference (source or dataset task) -> refuse GPU-only backends
on a host without a GPU (``requires_gpu``) -> for ``cpp``/``cuda``, import the solution once in a CPU
compile worker so its ``load_inline`` builds land in a content-addressed build dir (skipped when that
dir is already marked built) -> run the evaluation in a device worker, which loads the cached
extension -> validate the worker's JSON with pydantic -> remember the reference timing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from benchmark_runner.schemas import EvalStatus, ScoreRequest, ScoreResult, TaskScore
from benchmark_runner.service import BenchmarkService

from .datasets import ProblemStore
from .metrics import TaskOutcome, kernelbench_metrics
from .pool import KILL_GRACE_S, Reply, WorkerConfig, WorkerPool
from .schemas import (
    COMPILED_BACKENDS,
    GPU_BACKENDS,
    Elapsed,
    KernelEvalRequest,
    KernelEvalResponse,
    Outcome,
    TimingStats,
    excerpt,
)

logger = logging.getLogger(__name__)

#: A crash during a phase is charged to the submission as this outcome (else: sandbox_error).
PHASE_OUTCOME: dict[str, Outcome] = {
    "compile": Outcome.COMPILATION_FAILURE,
    "load_solution": Outcome.COMPILATION_FAILURE,
    "init_solution": Outcome.INITIALIZATION_FAILURE,
    "correctness": Outcome.EXECUTION_FAILURE,
    "timing": Outcome.EXECUTION_FAILURE,
}
BUILT_MARKER = ".kernel-service-built"
#: Bump when the timing method changes: cached reference timings of another method are not comparable.
TIMING_VERSION = "1"


def detect_gpus() -> list[int]:
    """GPU indices visible to this process (``torch.cuda.device_count`` does not create a context)."""
    try:
        import torch

        return list(range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - no torch / broken driver: no GPUs
        return []


@dataclass
class KernelServiceConfig:
    """Deployment settings. ``gpus=None``: every visible GPU; ``[]``: CPU only."""

    gpus: list[int] | None = None
    cpu_workers: int = 1
    compile_workers: int | None = None  # None: 1 on CPU hosts, cores // 4 on GPU hosts
    cpu_threads: int = 1  # torch threads per CPU worker (timings on a shared CPU are noisy otherwise)
    dataset_sources: list[Path] = field(default_factory=list)
    work_dir: Path | None = None
    build_cache_dir: Path | None = None
    compile_step: bool = True
    ref_timing_cache: bool = True
    ref_timing_cache_file: Path | None = None
    sandbox: str = "auto"
    max_jobs_per_worker: int = 50
    fsize_bytes: int = 1 << 30
    nproc: int | None = None


class BuildCache:
    """Content-addressed ``TORCH_EXTENSIONS_DIR`` per solution.

    The key hashes the solution source, backend, torch/CUDA/Python versions and target arch: the same
    submission resubmitted finds its built extension; any change gets a fresh dir (no rebuild races
    between different solutions that reuse an extension name).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def dir_for(self, solution: str, backend: str, versions: str) -> Path:
        key = hashlib.sha256("\0".join([solution, backend, versions]).encode()).hexdigest()[:24]
        return self.root / key

    @staticmethod
    def is_built(path: Path) -> bool:
        return (path / BUILT_MARKER).exists()

    @staticmethod
    def mark_built(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / BUILT_MARKER).touch()


class RefTimingCache:
    """Reference timings by (problem source hash, hardware, torch version, timing config).

    Trade-off: a cached reference time skips half of the timing work but is not interleaved with the
    candidate's trials, so slow drift (clocks, thermals, other tenants) between the two runs is not
    cancelled. Only valid on identical hardware and software, which the key enforces; disable per
    request (``reuse_reference_timing: false``) or per service when exact pairing matters.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            try:
                self._data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                logger.warning("ignoring unreadable reference timing cache %s", path)

    @staticmethod
    def key(reference: str, hardware: str, torch_version: str, config: dict[str, Any]) -> str:
        blob = json.dumps([hashlib.sha256(reference.encode()).hexdigest(), hardware, torch_version, config])
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> TimingStats | None:
        with self._lock:
            raw = self._data.get(key)
        return TimingStats.model_validate(raw) if raw else None

    def put(self, key: str, stats: TimingStats) -> None:
        with self._lock:
            self._data[key] = stats.model_dump()
            if self.path is not None:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(self._data))
                os.replace(tmp, self.path)


class KernelService(BenchmarkService):
    name: ClassVar[str] = "kernel"
    evaluate_request_model = KernelEvalRequest
    evaluate_response_model = KernelEvalResponse

    def __init__(self, config: KernelServiceConfig | None = None) -> None:
        self.config = config or KernelServiceConfig()
        self.gpus: list[int] = []
        self._own_work_dir: tempfile.TemporaryDirectory[str] | None = None
        self.eval_pool: WorkerPool | None = None
        self.compile_pool: WorkerPool | None = None
        self.problems = ProblemStore.from_sources(self.config.dataset_sources)
        self.ref_cache = RefTimingCache(self.config.ref_timing_cache_file)
        self.build_cache: BuildCache | None = None
        self.env_info: dict[str, Any] = {}

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    async def startup(self) -> None:
        cfg = self.config
        self.gpus = detect_gpus() if cfg.gpus is None else list(cfg.gpus)
        if cfg.work_dir is None:
            self._own_work_dir = tempfile.TemporaryDirectory(prefix="kernel-service-")
            work = Path(self._own_work_dir.name)
        else:
            work = Path(cfg.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        self.build_cache = BuildCache(
            Path(cfg.build_cache_dir) if cfg.build_cache_dir else work / "build-cache"
        )
        eval_env = {"OMP_NUM_THREADS": str(cfg.cpu_threads), "MKL_NUM_THREADS": str(cfg.cpu_threads)}
        devices: list[str | None] = (
            [str(g) for g in self.gpus] if self.gpus else [None] * max(1, cfg.cpu_workers)
        )
        self.eval_pool = WorkerPool(
            WorkerConfig(
                role="eval",
                root=work,
                max_jobs_per_worker=cfg.max_jobs_per_worker,
                env=eval_env,
                fsize_bytes=cfg.fsize_bytes,
                nproc=cfg.nproc,
                sandbox=cfg.sandbox,
            ),
            devices,
        )
        await self.eval_pool.start()
        self.env_info = dict(self.eval_pool.ready_info or {})
        if cfg.compile_step:
            cores = os.cpu_count() or 1
            n = cfg.compile_workers or (max(1, cores // 4) if self.gpus else 1)
            compile_env = {"MAX_JOBS": str(max(1, cores // n))}
            if self.env_info.get("cuda_arch"):
                compile_env["TORCH_CUDA_ARCH_LIST"] = str(self.env_info["cuda_arch"])
            self.compile_pool = WorkerPool(
                WorkerConfig(
                    role="compile",
                    root=work,
                    max_jobs_per_worker=cfg.max_jobs_per_worker,
                    env=compile_env,
                    fsize_bytes=cfg.fsize_bytes,
                    nproc=cfg.nproc,
                    sandbox=cfg.sandbox,
                ),
                [None] * n,
            )
            await self.compile_pool.start()

    async def shutdown(self) -> None:
        for pool in (self.eval_pool, self.compile_pool):
            if pool is not None:
                await pool.close()
        if self._own_work_dir is not None:
            self._own_work_dir.cleanup()

    # ---- datasets -----------------------------------------------------------------------------

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
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
        )

    def _base_fields(self, request: KernelEvalRequest) -> dict[str, Any]:
        return {
            "backend": request.backend,
            "hardware": self.env_info.get("hardware"),
            "torch_version": self.env_info.get("torch_version"),
            "cuda_version": self.env_info.get("cuda_version"),
            "correctness_trials": request.options.correctness_trials,
        }

    async def evaluate(self, request: KernelEvalRequest) -> KernelEvalResponse:
        started = time.monotonic()
        if self.eval_pool is None or self.build_cache is None:
            raise RuntimeError("KernelService.startup() was not called")
        reference = self._reference_source(request)
        opts = request.options
        base = self._base_fields(request)
        if not self.has_gpu and (request.backend in GPU_BACKENDS or opts.device == "cuda"):
            why = f"backend {request.backend!r}" if request.backend in GPU_BACKENDS else "device 'cuda'"
            return KernelEvalResponse.failure(
                Outcome.REQUIRES_GPU,
                f"{why} requires a CUDA GPU and this service has none; submit backend 'torch' or 'cpp' here",
                **base,
            )

        build_dir = self.build_cache.dir_for(request.solution, request.backend, self._versions())
        cache_hit: bool | None = None
        compile_s = 0.0
        queue_s = 0.0
        if request.backend in COMPILED_BACKENDS and self.compile_pool is not None:
            cache_hit = BuildCache.is_built(build_dir)
            if not cache_hit:
                early, compile_s, queue_s = await self._compile(request, build_dir, base)
                if early is not None:
                    early.elapsed = Elapsed(
                        queue_s=queue_s, compile_s=compile_s, total_s=time.monotonic() - started
                    )
                    return early

        ref_key = None
        cached = None
        if self.config.ref_timing_cache and opts.measure_performance:
            timing_cfg = {
                "v": TIMING_VERSION,
                "perf_trials": opts.perf_trials,
                "warmup": opts.warmup,
                "device": opts.device,
                "threads": self.config.cpu_threads,
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
        }
        reply, waited = await self.eval_pool.run(job, opts.timeout_s + KILL_GRACE_S)
        queue_s += waited
        response = self._response_from(reply, base, request)
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
        return response

    async def _compile(
        self, request: KernelEvalRequest, build_dir: Path, base: dict[str, Any]
    ) -> tuple[KernelEvalResponse | None, float, float]:
        """Build the solution's extensions on a CPU compile worker; a definite build error ends here.

        Anything else that goes wrong while importing on the compile worker (e.g. the solution touches
        the GPU at import time) is not judged here: the device worker repeats the import and decides.
        """
        assert self.compile_pool is not None
        job = {
            "job_id": uuid.uuid4().hex[:12],
            "kind": "kernelbench",
            "mode": "compile",
            "solution": request.solution,
            "backend": request.backend,
            "options": request.options.model_dump(mode="json"),
            "build_dir": str(build_dir),
        }
        reply, waited = await self.compile_pool.run(job, request.options.timeout_s + KILL_GRACE_S)
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
            BuildCache.mark_built(build_dir)
            return None, compile_s, waited
        if res.get("build_error"):
            return (
                KernelEvalResponse.failure(
                    Outcome.COMPILATION_FAILURE,
                    str(res.get("message", "build failed")),
                    compile_log=res.get("compile_log"),
                    traceback=res.get("traceback"),
                    output=excerpt(res.get("output")),
                    worker_id=reply.worker_id,
                    **base,
                ),
                compile_s,
                waited,
            )
        return None, compile_s, waited

    def _response_from(
        self, reply: Reply, base: dict[str, Any], request: KernelEvalRequest
    ) -> KernelEvalResponse:
        if reply.result is None:
            if reply.failure == "timeout":
                outcome = Outcome.TIMEOUT
                msg = f"evaluation exceeded timeout_s={request.options.timeout_s:g} (during {reply.phase or 'startup'}); worker killed"
            elif reply.failure == "crash":
                outcome = PHASE_OUTCOME.get(reply.phase or "", Outcome.SANDBOX_ERROR)
                msg = f"{reply.message} during {reply.phase or 'startup'}; worker replaced"
            else:
                outcome = Outcome.SANDBOX_ERROR
                msg = f"worker protocol error: {reply.message}"
            return KernelEvalResponse.failure(
                outcome, msg, output=excerpt(reply.output), worker_id=reply.worker_id, **base
            )
        try:
            response = KernelEvalResponse.model_validate({**reply.result, "worker_id": reply.worker_id})
        except ValidationError as exc:
            return KernelEvalResponse.failure(
                Outcome.SANDBOX_ERROR,
                f"worker answered an invalid result: {exc.errors()[:3]}",
                worker_id=reply.worker_id,
                **base,
            )
        return response

    # ---- scoring ------------------------------------------------------------------------------

    async def score(self, request: ScoreRequest) -> ScoreResult:
        """KernelBench metrics over all tasks, and per level (task ids ``levelN/...``)."""
        outcomes: list[tuple[str, TaskOutcome]] = []
        per_task = []
        for e in request.evaluations:
            speedup = e.data.details.get("speedup") if isinstance(e.data.details, dict) else None
            correct = e.data.status == EvalStatus.CORRECT
            outcomes.append(
                (e.task_id, TaskOutcome(correct, float(speedup) if speedup else None, e.data.score))
            )
            per_task.append(
                TaskScore(task_id=e.task_id, status=e.data.status, score=e.data.score, outcome=e.data.outcome)
            )
        groups: dict[str, list[TaskOutcome]] = {}
        for task_id, o in outcomes:
            if task_id.startswith("level") and "/" in task_id:
                groups.setdefault(task_id.split("/", 1)[0], []).append(o)
        return ScoreResult(
            model=request.model,
            n_tasks=len(outcomes),
            metrics=kernelbench_metrics([o for _, o in outcomes]),
            groups={g: kernelbench_metrics(v) for g, v in sorted(groups.items())},
            per_task=per_task,
        )

    # ---- BackendBench (H6) ----------------------------------------------------------------------

    async def evaluate_backendbench(
        self, request: dict[str, Any], timeout_s: float = 300.0
    ) -> dict[str, Any]:
        """Run H6's BackendBench evaluator in a sandboxed eval worker; JSON in, JSON out.

        Returns the evaluator's dict, or ``{"failure": "timeout"|"sandbox_error", "message": ...}`` when the
        worker died or timed out (the caller converts it with ``BackendBenchEvalResponse.failure``).
        """
        if self.eval_pool is None:
            raise RuntimeError("KernelService.startup() was not called")
        job = {"job_id": uuid.uuid4().hex[:12], "kind": "backendbench", "request": request}
        reply, _ = await self.eval_pool.run(job, timeout_s + KILL_GRACE_S)
        if reply.result is None:
            failure = "timeout" if reply.failure == "timeout" else "sandbox_error"
            return {"failure": failure, "message": f"{reply.message} during {reply.phase or 'evaluation'}"}
        reply.result.pop("output", None)
        return reply.result
