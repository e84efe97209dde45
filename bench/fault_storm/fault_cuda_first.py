"""Fault: a CUDA add (load_inline) that writes a terabyte past its output from its first call: an illegal
address (backend "cuda"). It must cost this submission only."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The same extension source and name in fault_cuda_first.py and fault_cuda_timing.py: only FAULT_AFTER differs.
CUDA_SRC = r"""
#include <torch/extension.h>

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t n, int far) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = a[i] + b[i];
        if (far) {
            out[i + (1LL << 40)] = v;  // a terabyte past the output: an illegal address
        } else {
            out[i] = v;
        }
    }
}

torch::Tensor add(torch::Tensor a, torch::Tensor b, int64_t far) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat, "fp32 inputs only");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(ac);
    int64_t n = ac.numel();
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    add_kernel<<<blocks, threads>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n,
                                    far ? 1 : 0);
    return out;
}
"""
CPP_SRC = "torch::Tensor add(torch::Tensor a, torch::Tensor b, int64_t far);"

ext = load_inline(
    name="fault_storm_add_far",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["add"],
    extra_cuda_cflags=["-O3"],
)

FAULT_AFTER = 0
CALLS = [0]


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        CALLS[0] += 1
        return ext.add(a, b, 1 if CALLS[0] > FAULT_AFTER else 0)
