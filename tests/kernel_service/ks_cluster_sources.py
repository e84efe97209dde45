"""C++ ``load_inline`` solutions that build in seconds: a TORCH_LIBRARY op with ATen's core headers only.

``load_inline`` normally prepends ``torch/extension.h`` (all of the C++ API and pybind11: ~30 s to parse
on a CI core); these pass ``no_implicit_headers=True`` and register an op instead of a pybind module
(``is_python_module=False``: torch loads the .so with ``torch.ops.load_library``), so the artifact tests
and the cluster test exercise real builds, real artifacts and real loads at ~7 s a build. Each solution
registers its own op namespace: a warm compile worker keeps every library it loaded.
"""

from __future__ import annotations

_OP_SOLUTION = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>
at::Tensor add_op(const at::Tensor& a, const at::Tensor& b) {
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto out = at::empty_like(ac);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] SIGN pb[i];
  return out;
}
TORCH_LIBRARY(NAMESPACE, m) { m.def("add(Tensor a, Tensor b) -> Tensor", &add_op); }
"""
load_inline(name="NAMESPACE_ext", cpp_sources=src, is_python_module=False, no_implicit_headers=True,
            extra_cflags=["-O1"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.ops.NAMESPACE.add(a, b)
'''


def op_solution(namespace: str, sign: str = "+") -> str:
    """A solution to ``REF_ADD`` (correct with ``+``, incorrect with ``-``) built as op ``namespace``."""
    return _OP_SOLUTION.replace("NAMESPACE", namespace).replace("SIGN", sign)


#: A real compiler error, found in well under a second (no torch headers before it).
OP_BROKEN = r"""
from torch.utils.cpp_extension import load_inline

load_inline(name="ks_cluster_broken", cpp_sources="int broken( { return 0; }", is_python_module=False,
            no_implicit_headers=True)

class ModelNew:
    pass
"""
