"""CUDA and Triton submissions for the GPU test and bench (``bench/kernel_service_gpu.py`` imports this)."""

from __future__ import annotations

#: relu(a * b + a): three PyTorch kernels in the reference, one in a fused kernel.
REF_FUSED = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a * b + a)

N = 1 << 24

def get_inputs():
    return [torch.randn(N), torch.randn(N)]

def get_init_inputs():
    return []
"""

_CUDA_TEMPLATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void fused_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        BODY
    }
}
torch::Tensor fused(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(ac);
    int64_t n = ac.numel();
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    fused_kernel<<<blocks, threads>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
cpp_source = "torch::Tensor fused(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="NAME", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["fused"],
                  extra_cuda_cflags=["-O3"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.fused(a, b)
'''


def cuda_solution(name: str, body: str) -> str:
    return _CUDA_TEMPLATE.replace("NAME", name).replace("BODY", body)


CUDA_OK = cuda_solution("ks_fused_ok", "float v = a[i] * b[i] + a[i]; out[i] = v > 0.f ? v : 0.f;")
#: Built at import only where CUDA answers (as most model-written extensions guard it): the compile pool
#: must build it all the same (``workers.lazy_builds``), or every side of its job builds it on the GPU.
CUDA_GUARDED = cuda_solution(
    "ks_fused_guarded", "float v = a[i] * b[i] + a[i]; out[i] = v > 0.f ? v : 0.f;"
).replace("ext = load_inline(", "ext = None\nif torch.cuda.is_available():\n    ext = load_inline(")
#: Built with ``load()`` from sources written into a temporary directory of its own (as some model-written
#: solutions do): the compile pool must build it in the build cache (``judging.build_relocation``), or each
#: process of the job builds it from scratch.
CUDA_TEMP_DIR = cuda_solution(
    "ks_fused_tmpdir", "float v = a[i] * b[i] + a[i]; out[i] = v > 0.f ? v : 0.f;"
).replace(
    'ext = load_inline(name="ks_fused_tmpdir", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["fused"],\n'
    '                  extra_cuda_cflags=["-O3"])',
    "import os, tempfile\n"
    "from torch.utils.cpp_extension import load\n"
    "_tmp = tempfile.mkdtemp()\n"
    'with open(os.path.join(_tmp, "fused.cu"), "w") as f:\n'
    "    f.write(cuda_source + 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"fused\", &fused); }\\n')\n"
    'ext = load(name="ks_fused_tmpdir", sources=[os.path.join(_tmp, "fused.cu")], build_directory=_tmp,\n'
    '           extra_cuda_cflags=["-O3"])',
)
CUDA_WRONG = cuda_solution("ks_fused_wrong", "float v = a[i] * b[i]; out[i] = v > 0.f ? v : 0.f;")
#: Writes a terabyte past the output: an illegal address that poisons the CUDA context.
CUDA_OOB = cuda_solution("ks_fused_oob", "out[i + (1LL << 40)] = a[i];")
#: Never terminates (volatile so the compiler keeps the loop).
CUDA_HANG = cuda_solution("ks_fused_hang", "volatile int spin = 1; while (spin) { } out[i] = a[i];")

TRITON_OK = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def fused_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(a * b + a, 0.0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        fused_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
"""
