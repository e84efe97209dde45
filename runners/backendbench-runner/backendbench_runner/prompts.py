"""What the model reads: the op, its aten schema, the contract, the backend, and (later turns) the verdict."""

from __future__ import annotations

from typing import Any

CONTRACT = """Write a Python module defining `{function}(*args, **kwargs)`: a drop-in implementation of the PyTorch
operator `aten.{op}` with exactly the schema below. It is called with the operator's own arguments
(tensors on the evaluation device, float32/bfloat16/float16 and edge cases such as empty or non-contiguous
tensors) and must return what the operator returns (same shape, dtype, device; in-place/out= variants must
write their inputs as the operator does). {backend_text} Do NOT call `aten.{base}` itself (torch.{base},
Tensor.{base}, torch.ops.aten.{base} or an equivalent such as its composite form): such kernels are detected
and scored incorrect.
Answer with one ```python block holding the whole module (imports included)."""

BACKEND_TEXT = {
    "triton": "Write the computation as Triton kernels (`@triton.jit`) launched from the function; "
    "allocating outputs with torch is fine.",
    "torch": "Compose it from other PyTorch operations.",
    "cpp": "Write it in C++/CUDA compiled with torch.utils.cpp_extension.load_inline at import time.",
}


def function_name(op: str) -> str:
    """``add`` -> ``add_kernel_impl``; an overload ``add.Tensor`` -> ``add__Tensor_kernel_impl`` (upstream)."""
    return op.replace(".", "__") + "_kernel_impl"


def schemas(op: str) -> list[str]:
    """The aten schema(s) the kernel must accept (``add`` alone lists the packet's main overloads)."""
    import torch  # here: listing a suite or naming an op needs no torch

    packet_name, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None:
        return []
    names = [overload] if overload else [n for n in packet.overloads() if "out" not in n][:6]
    return [str(getattr(packet, n)._schema) for n in names]


def initial_messages(op: str, suite: str, backend: str = "triton") -> list[dict[str, Any]]:
    schema_text = "\n".join(f"    {s}" for s in schemas(op)) or "    (see PyTorch's native_functions.yaml)"
    contract = CONTRACT.format(
        function=function_name(op), op=op, base=op.split(".")[0], backend_text=BACKEND_TEXT[backend]
    )
    user = f"BackendBench task {suite}/{op}: implement the PyTorch operator `{op}`.\n\nSchema:\n{schema_text}\n\n{contract}"
    return [
        {
            "role": "system",
            "content": "You are an expert GPU kernel engineer writing PyTorch backend operators.",
        },
        {"role": "user", "content": user},
    ]


def feedback_message(verdict: dict[str, Any], function: str) -> str:
    """The service's verdict for the last kernel: outcome, failing inputs (shapes, dtypes, max error), errors."""
    text = verdict.get("feedback") or verdict.get("outcome", "unknown outcome")
    return (
        f"Your kernel was evaluated: {verdict.get('outcome')}.\n{text}\n\n"
        f"Fix it and answer with the whole module again (one ```python block defining `{function}`)."
    )
