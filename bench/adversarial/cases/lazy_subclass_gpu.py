# ruff: noqa  (hostile submission source)
# Speed cheat: a Tensor subclass that runs the matmul only when the harness first touches it.
import torch
import torch.nn as nn


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, x, w):
        t = torch.Tensor._make_subclass(cls, torch.empty(x.shape[0], w.shape[1], device=x.device), False)
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
