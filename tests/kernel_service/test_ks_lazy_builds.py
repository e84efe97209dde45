"""Builds a submission starts only once it runs are made on the compile pool, not on an eval worker (issue 51).

Model-written solutions mostly call ``load_inline`` inside ``__init__`` or their first ``forward``, with
flags read from the device: importing them builds nothing. One real solution here does both (two C++
extensions, compiled for real); the compile worker must build them, and the eval worker only load them:
neither library is written again while it is judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import ks_sources as S
import pytest
from kernel_service.workers.lazy_builds import target_capability
from ks_build_jobs import build_job, compile_only, compile_then_judge, libraries

SOL_LAZY = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ADD = r"""
torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    auto a_c = a.contiguous(), b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const float* pa = a_c.data_ptr<float>();
    const float* pb = b_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a_c.numel(); ++i) po[i] = pa[i] + pb[i];
    return out;
}
"""
HALF = r"""
torch::Tensor half_cpu(torch::Tensor a) {
    auto a_c = a.contiguous();
    auto out = torch::empty_like(a_c);
    const float* pa = a_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a_c.numel(); ++i) po[i] = pa[i] * 0.5f;
    return out;
}
"""

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
        self.add = load_inline(name="ks_lazy_init_add", cpp_sources=ADD, functions=["add_cpu"],
                               extra_cflags=["-O1", f"-DKS_ARCH={major}{minor}"])
        self.half = None

    def forward(self, a, b):
        if self.half is None:  # built at the first call, as most model-written extensions are
            self.half = load_inline(name="ks_lazy_forward_half", cpp_sources=HALF, functions=["half_cpu"],
                                    extra_cflags=["-O1"])
        return self.half.half_cpu(self.add.add_cpu(a, b)) * 2.0
'''


#: SOL_LAZY's imports and C++ sources: the solutions below build them in ways of their own.
SOURCES = SOL_LAZY.split("class ModelNew")[0]


def test_builds_in_init_and_forward_are_made_on_the_compile_pool(tmp_path: Path) -> None:
    build_dir = tmp_path / "build-cache" / "lazy"
    compiled, built, judged = compile_then_judge(tmp_path, build_job(SOL_LAZY, build_dir))
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert {"ks_lazy_init_add/ks_lazy_init_add.so", "ks_lazy_forward_half/ks_lazy_forward_half.so"} <= set(
        built
    ), built
    assert {e["name"] for e in compiled.result["extensions"]} >= {"ks_lazy_init_add", "ks_lazy_forward_half"}
    assert judged.result is not None and judged.result["outcome"] == "correct", judged
    assert libraries(build_dir) == built, "the eval worker built a library again instead of loading it"
    assert judged.result["phases"]["worker_build"] == 0.0, judged.result["phases"]


#: Built into a directory relative to where it runs, made first, a failure falling back to PyTorch (CUDA-L1's
#: L1_24, L1_50, L1_95, L2_8 have this shape): the compile worker must run it where it may write.
SOL_RELATIVE_DIR = (
    SOURCES
    + """
import os

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        try:
            os.makedirs("cuda_extensions", exist_ok=True)
            self.ext = load_inline(name="ks_relative_add", cpp_sources=ADD, functions=["add_cpu"],
                                   extra_cflags=["-O1"], build_directory="cuda_extensions")
        except Exception as e:
            print(f"Failed to load the extension: {e}")
            self.ext = None

    def forward(self, a, b):
        return self.ext.add_cpu(a, b) if self.ext is not None else a + b
"""
)


def test_a_build_into_a_relative_dir_is_made_on_the_compile_pool(tmp_path: Path) -> None:
    build_dir = tmp_path / "build-cache" / "relative"
    compiled, built, judged = compile_then_judge(tmp_path, build_job(SOL_RELATIVE_DIR, build_dir))
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert [Path(p).name for p in built] == ["ks_relative_add.so"], (built, compiled.output)
    assert judged.result is not None and judged.result["outcome"] == "correct", judged
    assert libraries(build_dir) == built, "the eval worker built the library again instead of loading it"
    assert judged.result["phases"]["worker_build"] == 0.0, judged.result["phases"]


#: Built at import only where CUDA answers (41 of the 73 extensions of CUDA-L1's first release ask), the
#: others falling back to PyTorch: the compile worker's own import (no GPU) skips the build.
SOL_GUARDED = (
    SOURCES
    + """
ext = None
if torch.cuda.is_available():
    try:
        ext = load_inline(name="ks_guarded_add", cpp_sources=ADD, functions=["add_cpu"], extra_cflags=["-O1"])
    except RuntimeError:
        ext = None

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_cpu(a, b) if ext is not None else a + b
"""
)


def test_a_build_guarded_on_cuda_at_import_is_made_on_the_compile_pool(tmp_path: Path) -> None:
    """With the judging GPUs' arch list (as the service gives its compile pool), the compile worker
    imports the solution again where CUDA answers, so the build its import guards lands in the cache
    (its own import, without a GPU, skips it; the GPU's sides would have built it)."""
    build_dir = tmp_path / "build-cache" / "guarded"
    job = build_job(SOL_GUARDED, build_dir)
    compiled, built = compile_only(tmp_path, job, {"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert list(built) == ["ks_guarded_add/ks_guarded_add.so"], sorted(p.name for p in build_dir.rglob("*"))
    assert [e["name"] for e in compiled.result["extensions"]] == ["ks_guarded_add"]
    assert compiled.result["failed_builds"] == []


#: Built only on a CUDA input, with a side stream made first (CUDA-L1's L1_34 has this shape: its build
#: took 28 s of a GPU's time): the compile worker's meta run never reaches it.
SOL_ON_CUDA_INPUT = (
    SOURCES
    + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None
        self.stream = None

    def forward(self, a, b):
        if a.is_cuda and self.ext is None:
            self.stream = torch.cuda.Stream()
            with torch.cuda.stream(self.stream):
                self.ext = load_inline(name="ks_on_cuda_add", cpp_sources=ADD, functions=["add_cpu"],
                                       extra_cflags=["-O1"])
            torch.cuda.current_stream().wait_stream(self.stream)
        return self.ext.add_cpu(a, b) if self.ext is not None else a + b
"""
)


def test_a_build_reached_only_with_cuda_inputs_is_made_on_the_compile_pool(tmp_path: Path) -> None:
    """The compile worker calls the model once more on fake CUDA tensors (streams inert), so a build behind
    ``x.is_cuda`` lands in the cache too."""
    build_dir = tmp_path / "build-cache" / "on-cuda"
    compiled, built = compile_only(
        tmp_path, build_job(SOL_ON_CUDA_INPUT, build_dir), {"TORCH_CUDA_ARCH_LIST": "9.0"}
    )
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert list(built) == ["ks_on_cuda_add/ks_on_cuda_add.so"], sorted(p.name for p in build_dir.rglob("*"))
    assert [e["name"] for e in compiled.result["extensions"]] == ["ks_on_cuda_add"]


#: Built in ``__init__`` after a tensor made on CUDA and one read as a number (CUDA-L1's revision: L2_23, L2_24,
#: 20-30 s of a GPU's time each): the meta run stops at ``device="cuda"``, the fake run at ``.item()``.
SOL_AFTER_CUDA_TENSORS = (
    SOURCES
    + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        if torch.cuda.is_available():
            probe = torch.zeros(2, device="cuda")
            self.total = float(self.scale.sum().cuda().item()) + float(probe.sum().item())
        self.ext = load_inline(name="ks_after_cuda_add", cpp_sources=ADD, functions=["add_cpu"],
                               extra_cflags=["-O1"])

    def forward(self, a, b):
        return self.ext.add_cpu(a, b)
"""
)


def test_a_build_after_cuda_tensors_in_init_is_made_on_the_compile_pool(tmp_path: Path) -> None:
    """The compile worker's last run keeps every CUDA tensor on ``meta`` and reads a tensor as 1."""
    build_dir = tmp_path / "build-cache" / "after-cuda"
    compiled, built = compile_only(
        tmp_path, build_job(SOL_AFTER_CUDA_TENSORS, build_dir), {"TORCH_CUDA_ARCH_LIST": "9.0"}
    )
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert list(built) == ["ks_after_cuda_add/ks_after_cuda_add.so"], sorted(
        p.name for p in build_dir.rglob("*")
    )


def test_a_loop_on_a_tensor_read_as_a_number_ends_the_lazy_run() -> None:
    """``while err.item() > tol`` reads 1 for ever on ``meta``: the run stops after ``MAX_READS`` reads."""
    import time

    import torch
    from kernel_service.workers.lazy_builds import MAX_READS, _meta_as_cuda

    t0, reads = time.perf_counter(), 0
    with torch.device("meta"), _meta_as_cuda(), pytest.raises(RuntimeError, match="lazy run stopped"):
        err = torch.ones(1, device="cuda")
        assert err.device.type == "meta"
        while err.item() > 1e-6:
            reads += 1
    assert reads == MAX_READS and time.perf_counter() - t0 < 5


def test_the_answer_counts_the_phases_in_which_the_worker_built(tmp_path: Path) -> None:
    """``phases["worker_build"]``: a phase's seconds when a build wrote in the build dir during it, or made
    a library, an object or a ninja file in the candidate's side dir (not in its Triton, Inductor caches),
    else 0."""
    from kernel_service.kernelbench.judge import _WorkerBuilds

    build, sides = tmp_path / "build", tmp_path / "candidate"
    (build / "ext").mkdir(parents=True)
    (sides / "triton-cache").mkdir(parents=True)
    builds = _WorkerBuilds(build, sides)
    assert builds.written_during(2.5) == 0.0
    (build / "ext" / "ext.so").write_bytes(b"built while judged")
    assert builds.written_during(2.5) == 2.5
    assert builds.written_during(1.0) == 0.0
    # a build that fails writes no library, and took the phase's time all the same
    (build / "failing").mkdir()
    (build / "failing" / "build.ninja").write_text("rule cxx")
    assert builds.written_during(3.0) == 3.0
    assert builds.written_during(1.0) == 0.0
    # in a side's own dir: its products count, its sources, other files and Triton's cache do not
    (sides / "tmpab12").mkdir()
    (sides / "tmpab12" / "main.cpp").write_text("int f();")
    (sides / "tmpab12" / "inputs.bin").write_bytes(b"0")
    (sides / "triton-cache" / "launcher.so").write_bytes(b"Triton's")
    assert builds.written_during(2.0) == 0.0
    (sides / "tmpab12" / "main.o").write_bytes(b"compiled")
    assert builds.written_during(4.0) == 4.0


#: Builds only after its first calls, in dirs of its own (two, so that it is not moved into the build
#: cache): the compile pool's single run never reaches it, the eval worker builds it while timing.
SOL_BUILDS_WHILE_TIMED = (
    SOURCES
    + r"""
import os
import tempfile
from torch.utils.cpp_extension import load

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.ext = 0, None

    def forward(self, a, b):
        self.calls += 1
        if self.calls == 6 and self.ext is None:
            one, two = tempfile.mkdtemp(), tempfile.mkdtemp()
            with open(os.path.join(one, "add.cpp"), "w") as f:
                f.write("#include <torch/extension.h>\n" + ADD)
            with open(os.path.join(two, "bind.cpp"), "w") as f:
                f.write("#include <torch/extension.h>\ntorch::Tensor add_cpu(torch::Tensor a, torch::Tensor b);\n"
                        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add_cpu\", &add_cpu); }\n")
            self.ext = load(name="ks_timed_add", sources=[os.path.join(one, "add.cpp"), os.path.join(two, "bind.cpp")],
                            build_directory=tempfile.mkdtemp(), extra_cflags=["-O1"])
        return self.ext.add_cpu(a, b) if self.ext is not None else a + b
"""
)


def test_a_build_made_while_timed_is_counted(tmp_path: Path) -> None:
    """A build in the timing phase (every fresh side of a GPU's process pairs builds again), in the side's
    own dir: the answer says the worker built."""
    build_dir = tmp_path / "build-cache" / "timed"
    job = build_job(SOL_BUILDS_WHILE_TIMED, build_dir)
    job["options"] = {**job["options"], "measure_performance": True}
    _, _, judged = compile_then_judge(tmp_path, job)
    assert judged.result is not None and judged.result["outcome"] == "correct", judged
    phases = judged.result["phases"]
    assert phases["worker_build"] >= phases["timing"] > 0, phases


def test_the_judging_gpus_capability_is_what_a_lazy_build_reads() -> None:
    assert target_capability("9.0a") == (9, 0)
    assert target_capability("8.0;9.0") == (9, 0)
    assert target_capability("8.6+PTX") == (8, 6)
    assert target_capability(None) is None and target_capability("") is None


def test_a_fake_cuda_tensor_and_torch_dynamo_work_once_cuda_is_made_inert() -> None:
    """Two ways every fake-CUDA run failed on the GPU host's compile worker (CUDA torch, no GPU): dynamo's
    trace rules refused one inert class standing for several CUDA objects, and a fake CUDA tensor started
    a real CUDA context ("No CUDA GPUs are available")."""
    import subprocess
    import sys

    probe = (
        "from kernel_service.workers import lazy_builds as L\n"
        "L._load_tracing(); L._answer_as_target((9, 0)); L._inert_cuda_runtime()\n"
        "import torch, torch._dynamo\n"
        "with torch.cuda.stream(torch.cuda.Stream()):\n"
        "    torch.cuda.current_stream().wait_stream(torch.cuda.Stream())\n"
        # as on a CUDA build: a fake CUDA tensor would start a real context first (no GPU there)
        "torch.accelerator.current_accelerator = lambda check_available=False: 'cuda'\n"
        "from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode\n"
        "t = FakeTensor(FakeTensorMode(), torch.empty(2, device='meta'), torch.device('cuda', 0))\n"
        "print(t.is_cuda, torch._dynamo.trace_rules.get_torch_obj_rule_map() is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "True True", out.stderr[-2000:]


def test_a_build_flag_from_the_device_matches_the_eval_side() -> None:
    """In the compile worker's forked run, CUDA is "available" with the judging GPU's capability, so a
    ``-arch`` flag built from ``get_device_capability()`` equals the eval worker's (same build, no rebuild)."""
    import os
    import subprocess
    import sys

    probe = (
        "import torch\n"
        "from kernel_service.workers.lazy_builds import _answer_as_target, target_capability\n"
        "_answer_as_target(target_capability(__import__('os').environ['TORCH_CUDA_ARCH_LIST']))\n"
        "print(torch.cuda.is_available(), torch.cuda.get_device_capability())\n"
    )
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True (9, 0)"


#: Most model-written extensions fall back to PyTorch when their build fails: the submission is correct,
#: and every fresh process of its job used to run the failing compile again (15-20 s each on a GPU host).
SOL_CPP_FALLBACK = (
    S.SOL_CPP_BROKEN.replace("ks_test_broken", "ks_test_fallback")
    .replace("ext = load_inline(", "try:\n    ext = load_inline(")
    .replace('extra_cflags=["-O2"])', 'extra_cflags=["-O2"])\nexcept RuntimeError:\n    ext = None')
    .replace("return ext.add_cpu(a, b)", "return ext.add_cpu(a, b) if ext is not None else a + b")
)


def test_a_build_that_failed_on_the_compile_pool_is_not_compiled_again_when_judged(tmp_path: Path) -> None:
    """Through the service: its compile pool records the failed build, and the eval worker's sides raise
    torch's build error at once (the same fallback, no compiler run)."""
    from kernel_service.kernelbench.schemas import KernelEvalRequest
    from kernel_service.service import KernelService, KernelServiceConfig

    request = KernelEvalRequest.model_validate(
        {
            "reference": S.REF_ADD,
            "solution": SOL_CPP_FALLBACK,
            "backend": "cpp",
            "options": {**S.FAST, "measure_performance": False, "timeout_s": 600},
        }  # fmt: skip
    )

    async def scenario() -> tuple[Any, dict[str, Any]]:
        service = KernelService(KernelServiceConfig(work_dir=tmp_path, cpu_workers=1))
        await service.startup()
        try:
            answer = await service.evaluate(request)
            return answer, dict(service._failed_builds)
        finally:
            await service.shutdown()

    answer, remembered = anyio.run(scenario)
    assert answer.outcome == "correct", answer.message
    assert [f["name"] for f in next(iter(remembered.values()))] == ["ks_test_fallback"], remembered
    assert answer.phases is not None
    load_s, compile_s = answer.phases["load"], answer.elapsed.compile_s
    assert load_s < max(5.0, compile_s / 3), (load_s, compile_s)


def test_only_the_sources_and_flags_that_failed_are_refused(tmp_path: Path) -> None:
    from kernel_service.workers.artifacts import build_key, refuse_failed_builds
    from torch.utils import cpp_extension

    src = tmp_path / "main.cpp"
    src.write_text("int f() { return 1 }")
    failed = [{"name": "ext", "key": build_key("ext", [str(src)], [["-O2"], None, None, None], False)}]
    versioner = cpp_extension.JIT_EXTENSION_VERSIONER
    try:
        refuse_failed_builds(failed)
        call = {"build_directory": str(tmp_path), "with_cuda": False, "with_sycl": None,
                "is_python_module": True, "is_standalone": False}  # fmt: skip
        try:
            versioner.bump_version_if_changed(
                "ext", [str(src)], build_arguments=[["-O2"], None, None, None], **call
            )
        except RuntimeError as exc:
            assert "Error building extension 'ext'" in str(exc)
        else:
            raise AssertionError("the failed build was not refused")
        assert (
            versioner.bump_version_if_changed(
                "ext", [str(src)], build_arguments=[["-O1"], None, None, None], **call
            )
            == 0
        )
        src.write_text("int f() { return 1; }")
        assert (
            versioner.bump_version_if_changed(
                "ext", [str(src)], build_arguments=[["-O2"], None, None, None], **call
            )
            >= 0
        )
    finally:
        vars(versioner).pop("bump_version_if_changed", None)
        versioner.entries.clear()
