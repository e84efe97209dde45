"""A build a submission makes in a temporary directory of its own is made once, in the build cache (issue 51).

Model-written solutions write their sources into ``tempfile.mkdtemp()`` and call ``load(sources=...,
build_directory=tmp)``: each process that imports them built from scratch (the compile pool's build lost,
every fresh side of the job compiling again on the GPU worker). One real solution here does that with a
header beside its source (compiled for real, C++); the compile worker must build it in the job's build
dir, and the eval worker only load it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from kernel_service.judging.build_relocation import relocation, stable_name
from ks_build_jobs import build_job, compile_then_judge, libraries

SOL_TEMP_DIR = r'''
import os
import tempfile
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

HEADER = "inline float ks_plus(float a, float b) { return a + b; }\n"
SOURCE = r"""
#include <torch/extension.h>
#include "ks_plus.h"
torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    auto a_c = a.contiguous(), b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const float* pa = a_c.data_ptr<float>();
    const float* pb = b_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a_c.numel(); ++i) po[i] = ks_plus(pa[i], pb[i]);
    return out;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_cpu", &add_cpu); }
"""

tmp = tempfile.mkdtemp()
for name, text in (("ks_plus.h", HEADER), ("ks_temp_add.cpp", SOURCE)):
    with open(os.path.join(tmp, name), "w") as f:
        f.write(text)
ext = load(name="ks_temp_add", sources=[os.path.join(tmp, "ks_temp_add.cpp")], build_directory=tmp,
           extra_cflags=["-O1"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_cpu(a, b)
'''


def test_a_build_in_a_temporary_directory_is_made_once_in_the_build_cache(tmp_path: Path) -> None:
    build_dir = tmp_path / "build-cache" / "temp-dir"
    compiled, built, judged = compile_then_judge(tmp_path, build_job(SOL_TEMP_DIR, build_dir))
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert [Path(p).name for p in built] == ["ks_temp_add.so"], built
    assert next(iter(built)).startswith("relocated/ks_temp_add-"), built
    assert judged.result is not None and judged.result["outcome"] == "correct", judged
    assert libraries(build_dir) == built, "the eval worker built the library again instead of loading it"
    assert judged.result["phases"]["worker_build"] == 0.0, judged.result["phases"]
    # nor in a directory of its own (the build cache unchanged, but the compile's seconds in its load)
    load_s, compile_s = judged.result["phases"]["load"], compiled.result["compile_s"]
    assert load_s < max(5.0, compile_s / 3), (load_s, compile_s)


#: An extension named after the process that builds it (CUDA-L1's L1_96: ``f"huber_loss_cuda_{os.getpid()}"``):
#: another name, so another build, in every process.
SOL_PID_NAME = (
    SOL_TEMP_DIR.split("tmp = tempfile.mkdtemp()")[0]
    .replace('#include "ks_plus.h"\n', "")
    .replace("ks_plus(pa[i], pb[i])", "pa[i] + pb[i]")
    .replace('PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_cpu", &add_cpu); }\n', "")
    + """
from torch.utils.cpp_extension import load_inline
ext = load_inline(name=f"ks_pid_add_{os.getpid()}", cpp_sources=SOURCE, functions=["add_cpu"], extra_cflags=["-O1"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_cpu(a, b)
"""
)


#: CUDA-L1's L2_71: the source written to a ``NamedTemporaryFile`` in the shared temporary directory (a random
#: name, deleted after the build) and the extension named after the module object, built in ``__init__``:
#: every process's build had another source name and another extension name.
SOL_NAMED_TEMP_FILE = (
    SOL_PID_NAME.split("from torch.utils.cpp_extension import load_inline")[0]
    + """
SOURCE += 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_cpu", &add_cpu); }'

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        with tempfile.NamedTemporaryFile(suffix=".cpp", delete=False) as f:
            f.write(SOURCE.encode())
        self.ext = load(name=f"ks_tmpfile_add_{id(self)}", sources=[f.name], extra_cflags=["-O1"])
        os.unlink(f.name)

    def forward(self, a, b):
        return self.ext.add_cpu(a, b)
"""
)


@pytest.mark.parametrize(
    ("solution", "prefix"),
    [(SOL_PID_NAME, "relocated/ks_pid_add_"), (SOL_NAMED_TEMP_FILE, "relocated/ks_tmpfile_add_")],
    ids=["named_after_its_process", "from_a_named_temporary_file"],
)
def test_a_build_under_a_name_of_its_process_is_made_once(tmp_path: Path, solution: str, prefix: str) -> None:
    build_dir = tmp_path / "build-cache" / "b"
    compiled, built, judged = compile_then_judge(tmp_path, build_job(solution, build_dir))
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert len(built) == 1 and next(iter(built)).startswith(prefix), built
    assert judged.result is not None and judged.result["outcome"] == "correct", judged
    assert libraries(build_dir) == built, "the eval worker built the library again under its own names"
    assert judged.result["phases"]["worker_build"] == 0.0, judged.result["phases"]


def test_a_numbered_name_has_a_stem_and_others_keep_theirs() -> None:
    assert stable_name("huber_loss_cuda_4242") == "huber_loss_cuda"
    assert stable_name("fused_conv_140234598712") == "fused_conv"
    assert stable_name("huber_cuda_2") == "huber_cuda"  # a pid in the sandbox's namespace
    assert stable_name("conv2d_gelu_cuda") is None and stable_name("model_v2") is None


def test_only_builds_outside_the_build_dir_move_and_their_place_is_named_by_contents(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    inside = root / "ext"
    inside.mkdir()
    (inside / "a.cpp").write_text("int a;")
    assert relocation(str(root), "ext", [str(inside / "a.cpp")], str(inside), [], None) is None

    def temp_build(text: str, source: str = "a.cpp") -> tuple[list[str], str, list[str], str] | None:
        tmp = Path(tempfile.mkdtemp(dir=tmp_path))
        (tmp / source).write_text('#include "a.h"\n#include <vector>\n' + text)
        (tmp / "a.h").write_text('#include "b.h"\n#define A 1')
        (tmp / "b.h").write_text("#define B 1")
        (tmp / "c.h").write_text("#define C 1")  # included by nothing
        (tmp / "leftover.cu").write_text(text + str(tmp))  # another process's, in a shared directory
        (tmp / "notes.txt").write_text("not a source")
        return relocation(str(root), "ext", [str(tmp / source)], str(tmp), [["-O1"]], [str(tmp)])

    first, again, other = temp_build("int a;"), temp_build("int a;", "tmpq7x2.cpp"), temp_build("int b;")
    assert first is not None and again is not None and other is not None
    assert first == again  # two processes' random directories and source names, one place
    assert other[1] != first[1]  # other bytes, another place
    sources, dest, includes, name = first
    assert (
        includes == [dest] and len(sources) == 1 and Path(sources[0]).parent == Path(dest) and name == "ext"
    )
    assert Path(sources[0]).suffix == ".cpp" and Path(sources[0]).read_text().endswith("int a;")
    # the headers it includes (transitively), nothing else of the directory
    assert sorted(p.name for p in Path(dest).iterdir()) == sorted([Path(sources[0]).name, "a.h", "b.h"])
