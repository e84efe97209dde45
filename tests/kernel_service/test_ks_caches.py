"""Build cache (content-addressed, LRU eviction by size) and result cache, with real builds and real HTTP.

The only C++ build here is the session's ``SOL_CPP_ADD`` extension (shared with test_ks_http.py through the
session build cache); eviction is exercised on copies of that real build, so no test compiles twice.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import ks_sources as S
import pytest
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig
from kernel_service.workers.build_cache import BUILT_MARKER, BuildCache, tree_size

from benchmark_runner.service.app import ServiceConfig, make_app
from benchmark_runner.service.server import RunningServer, start_server


def post(client: httpx.Client, solution: str, reference: str = S.REF_ADD, **kw: Any) -> KernelEvalResponse:
    options = {**S.FAST, **kw.pop("options", {})}
    r = client.post(
        "/v1/evaluate", json={"reference": reference, "solution": solution, "options": options, **kw}
    )
    assert r.status_code == 200, r.text
    return KernelEvalResponse.model_validate(r.json())


@pytest.fixture(scope="module")
def built_entry(kernel_server: RunningServer) -> Path:
    """The session's real build of SOL_CPP_ADD (compiled once per session, whichever test asks first)."""
    with httpx.Client(base_url=kernel_server.url, timeout=300) as client:
        res = post(client, S.SOL_CPP_ADD, backend="cpp", options={"timeout_s": 300})
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}\n{res.traceback}"
    service: KernelService = kernel_server.service  # type: ignore[attr-defined]
    assert service.build_cache is not None
    entry = service.build_cache.dir_for(S.SOL_CPP_ADD, "cpp", service._versions())
    assert BuildCache.is_built(entry)
    return entry


def test_build_cache_hit_and_miss(
    client: httpx.Client, kernel_server: RunningServer, built_entry: Path
) -> None:
    service: KernelService = kernel_server.service  # type: ignore[attr-defined]
    assert service.build_cache is not None
    assert service.build_cache.stats.misses >= 1  # the first build of the session was a miss
    hits = service.build_cache.stats.hits
    again = post(client, S.SOL_CPP_ADD, backend="cpp")
    assert again.outcome == "correct" and again.extension_cache_hit is True and again.elapsed.compile_s < 5
    assert service.build_cache.stats.hits == hits + 1
    assert any(p.suffix == ".so" for p in built_entry.rglob("*")), "the entry holds the built extension"
    # Any change to the source is a different key: a new entry, never a rebuild race on the old one.
    other = service.build_cache.dir_for(S.SOL_CPP_ADD + "\n# v2\n", "cpp", service._versions())
    assert other != built_entry and not BuildCache.is_built(other)


def _seed(root: Path, src: Path, name: str, age_s: float) -> Path:
    dst = root / name
    shutil.copytree(src, dst)
    t = time.time() - age_s
    os.utime(dst / BUILT_MARKER, (t, t))
    return dst


def test_build_cache_evicts_least_recently_used_by_size(built_entry: Path, tmp_path: Path) -> None:
    size = tree_size(built_entry)
    assert size > 10_000  # a real .so and its ninja files
    cache = BuildCache(tmp_path / "bc", max_bytes=int(size * 2.5))
    a = _seed(cache.root, built_entry, "a", age_s=300)
    b = _seed(cache.root, built_entry, "b", age_s=200)
    c = _seed(cache.root, built_entry, "c", age_s=100)
    in_progress = cache.root / "d"  # an unmarked dir another worker is still building into
    in_progress.mkdir()
    (in_progress / "partial.o").write_bytes(b"x" * size)
    os.utime(in_progress, (time.time() - 400, time.time() - 400))  # oldest of all, yet still busy
    assert cache.total_bytes() > 3.9 * size

    with cache.pinned(a):  # an in-flight evaluation uses the oldest: it stays
        removed = cache.evict()
    assert removed == [b, c]  # oldest unpinned first, until within the limit... except the busy build
    assert a.exists() and in_progress.exists() and not b.exists() and not c.exists()

    assert cache.lookup(a) and not cache.lookup(b)  # a hit refreshes a's LRU time; b is gone: a miss
    assert (cache.stats.hits, cache.stats.misses, cache.stats.evicted) == (1, 1, 2)
    assert BuildCache(tmp_path / "bc2").evict() == []  # no limit: never evicts


def test_a_second_service_on_the_same_cache_trims_it_at_start_and_hits(
    built_entry: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Services share one cache root; a start with a smaller limit evicts the oldest entries first.

    (Entries are not relocatable: ninja's logs hold absolute paths, so a copy under another root rebuilds.)
    """
    root = built_entry.parent
    size = tree_size(built_entry)
    os.utime(built_entry / BUILT_MARKER)  # most recently used
    filler = _seed(root, built_entry, "0" * 24, age_s=1000)  # older: evicted first
    service = KernelService(
        KernelServiceConfig(
            gpus=[],
            cpu_workers=1,
            compile_workers=1,
            work_dir=tmp_path_factory.mktemp("ks-bc-work"),
            build_cache_dir=root,
            build_cache_max_bytes=int(size * 1.5),
        )
    )
    with (
        start_server(make_app(service), startup_timeout=120) as srv,
        httpx.Client(base_url=srv.url, timeout=120) as c,
    ):
        assert not filler.exists() and BuildCache.is_built(built_entry)
        res = post(c, S.SOL_CPP_ADD, backend="cpp")
        assert res.outcome == "correct" and res.extension_cache_hit is True, res.message
        assert res.elapsed.compile_s < 5
        assert service.build_cache is not None and service.build_cache.stats.evicted == 1


# ---- result cache ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cached_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KernelService, Path]]:
    results = tmp_path_factory.mktemp("ks-results")
    service = KernelService(
        KernelServiceConfig(
            gpus=[],
            cpu_workers=2,
            compile_step=False,
            work_dir=tmp_path_factory.mktemp("ks-rc-work"),
            result_cache=True,
            result_cache_dir=results,
        )
    )
    with start_server(make_app(service, ServiceConfig()), startup_timeout=120) as srv:
        yield srv.url, service, results


def test_identical_resubmission_is_answered_from_the_result_cache(
    cached_service: tuple[str, KernelService, Path],
) -> None:
    url, _service, results = cached_service
    with httpx.Client(base_url=url, timeout=120) as c:
        first = post(c, S.SOL_ADD_WRONG)
        assert first.outcome == "incorrect" and first.cached is False
        t0 = time.perf_counter()
        again = post(c, S.SOL_ADD_WRONG)
        wall = time.perf_counter() - t0
        assert again.cached is True and wall < 0.5 and again.elapsed.total_s < 0.1
        assert (again.outcome, again.max_abs_error, again.worker_id) == (
            first.outcome,
            first.max_abs_error,
            first.worker_id,
        )
        assert len(list(results.glob("*.json"))) == 1  # persisted: a restarted service keeps it

        bypass = post(c, S.SOL_ADD_WRONG, options={"use_result_cache": False})
        assert bypass.outcome == "incorrect" and bypass.cached is False
        other_seed = post(c, S.SOL_ADD_WRONG, options={"seed": 7})  # options are part of the key
        assert other_seed.cached is False
        other_ref = post(c, S.SOL_ADD_WRONG, reference=S.REF_ADD + "\n# another reference\n")
        assert other_ref.cached is False


def test_concurrent_identical_submissions_run_once(cached_service: tuple[str, KernelService, Path]) -> None:
    url, _service, _ = cached_service
    solution = S.SOL_ADD_OK + "\n# concurrent\n"
    with httpx.Client(base_url=url, timeout=120) as c, ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: post(c, solution), range(3)))
    assert all(a.outcome == "correct" for a in answers)
    assert sorted(a.cached for a in answers) == [False, True, True]  # single flight: one evaluation


def test_timeouts_are_never_cached(cached_service: tuple[str, KernelService, Path]) -> None:
    url, service, _ = cached_service
    with httpx.Client(base_url=url, timeout=120) as c:
        for _ in range(2):
            res = post(c, S.SOL_INFINITE_LOOP, options={"timeout_s": 1})
            assert res.outcome == "timeout" and res.cached is False
    assert service.result_cache is not None
    assert all(v["outcome"] != "timeout" for v in service.result_cache._mem.values())
