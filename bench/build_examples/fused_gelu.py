# Problem: Model.forward(x) = torch.nn.functional.gelu(x) (exact, erf). Written by us, modelled on
# KernelBench's fused GELU example.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void gelu_kernel(const float* x, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i]; out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }
}
torch::Tensor gelu_cuda(torch::Tensor x) {
  auto out = torch::empty_like(x);
  int64_t n = x.numel();
  gelu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""
ext = load_inline(
    name="bx_fused_gelu",
    cpp_sources="torch::Tensor gelu_cuda(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["gelu_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.gelu_cuda(x.contiguous())
