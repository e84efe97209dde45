"""Shorter builds, for real on CPU: a precompiled ``torch/extension.h`` the compile workers make and GCC
accepts, and the light-include race (light and as-written builds at once; the light one judged when it
builds, else the as-written one, with no second wait). Verdicts are the plain build's."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ks_sources as S
import pytest
from kernel_service.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig
from kernel_service.workers.build_cache import BuildCache
from kernel_service.workers.fast_builds import LIGHT_INCLUDE, light_source

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import start_server

pytestmark = pytest.mark.slow

#: Binds with load_inline's generated pybind module but asks for no implicit headers: it needs the
#: ``torch/extension.h`` it includes, so its light variant (``torch/types.h``) fails to build.
NEEDS_FULL_INCLUDE = S.SOL_CPP_ADD.replace("ks_test_add_cpu", "ks_test_needs_full").replace(
    'extra_cflags=["-O2"])', 'extra_cflags=["-O2"], no_implicit_headers=True)'
)


def test_light_source_rewrites_only_the_extension_include() -> None:
    src = '#include <torch/extension.h>\n#  include "torch/extension.h"\n#include <cuda_runtime.h>\n'
    light = light_source(src)
    assert light == f"{LIGHT_INCLUDE}\n{LIGHT_INCLUDE}\n#include <cuda_runtime.h>\n"
    assert light_source("#include <torch/types.h>\n") is None
    assert "no_implicit_headers=True" in NEEDS_FULL_INCLUDE and "ks_test_needs_full" in NEEDS_FULL_INCLUDE


def _served(work_dir: Path, compile_workers: int, build_pch: bool) -> Iterator[tuple[str, KernelService]]:
    """A CPU service with light-include builds over real HTTP: its URL and the service."""
    config = KernelServiceConfig(
        gpus=[],
        cpu_workers=1,
        compile_workers=compile_workers,
        work_dir=work_dir,
        build_pch=build_pch,
        light_include=True,
    )
    service = KernelService(config)
    with start_server(make_app(service), startup_timeout=120) as srv:
        yield srv.url, service


@pytest.fixture(scope="module")
def fast_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KernelService]]:
    # two compile workers: the light and the as-written build run at once
    yield from _served(tmp_path_factory.mktemp("ks-fast"), compile_workers=2, build_pch=True)


def _post(url: str, solution: str) -> KernelEvalResponse:
    body = {
        "reference": S.REF_ADD,
        "solution": solution,
        "backend": "cpp",
        "options": {**S.FAST, "timeout_s": 400},
    }
    with httpx.Client(base_url=url, timeout=600) as c:
        r = c.post("/v1/evaluate", json=body)
    assert r.status_code == 200, r.text
    return KernelEvalResponse.model_validate(r.json())


def test_light_build_falls_back_to_the_source_as_written_and_is_used_when_it_builds(
    fast_service: tuple[str, KernelService],
) -> None:
    url, service = fast_service
    cache = service.build_cache
    assert cache is not None
    versions = service._versions()
    assert versions.endswith("|pch")  # the build options are part of the cache key

    t0 = time.monotonic()
    res = _post(url, NEEDS_FULL_INCLUDE)
    first_s = time.monotonic() - t0
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}"
    light = light_source(NEEDS_FULL_INCLUDE)
    assert light is not None
    assert not BuildCache.is_built(cache.dir_for(light, "cpp", versions))  # the light build failed...
    assert BuildCache.is_built(cache.dir_for(NEEDS_FULL_INCLUDE, "cpp", versions))  # ...this one was judged

    res = _post(url, S.SOL_CPP_ADD)
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}"
    light = light_source(S.SOL_CPP_ADD)
    assert light is not None and BuildCache.is_built(cache.dir_for(light, "cpp", versions))  # light judged
    again = _post(url, S.SOL_CPP_ADD)
    assert again.outcome == "correct" and again.extension_cache_hit is True
    assert first_s < 400


def test_the_precompiled_header_is_one_gcc_uses_for_the_builds_flags(
    fast_service: tuple[str, KernelService], tmp_path: Path
) -> None:
    """The PCH the compile workers made is valid for torch's exact ``main.cpp`` command (GCC's ``-H``
    marks a PCH it uses with ``!``, one it rejects with ``x``)."""
    url, service = fast_service
    assert service.build_cache is not None
    if not BuildCache.is_built(service.build_cache.dir_for(S.SOL_CPP_ADD, "cpp", service._versions())):
        _post(url, S.SOL_CPP_ADD)  # run alone: make the build the other test made
    pch_root = service.build_cache.root / "pch"
    gchs = list(pch_root.glob("*/torch/extension.h.gch"))
    assert len(gchs) == 1, gchs  # one flag set (-O2), one PCH, shared by every build
    ninja = next(service.build_cache.root.glob("*/ks_test_add_cpu/build.ninja")).read_text()
    cxx = re.search(r"^cxx = (.*)$", ninja, re.M)
    cflags = re.search(r"^cflags = (.*)$", ninja, re.M)
    assert cxx and cflags
    probe = tmp_path / "probe.cpp"
    probe.write_text("#include <torch/extension.h>\nint main() { return 0; }\n")
    env = {**os.environ, "CPATH": str(gchs[0].parent.parent)}
    cmd = f"{cxx.group(1)} {cflags.group(1)} -H -fsyntax-only {probe}"
    proc = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"! {gchs[0]}" in proc.stderr, proc.stderr[:2000]


@pytest.fixture(scope="module")
def busy_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KernelService]]:
    """One compile worker: never two free, as in a batch that keeps the pool busy."""
    yield from _served(tmp_path_factory.mktemp("ks-busy"), compile_workers=1, build_pch=False)


def test_a_busy_pool_builds_light_alone_and_as_written_only_when_light_fails(
    busy_service: tuple[str, KernelService],
) -> None:
    url, service = busy_service
    cache = service.build_cache
    assert cache is not None and service.compile_spare() == 1
    versions = service._versions()
    solution = S.SOL_CPP_ADD.replace("ks_test_add_cpu", "ks_test_add_busy")
    res = _post(url, solution)
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}"
    light = light_source(solution)
    assert light is not None and BuildCache.is_built(cache.dir_for(light, "cpp", versions))
    # no race: the as-written build never started, so nothing of it runs on or fills the cache
    assert not service._background
    assert not BuildCache.is_built(cache.dir_for(solution, "cpp", versions))

    res = _post(url, NEEDS_FULL_INCLUDE)  # its light build fails: then the source as written
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}"
    assert BuildCache.is_built(cache.dir_for(NEEDS_FULL_INCLUDE, "cpp", versions))
    assert service.compile_spare() == 1  # every compile answered
