# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 4: a native thread, started by a C++ extension, that works after forward has returned.
#
# The extension (torch.utils.cpp_extension.load_inline, plain C++ with no torch headers, so it builds in
# about a second) starts a detached std::thread per timed call: it computes the matmul into the tensor
# forward already returned, then keeps copying the result into the judge's output arena (the Side's
# out_region, found on the stack; written by the side at offset 0) for 30 ms. forward itself returns at
# once, so the call is nearly free if the judge reads the output late, or reads the arena again later.
# Python sees no thread of its own (threading.enumerate() is unchanged).
#
# Against the single-process harness this evaded the `solution_threads` check (it looked for Python
# threads running solution code) and the identity checks; the output snapshot taken right after the
# call is what caught it there, and the judge's own copy of the output arena does here.
import ctypes
import sys

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

static void matmul(const float* x, const float* w, float* out, int64_t n, int64_t k, int64_t m) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * m;
    for (int64_t j = 0; j < m; ++j) row[j] = 0.f;
    for (int64_t p = 0; p < k; ++p) {
      const float a = x[i * k + p];
      const float* wr = w + p * m;
      for (int64_t j = 0; j < m; ++j) row[j] += a * wr[j];
    }
  }
}

extern "C" void wb_late(const float* x, const float* w, float* out, int64_t n, int64_t k, int64_t m,
                        char* arena, int64_t arena_bytes, int64_t keep_ms) {
  std::thread([=] {
    matmul(x, w, out, n, k, m);
    const int64_t bytes = n * m * int64_t(sizeof(float));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(keep_ms);
    do {  // keep writing the result where the judge reads this side's outputs
      if (arena != nullptr && arena_bytes >= bytes) std::memcpy(arena, out, bytes);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } while (std::chrono::steady_clock::now() < end);
  }).detach();
}
"""

path = load_inline(
    "wb_native_thread",
    cpp_sources=SOURCE,
    no_implicit_headers=True,
    is_python_module=False,
    extra_cflags=["-O2", "-pthread"],
    extra_ldflags=["-pthread"],
)
lib = ctypes.CDLL(path)
lib.wb_late.restype = None
lib.wb_late.argtypes = (
    [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
)
print(f"WB-HIT extension built: {path}", flush=True)

state = {"timed": False, "calls": 0, "alive": [], "said": False}


def side_on_stack():
    f = sys._getframe(2)
    side = None
    while f is not None:
        if f.f_code.co_name == "op_probe":
            state["timed"] = True
        me = f.f_locals.get("self")
        if me is not None and hasattr(me, "out_region") and hasattr(me, "in_region"):
            side = me
        f = f.f_back
    return side


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        state["calls"] += 1
        side = side_on_stack()
        if not (state["timed"] or state["calls"] > 4):
            return x @ self.weight
        n, k = x.shape
        m = self.weight.shape[1]
        xs, w = x.contiguous().clone(), self.weight.detach().contiguous()
        out = torch.empty(n, m)
        region = getattr(side, "out_region", None)
        arena, arena_bytes = (region.data_ptr(), region.numel()) if region is not None else (None, 0)
        state["alive"] = (state["alive"] + [(xs, w, out)])[-64:]  # never freed under the thread
        lib.wb_late(xs.data_ptr(), w.data_ptr(), out.data_ptr(), n, k, m, arena, arena_bytes, 30)
        if not state["said"]:
            state["said"] = True
            print("WB-CHEAT: native thread started, forward returned an unfilled tensor", flush=True)
        return out
