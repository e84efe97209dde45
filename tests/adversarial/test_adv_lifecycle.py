"""Worker lifecycle through a real WorkerPool (real worker subprocesses, no HTTP): recycling after
``max_jobs_per_worker`` jobs and after a fault or a patch, the isolation report, and no false positives
from the integrity checks on honest submissions whose reference updates its own buffers."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from adv_helpers import FAST, REF, source
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.workers.pool import WorkerConfig, WorkerPool, resolve_launcher

_ids = itertools.count(1)
#: As the service does: one intra-op thread per CPU worker keeps timings stable on a shared machine.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

FAULTY = """
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("kernel launch failed")
"""

# Reference in training mode: BatchNorm updates its running stats in place on every reference call.
REF_BN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.lin = nn.Linear(c, c)
        self.bn = nn.BatchNorm1d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.lin(x)))

def get_inputs():
    return [torch.randn(32, 16)]

def get_init_inputs():
    return [16]
"""
SOL_BN = REF_BN.replace("class Model(", "class ModelNew(")


def _job(build: Path, solution: str, reference: str = REF, **options: Any) -> dict[str, Any]:
    return {
        "job_id": f"j{next(_ids)}",
        "mode": "eval",
        "reference": reference,
        "solution": solution,
        "backend": "torch",
        "options": {**FAST, **options},
        "build_dir": str(build / "work" / "build-cache" / "b"),
    }


def _run(
    tmp_path: Path, max_jobs: int, jobs: list[dict[str, Any]], env: dict[str, str] | None = None
) -> list[tuple[KernelEvalResponse, str]]:
    async def main() -> list[tuple[KernelEvalResponse, str]]:
        config = WorkerConfig(
            root=tmp_path / "work", max_jobs_per_worker=max_jobs, env={**ONE_THREAD, **(env or {})}
        )
        pool = WorkerPool(config, [None])
        await pool.start()
        out = []
        try:
            for job in jobs:
                reply, _ = await pool.run(job, 60)
                assert reply.result is not None, (reply.failure, reply.message, reply.output)
                res = KernelEvalResponse.model_validate({**reply.result, "worker_id": reply.worker_id})
                out.append((res, reply.worker_id))
        finally:
            await pool.close()
        return out

    return asyncio.run(main())


def test_worker_is_replaced_after_max_jobs_and_after_faults(tmp_path: Path) -> None:
    honest = source("honest")
    jobs = [
        _job(tmp_path, honest),  # worker 1
        _job(tmp_path, honest),  # worker 1, its 2nd job: recycled (max_jobs_per_worker=2)
        _job(tmp_path, honest),  # worker 2
        _job(tmp_path, FAULTY),  # worker 2, 2nd job: execution_failure
        _job(tmp_path, honest),  # worker 3
        _job(tmp_path, source("patch_harness_compare")),  # worker 3, 2nd job: its patch stays in its process
        _job(tmp_path, honest),  # worker 4
    ]
    results = _run(tmp_path, 2, jobs)
    outcomes = [r.outcome.value for r, _ in results]
    workers = [w for _, w in results]
    assert outcomes == [
        "correct",
        "correct",
        "correct",
        "execution_failure",
        "correct",
        "incorrect",
        "correct",
    ], [r.message for r, _ in results]
    assert workers[0] == workers[1] != workers[2], workers
    assert workers[2] == workers[3] != workers[4], workers
    assert workers[4] == workers[5] != workers[6], workers
    assert len(set(workers)) == 4
    assert [r.recycled is not None for r, _ in results] == [False, True, False, True, False, True, False]
    assert "max_jobs_per_worker" in (results[1][0].recycled or "")
    assert "differ" in results[5][0].message or "outside" in results[5][0].message, results[5][0].message
    for res, _ in results:
        if res.outcome.value == "correct":
            assert res.speedup is not None and 0.3 < res.speedup < 3, res.speedup


def test_a_fault_costs_only_the_candidate_process(tmp_path: Path) -> None:
    """A crashing submission takes down its own candidate process, not the judge: the same worker
    answers the next job, right."""
    results = _run(
        tmp_path,
        50,
        [_job(tmp_path, source("honest")), _job(tmp_path, FAULTY), _job(tmp_path, source("honest"))],
    )
    (ok1, w1), (bad, w2), (ok2, w3) = results
    assert (ok1.outcome.value, bad.outcome.value, ok2.outcome.value) == (
        "correct",
        "execution_failure",
        "correct",
    )
    assert "kernel launch failed" in bad.message
    assert w1 == w2 == w3
    assert bad.recycled is None


def test_honest_batchnorm_reference_is_not_flagged(tmp_path: Path) -> None:
    """The reference updates its BatchNorm running stats in place on each call: not a solution's tampering."""
    results = _run(tmp_path, 50, [_job(tmp_path, SOL_BN, REF_BN), _job(tmp_path, SOL_BN, REF_BN)])
    for res, _ in results:
        assert res.outcome.value == "correct", res.message
        assert res.uses_custom_kernel is False and res.custom_kernels == []
        assert res.phases is not None and {"load", "correctness", "timing"} <= res.phases.keys()
    assert results[0][1] == results[1][1]  # an honest job does not cost a worker restart


COMPILED = """
import torch
import torch.nn as nn
from concurrent.futures import ThreadPoolExecutor

_idle_pool = ThreadPoolExecutor(1)
_idle_pool.submit(int).result()  # its thread now waits, idle, for work that never comes

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.f = torch.compile(lambda x, w: torch.relu(x @ w) - torch.relu(-(x @ w)))

    def forward(self, x):
        return self.f(x, self.weight)
"""


def test_torch_compile_and_idle_pool_threads_keep_the_worker(tmp_path: Path) -> None:
    """torch.compile (inductor compiling in-process) and a submission's threads, idle or still running,
    live in its candidate process and die with it: the judge serves every next job."""
    results = _run(
        tmp_path,
        50,
        [
            _job(tmp_path, COMPILED),
            _job(tmp_path, source("honest")),
            _job(tmp_path, source("thread_offload")),
            _job(tmp_path, source("honest")),
        ],
        env={"TORCHINDUCTOR_COMPILE_THREADS": "1"},
    )
    (compiled, w1), (ok, w2), (offload, w3), (ok2, w4) = results
    assert compiled.outcome.value == ok.outcome.value == ok2.outcome.value == "correct", compiled.message
    assert w1 == w2 == w3 == w4
    assert compiled.recycled is None and ok.recycled is None and offload.recycled is None
    assert offload.outcome.value != "correct" or (offload.speedup or 0) <= 1.1, offload


def test_isolation_report_in_every_answer(tmp_path: Path) -> None:
    ((res, _),) = _run(tmp_path, 50, [_job(tmp_path, source("honest"))])
    iso = res.isolation
    assert iso is not None
    launcher, _ = resolve_launcher("auto")
    assert iso["launcher"] == launcher
    assert iso["pid_namespace"] is (launcher != "none")
    assert iso["rlimits"]["core"] == 0
    if launcher != "bwrap":
        assert any("bwrap" in f for f in iso["fallbacks"]), iso["fallbacks"]


def test_bad_sandbox_setting_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sandbox: expected one of auto, bwrap, unshare, none"):
        WorkerPool(WorkerConfig(root=tmp_path, sandbox="docker"), [None])
    assert resolve_launcher("none") == ("none", ("sandbox disabled by configuration (sandbox='none')",))


def test_torch_compiles_own_wrappers_are_not_patches() -> None:
    """``torch.compile`` replaces ``nn.Module.__init__``/``__setstate__`` by closures over the originals
    (dynamo's generation tagging): the guard must not call the torch-compile baseline a cheat, while a
    solution's own replacement of the same attribute is still caught."""
    code = textwrap.dedent(
        """
        import torch
        from kernel_service.judging.integrity import PatchGuard
        guard = PatchGuard.for_harness()
        from torch._dynamo.mutation_guard import install_generation_tagging_init
        install_generation_tagging_init()
        assert guard.violations() == [], guard.violations()
        init = torch.nn.Module.__init__
        torch.nn.Module.__init__ = lambda self, *a, **k: init(self, *a, **k)
        print(guard.violations())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch.nn.Module.__init__ was replaced" in out.stdout, out.stdout


def test_probe_sees_an_extension_loaded_outside_sys_modules(tmp_path: Path) -> None:
    """``load_inline`` imports what it built without registering it in ``sys.modules``; the probe must still
    see calls into it (stand-in: a copy of a small stdlib extension, loaded from an untrusted dir)."""
    code = textwrap.dedent(
        f"""
        import importlib.util, shutil, warnings
        from pathlib import Path
        from kernel_service.judging.integrity import KernelProbe, default_trusted_roots
        warnings.simplefilter("ignore")
        src = Path(importlib.util.find_spec("audioop").origin)  # found, not imported
        dst = Path({str(tmp_path)!r}) / src.name
        shutil.copy(src, dst)
        spec = importlib.util.spec_from_file_location("audioop", dst)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # like load_inline: not put into sys.modules
        probe = KernelProbe(default_trusted_roots())
        probe.run(lambda: mod.max(b"\\x00\\x01", 2))
        print(probe.usage.uses_custom_kernel, sorted(probe.usage.names))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "True" and "audioop.max" in out.stdout, out.stdout
