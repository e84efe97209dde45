"""Small CPU problems and submissions used across the kernel-service tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from kernel_service.kernelbench.schemas import KernelEvalResponse

FIXTURES = Path(__file__).parent / "fixtures"

#: Small trial counts keep each evaluation well under a second on CPU.
FAST = {"correctness_trials": 3, "perf_trials": 5, "warmup": 1, "timeout_s": 60}


def evaluate(client: httpx.Client, reference: str, solution: str, **options: Any) -> KernelEvalResponse:
    """One ``POST /v1/evaluate`` with ``FAST`` trial counts and ``options``; its answer (HTTP 200 asserted)."""
    body = {"reference": reference, "solution": solution, "options": {**FAST, **options}}
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 200, r.text
    return KernelEvalResponse.model_validate(r.json())


MAX_BODY = 256 * 1024

REF_ADD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a + b

N = 4096

def get_inputs():
    return [torch.rand(N), torch.rand(N)]

def get_init_inputs():
    return []
"""

REF_MATMUL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
    def forward(self, x):
        return x @ self.weight

N = 64

def get_inputs():
    return [torch.randn(N, N)]

def get_init_inputs():
    return [N]
"""

SOL_ADD_OK = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.add(a, b)
"""

SOL_MATMUL_OK = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))  # same seed -> same weights as the reference
    def forward(self, x):
        return torch.mm(x, self.weight)
"""

SOL_ADD_WRONG = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return a - b
"""

SOL_SYNTAX_ERROR = """
import torch
class ModelNew(torch.nn.Module)
    def forward(self, a, b):
        return a + b
"""

SOL_INIT_ERROR = """
import torch
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("cannot build this model")
    def forward(self, a, b):
        return a + b
"""

SOL_RUNTIME_ERROR = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return a @ torch.ones(3, 3)  # shape error at run time
"""

SOL_INFINITE_LOOP = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        while True:
            pass
"""

SOL_SEGFAULT = """
import ctypes
import torch
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return a + b
"""

SOL_EXIT = """
import os
import torch
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        os._exit(3)
"""

SOL_FLOOD = """
import sys
import torch
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        sys.stdout.write("x" * (50 * 1024 * 1024))
        print("END-OF-FLOOD")
        return a + b
"""

#: The one C++ extension of the suite (compiled once per session: ~30-60 s cold on 2 cores).
SOL_CPP_ADD = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const float* pa = a_c.data_ptr<float>();
    const float* pb = b_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a_c.numel(); ++i) po[i] = pa[i] + pb[i];
    return out;
}
"""
ext = load_inline(name="ks_test_add_cpu", cpp_sources=cpp_source, functions=["add_cpu"], extra_cflags=["-O2"])

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_cpu(a, b)
'''

#: The same extension with a C++ syntax error: a real compiler error (the second and last compile).
SOL_CPP_BROKEN = SOL_CPP_ADD.replace("return out;", "return out").replace("ks_test_add_cpu", "ks_test_broken")


def own_solution(reference: str) -> str:
    """The reference submitted as its own solution."""
    return reference + "\n\nModelNew = Model\n"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


#: A vanilla RNN cell that carries its hidden state across calls, as KernelBench's L3_33 and L3_34 do.
REF_RNN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.hidden = torch.randn(8, h)
        self.i2h = nn.Linear(n + h, h)
    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.hidden

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return [32, 16]
"""

#: The same cell written as two matmuls into the state it keeps (CUDA-L1's L3_34 solution's fallback).
SOL_RNN = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.hidden = torch.randn(8, h)
        self.i2h = nn.Linear(n + h, h)
        self.n = n
    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        w = self.i2h.weight
        self.hidden = torch.tanh(torch.addmm(self.i2h.bias, x, w[:, : self.n].t()) + self.hidden @ w[:, self.n :].t())
        return self.hidden
"""
