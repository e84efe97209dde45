"""Shorter builds, for real on CPU: a precompiled ``torch/extension.h`` the compile workers make and GCC
accepts, and the light-include race (light and as-written builds at once; the light one judged when it
builds, else the as-written one, with no second wait). Verdicts are the plain build's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import ks_sources as S
import pytest
from kernel_service.schemas import KernelEvalResponse
from kernel_service.service import KernelService, KernelServiceConfig
from kernel_service.workers.build_cache import BuildCache
from kernel_service.workers.fast_builds import (
    TYPES_INCLUDE,
    light_include,
    light_includes,
    light_source,
    light_sources,
)

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import start_server

pytestmark = pytest.mark.slow

#: Binds with load_inline's generated pybind module but asks for no implicit headers: it needs the
#: ``torch/extension.h`` it includes, so its light variant (``torch/types.h``) fails to build.
NEEDS_FULL_INCLUDE = S.SOL_CPP_ADD.replace("ks_test_add_cpu", "ks_test_needs_full").replace(
    'extra_cflags=["-O2"])', 'extra_cflags=["-O2"], no_implicit_headers=True)'
)


def test_light_sources_rewrite_the_includes_and_route_load_inline_through_the_shim() -> None:
    src = (
        '"""doc"""\nfrom __future__ import annotations\nfrom torch.utils import cpp_extension\n'
        'cu = r"""#include <torch/extension.h>\nx = torch::zeros({3});"""\n'
        'ext = cpp_extension.load_inline(name="e", cpp_sources="", cuda_sources=cu)\n'
    )
    variants = light_sources(src)
    include = light_include(src)
    assert "#include <ATen/ops/zeros.h>" in include and "torch/types.h" not in include
    assert [TYPES_INCLUDE in v for v in variants] == [False, True]
    light = variants[0]
    compile(light, "light", "exec")  # still Python, the __future__ import still first
    assert light.startswith('"""doc"""\nfrom __future__ import annotations\n\ndef _ks_light_load_inline(')
    assert "ext = _ks_light_load_inline(name=" in light and "#include <torch/extension.h>\nx" not in light
    assert light.count(repr(include)) == 1 and "no_implicit_headers=True" in light
    assert light_sources("import torch\n") == []  # nothing to make lighter
    # what only torch's C++ API has: the include that has it
    assert (
        light_include("#include <torch/extension.h>\nauto t = torch::ones({2}).requires_grad_();")
        == TYPES_INCLUDE
    )
    assert "no_implicit_headers=True" in NEEDS_FULL_INCLUDE and "ks_test_needs_full" in NEEDS_FULL_INCLUDE


#: Host code as kernels' launchers write it: torch's names for ATen's, dtype aliases, the macros.
LAUNCHER = r"""
#include <torch/extension.h>
torch::Tensor launch(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  auto y = torch::empty_like(x);
  auto z = torch::zeros({x.size(0)}, torch::dtype(torch::kFloat32).device(x.device()));
  auto w = torch::empty({3, 4}, x.options());
  torch::Dtype half = torch::kFloat16;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "launch", [&] { (void)x.data_ptr<scalar_t>(); });
  std::vector<int64_t> shape = {x.size(0)};
  (void)half; (void)shape; (void)w;
  return y.add_(z.sum());
}
"""


#: The same with tensor operators in its host code: only ``torch/types.h`` (ATen's operators) has them.
WITH_OPERATORS = LAUNCHER.replace("return y.add_(z.sum());", "return (y + z.sum()) * 2;")


@pytest.mark.parametrize(
    ("case", "source", "variant", "after_full_include", "builds"),
    [
        ("ATen ops alone", LAUNCHER, 0, False, True),
        ("after torch's own include", LAUNCHER, 0, True, True),
        ("operators, lightest", WITH_OPERATORS, 0, False, False),
        ("operators, types.h", WITH_OPERATORS, 1, False, True),
    ],
)
def test_the_light_variants_compile_a_launchers_host_code(
    case: str, source: str, variant: int, after_full_include: bool, builds: bool, tmp_path: Path
) -> None:
    """Real g++ on each light variant, alone (a ``.cu`` file's host code) and after torch's full include
    (``main.cpp``, where load_inline prepends it: torch's own declarations hide the light ones, no
    clash). Host code with tensor operators fails the lightest variant and builds with the next."""
    import sysconfig

    from torch.utils import cpp_extension

    includes = light_includes(source)
    assert len(includes) == 2 and "torch/types.h" not in includes[0] and includes[1] == TYPES_INCLUDE
    src = tmp_path / "launch.cpp"
    light = source.replace("#include <torch/extension.h>", includes[variant])
    src.write_text(("#include <torch/extension.h>\n" if after_full_include else "") + light)
    includes = " ".join(f"-I{p}" for p in [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]])
    cmd = f"c++ -std=c++20 -fsyntax-only -w {includes} {src}"
    proc = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300)
    assert (proc.returncode == 0) == builds, (case, proc.stderr[-3000:])


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
    """Three compile workers, one of them kept busy by the test: a pool in use, as in a batch."""
    yield from _served(tmp_path_factory.mktemp("ks-busy"), compile_workers=3, build_pch=False)


#: A submission whose import holds its compile worker for a while (a batch's other build).
SLOW_IMPORT = S.SOL_ADD_OK.replace("import torch", "import time\nimport torch\ntime.sleep(20)", 1)


def test_a_pool_in_use_builds_light_alone_and_as_written_only_when_light_fails(
    busy_service: tuple[str, KernelService],
) -> None:
    """Two workers are free, but a third is building: no race. Racing there (a batch's first solutions)
    left as-written builds running on after the light ones won, holding half the pool (issue 34)."""
    url, service = busy_service
    cache = service.build_cache
    assert cache is not None and service.compile_spare() == 3
    versions = service._versions()
    solution = S.SOL_CPP_ADD.replace("ks_test_add_cpu", "ks_test_add_busy")
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(_post, url, SLOW_IMPORT)
        deadline = time.monotonic() + 60
        while service.compile_spare() == 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert service.compile_spare() == 2  # the other build holds one worker
        res = _post(url, solution)
        assert other.result().outcome == "correct"
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}"
    light = light_source(solution)
    assert light is not None and BuildCache.is_built(cache.dir_for(light, "cpp", versions))
    # no race: the as-written build never started, so nothing of it runs on or fills the cache
    assert not service._background
    assert not BuildCache.is_built(cache.dir_for(solution, "cpp", versions))

    res = _post(url, NEEDS_FULL_INCLUDE)  # its light build fails: then the source as written
    assert res.outcome == "correct", f"{res.message}\n{res.compile_log}"
    assert BuildCache.is_built(cache.dir_for(NEEDS_FULL_INCLUDE, "cpp", versions))
    assert service.compile_spare() == 3  # every compile answered


def _written_by_load_inline(source: str, ext_dir: Path) -> dict[str, str]:
    """The files torch's own ``load_inline`` writes for ``source`` before it builds (without CUDA here
    the build itself fails: ``CUDA_HOME`` is not set), in a subprocess with its own extensions dir."""
    script = ext_dir / "solution.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    env["TORCH_EXTENSIONS_DIR"] = str(ext_dir / "ext")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert (ext_dir / "ext").is_dir(), proc.stderr[-2000:]
    return {p.name: p.read_text() for p in (ext_dir / "ext").rglob("*") if p.suffix in (".cu", ".cpp")}


def test_the_shim_gives_load_inline_the_light_cu_file_and_the_same_main_cpp(tmp_path: Path) -> None:
    """Through torch's real ``load_inline``: the light variant's ``.cu`` file starts with the light
    include where load_inline would have put ``torch/types.h`` (bench/build_paths.py: that implicit
    include alone costs 26-29 s of nvcc on the H100), and ``main.cpp`` is byte for byte the one the
    source as written gets (the precompiled header and the bindings unchanged)."""
    source = (Path(__file__).parents[2] / "bench" / "build_examples" / "add.py").read_text()
    (tmp_path / "as-written").mkdir()
    (tmp_path / "light").mkdir()
    plain = _written_by_load_inline(source, tmp_path / "as-written")
    light_text = light_source(source)
    assert light_text is not None
    light = _written_by_load_inline(light_text, tmp_path / "light")
    assert plain["cuda.cu"].startswith("#include <torch/types.h>")
    assert "torch/types.h" not in light["cuda.cu"] and "torch/extension.h" not in light["cuda.cu"]
    assert light["cuda.cu"].startswith(light_include(source).splitlines()[0])
    assert "#include <ATen/ops/empty_like.h>" in light["cuda.cu"]
    assert light["main.cpp"] == plain["main.cpp"]
