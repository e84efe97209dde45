"""Offline models: ``reference`` (correct without calling the op) and ``aten`` (calls the op: a cheat).

``reference`` writes, per op, a kernel in plain torch that never calls the op under test: a hand-written
decomposition for the smoke/facto ops, and PyTorch's own Python decomposition (``torch._decomp``) for
the others. It is the harness's sanity check: every op should come out correct. ``aten`` returns the op
itself and must come out as ``calls_original_op``: the check that the cheat detector works.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import GenerationResult, GenerationStatus, Task

from .agent import save_kernel
from .options import RunOptions
from .prompts import function_name

HAND_WRITTEN: dict[str, str] = {
    "add": """
def add_kernel_impl(a, b, alpha=1):
    return torch.sub(a, b, alpha=-alpha)
""",
    "sub": """
def sub_kernel_impl(a, b, alpha=1):
    return torch.add(a, b, alpha=-alpha)
""",
    "mul": """
def mul_kernel_impl(a, b):
    dtype = torch.result_type(a, b)
    b = torch.as_tensor(b, dtype=dtype, device=a.device)
    x, y = torch.broadcast_tensors(a.to(dtype), b)
    return torch.stack([x, y]).prod(dim=0)
""",
    "relu": """
def relu_kernel_impl(x):
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
""",
    "neg": """
def neg_kernel_impl(x):
    return torch.sub(torch.zeros((), dtype=x.dtype, device=x.device), x)
""",
    "abs": """
def abs_kernel_impl(x):
    return torch.where(x < 0, torch.sub(torch.zeros((), dtype=x.dtype, device=x.device), x), x)
""",
    "sigmoid": """
def sigmoid_kernel_impl(x):
    y = x.float()
    return torch.reciprocal(torch.exp(torch.sub(torch.zeros((), device=x.device), y)) + 1).to(x.dtype)
""",
    "sum": """
def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    return [d % max(x.dim(), 1) for d in ([dim] if isinstance(dim, int) else dim)]

def sum_kernel_impl(x, dim=None, keepdim=False, dtype=None):
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else torch.int64)
    dims = _dims(x, dim)
    count = 1
    for d in dims:
        count *= x.shape[d] if x.dim() else 1
    acc = x.double()
    if count == 0:
        shape = [1 if i in dims else s for i, s in enumerate(x.shape)] if keepdim else [s for i, s in enumerate(x.shape) if i not in dims]
        return torch.zeros(shape, dtype=out_dtype, device=x.device)
    if x.dim() == 0:
        return acc.to(out_dtype)
    return (torch.mean(acc, dim=dims, keepdim=keepdim) * count).to(out_dtype)
""",
    "mean": """
def mean_kernel_impl(x, dim=None, keepdim=False, dtype=None):
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else [d % max(x.dim(), 1) for d in dim]
    count = 1
    for d in dims:
        count *= x.shape[d] if x.dim() else 1
    if x.dim() == 0:
        return x.double().to(dtype or x.dtype)
    total = torch.sum(x.double(), dim=dims, keepdim=keepdim)
    return (total / count).to(dtype or x.dtype)
""",
    "amax": """
def amax_kernel_impl(x, dim=(), keepdim=False):
    dims = sorted({d % max(x.dim(), 1) for d in dim}) if len(dim) else list(range(x.dim()))
    out = x
    for d in reversed(dims):
        out = torch.max(out, dim=d, keepdim=True).values
    if not keepdim:
        for d in reversed(dims):
            out = out.squeeze(d)
    return out.clone() if out is x else out
""",
    "mm": """
def mm_kernel_impl(a, b):
    m, k = a.shape
    n = b.shape[1]
    acc = torch.zeros((m, n), dtype=torch.float32 if a.dtype != torch.float64 else a.dtype, device=a.device)
    step = 16
    for k0 in range(0, k, step):
        acc += (a[:, k0:k0 + step, None].to(acc.dtype) * b[None, k0:k0 + step, :].to(acc.dtype)).sum(dim=1)
    return acc.to(a.dtype)
""",
    "cumsum": """
def cumsum_kernel_impl(x, dim, dtype=None):
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else torch.int64)
    if x.dim() == 0:
        return x.to(out_dtype).clone()
    if x.device.type == "cuda" and out_dtype in (torch.float16, torch.bfloat16):
        # PyTorch's CUDA scan keeps each partial sum in the output dtype: round after every step as it does
        y = x.to(out_dtype).movedim(dim, 0)
        out = torch.empty_like(y)
        acc = torch.zeros_like(y[0])
        for k in range(y.shape[0]):
            acc = (acc.float() + y[k].float()).to(out_dtype)
            out[k] = acc
        return out.movedim(0, dim)
    # accumulate in float32 (half types) or float64 (integers), as the CPU kernels do
    acc = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else (out_dtype if out_dtype.is_floating_point else torch.float64)
    y = x.to(acc).movedim(dim, -1)
    n = y.shape[-1]
    upper = torch.triu(torch.ones(n, n, dtype=acc, device=x.device))
    return (y @ upper).movedim(-1, dim).to(out_dtype)
""",
    "softmax": """
def softmax_kernel_impl(x, dim, dtype=None):
    y = x.to(dtype) if dtype is not None else x
    z = y.float() if y.dtype in (torch.float16, torch.bfloat16) else y
    shifted = z - torch.amax(z, dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return (e / torch.sum(e, dim=dim, keepdim=True)).to(y.dtype)
""",
}


def reference_source(op: str) -> str:
    """A kernel for ``op`` that is correct without calling the op itself."""
    packet, _, overload = op.partition(".")
    if packet in HAND_WRITTEN:
        source = "import torch\n" + HAND_WRITTEN[packet]
        if overload:  # opinfo names overloads: add.Tensor -> add__Tensor_kernel_impl
            source += f"\n\n{function_name(op)} = {packet}_kernel_impl\n"
        return source
    overload = overload or "default"
    return f"""import torch
from torch._decomp import decomposition_table

# PyTorch's own Python decomposition of aten.{packet}.{overload}: plain torch ops, not the op itself.
_DECOMPOSITION = decomposition_table[torch.ops.aten.{packet}.{overload}]


def {function_name(op)}(*args, **kwargs):
    return _DECOMPOSITION(*args, **kwargs)
"""


def aten_source(op: str) -> str:
    """A 'kernel' that is the op itself: the detector must score it incorrect."""
    packet, _, overload = op.partition(".")
    target = f"torch.ops.aten.{packet}.{overload}" if overload else f"torch.ops.aten.{packet}"
    return f"""import torch


def {function_name(op)}(*args, **kwargs):
    return {target}(*args, **kwargs)
"""


def _offline(name: str, make_source: Callable[[str], str]) -> OfflineModel:
    async def model(
        runner: BenchmarkRunner, task: Task, config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        started = time.perf_counter()
        op = getattr(task, "op", task.question)
        source = make_source(op)
        save_kernel(log_dir, RunOptions.parse(config.extra), op, 0, source)
        return GenerationResult(
            task_id=task.id,
            model=name,
            payload=source,
            payload_type="code",
            status=GenerationStatus.OK,
            latency_s=time.perf_counter() - started,
            metadata={"op": op, "offline": True},
        )

    return model


reference_model = _offline("reference", reference_source)
aten_model = _offline("aten", aten_source)
