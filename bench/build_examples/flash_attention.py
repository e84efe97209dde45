# Problem: Model.forward(q, k, v) = softmax(q @ k^T / sqrt(d)) @ v, shapes (B, H, S, D), D <= 128, float32.
# Written by us, modelled on KernelBench's flash attention example: one thread per query row, keys
# streamed with an online softmax, nothing of size S x S materialised.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#define MAXD 128
__global__ void flash_kernel(const float* q, const float* k, const float* v, float* o, int S, int D, float scale) {
  int bh = blockIdx.y, row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= S) return;
  const float* qr = q + ((int64_t)bh * S + row) * D;
  const float* kb = k + (int64_t)bh * S * D;
  const float* vb = v + (int64_t)bh * S * D;
  float acc[MAXD];
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < S; ++j) {
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += qr[d] * kb[(int64_t)j * D + d];
    s *= scale;
    float m2 = fmaxf(m, s), corr = __expf(m - m2), p = __expf(s - m2);
    l = l * corr + p;
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + p * vb[(int64_t)j * D + d];
    m = m2;
  }
  float* orow = o + ((int64_t)bh * S + row) * D;
  for (int d = 0; d < D; ++d) orow[d] = acc[d] / l;
}
torch::Tensor flash_cuda(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  TORCH_CHECK(q.size(3) <= MAXD, "head dim too large");
  int B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  auto o = torch::empty_like(q);
  dim3 grid((S + 127) / 128, B * H);
  flash_kernel<<<grid, 128>>>(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), o.data_ptr<float>(),
                              S, D, 1.0f / sqrtf((float)D));
  return o;
}
"""
ext = load_inline(
    name="bx_flash_attention",
    cpp_sources="torch::Tensor flash_cuda(torch::Tensor q, torch::Tensor k, torch::Tensor v);",
    cuda_sources=cuda_source,
    functions=["flash_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def forward(self, q, k, v):
        return ext.flash_cuda(q.contiguous(), k.contiguous(), v.contiguous())
