# Problem: an MNIST MLP, Model(784, 128, 10).forward(x) = fc2(relu(fc1(x.flatten(1)))). Written by us,
# modelled on KernelBench's mnist2 example: a fused linear + bias (+ ReLU) kernel for both layers.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void linear_kernel(const float* x, const float* w, const float* b, float* y, int M, int K, int N, bool relu) {
  int row = blockIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= N) return;
  float acc = b[col];
  for (int k = 0; k < K; ++k) acc += x[(int64_t)row * K + k] * w[(int64_t)col * K + k];
  y[(int64_t)row * N + col] = relu ? fmaxf(acc, 0.f) : acc;
}
torch::Tensor linear_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, bool relu) {
  int M = x.size(0), K = x.size(1), N = w.size(0);
  auto y = torch::empty({M, N}, x.options());
  dim3 grid((N + 127) / 128, M);
  linear_kernel<<<grid, 128>>>(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
                               M, K, N, relu);
  return y;
}
"""
ext = load_inline(
    name="bx_mnist2",
    cpp_sources="torch::Tensor linear_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, bool relu);",
    cuda_sources=cuda_source,
    functions=["linear_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, n_in=784, hidden=128, n_out=10):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = ext.linear_cuda(x.flatten(1).contiguous(), self.fc1.weight, self.fc1.bias, True)
        return ext.linear_cuda(h, self.fc2.weight, self.fc2.bias, False)
