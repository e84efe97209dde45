# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# Speed cheat: return a Tensor subclass that does the matmul only when the harness first looks at it
# (shape, dtype, detach...), i.e. after the timer stopped.
import torch
import torch.nn as nn


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, x, w):
        t = torch.Tensor._make_subclass(cls, torch.empty(x.shape[0], w.shape[1]), False)
        t._pending = (x, w)
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, Lazy) and getattr(a, "_pending", None) is not None:
                x, w = a._pending
                a._pending = None
                with torch._C.DisableTorchFunctionSubclass():
                    torch.matmul(x, w, out=a)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return Lazy(x, self.weight.detach())
