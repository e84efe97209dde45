"""A solution's job on a real compile pool, then on a real eval pool (CPU workers): where its builds were made.

The build tests (``test_ks_lazy_builds.py``, ``test_ks_build_relocation.py``) ask the same two questions of
different solutions: did the compile pool build every extension into the job's build dir, and did the eval
worker only load them (no library written again, no build time in its phases)?
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import ks_sources as S
from kernel_service.workers.pool import Reply, WorkerConfig, WorkerPool


def build_job(solution: str, build_dir: Path) -> dict[str, Any]:
    """A correctness-only job of ``solution`` against ``S.REF_ADD`` building into ``build_dir``."""
    return {
        "reference": S.REF_ADD,
        "solution": solution,
        "backend": "cpp",
        "build_dir": str(build_dir),
        "options": {**S.FAST, "measure_performance": False, "timeout_s": 600},
    }


def libraries(root: Path) -> dict[str, float]:
    """Every ``.so`` under ``root`` (its path below ``root``) with its mtime: a rebuild changes it."""
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*.so")}


async def _compile(tmp_path: Path, job: dict[str, Any], env: dict[str, str]) -> Reply:
    pool = WorkerPool(WorkerConfig(role="compile", root=tmp_path, env=env), [None])
    await pool.start()
    try:
        compiled, _ = await pool.run({**job, "job_id": "c1", "mode": "compile"}, 600)
        return compiled
    finally:
        await pool.close()


def compile_only(
    tmp_path: Path, job: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[Reply, dict[str, float]]:
    """The compile job (its workers' environment plus ``env``) and the libraries it left in the build dir."""
    compiled = anyio.run(_compile, tmp_path, job, env or {})
    return compiled, libraries(Path(job["build_dir"]))


def compile_then_judge(tmp_path: Path, job: dict[str, Any]) -> tuple[Reply, dict[str, float], Reply]:
    """The compile job, the libraries it left in the build dir, then the eval job."""
    compiled, built = compile_only(tmp_path, job)
    time.sleep(1.1)  # a rebuild would show in the libraries' mtimes

    async def judge() -> Reply:
        pool = WorkerPool(WorkerConfig(role="eval", root=tmp_path), [None])
        await pool.start()
        try:
            judged, _ = await pool.run({**job, "job_id": "e1", "mode": "eval"}, 600)
            return judged
        finally:
            await pool.close()

    return compiled, built, anyio.run(judge)
