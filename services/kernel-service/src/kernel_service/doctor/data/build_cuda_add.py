# ruff: noqa
# mypy: ignore-errors
# Load for the busy-host check (backend "cuda"): a load_inline CUDA add whose build (torch/extension.h,
# about a minute of nvcc) keeps the host's cores busy. __TOKEN__ makes each one a distinct build.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
// __TOKEN__
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
ext = load_inline(
    name="doctor_load___TOKEN__",
    cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
    cuda_sources=CUDA_SRC,
    functions=["add_cuda"],
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_cuda(a.contiguous(), b.contiguous())
