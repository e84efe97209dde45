"""What the model reads: the op, its aten schema, the contract, the backend, and (later turns) the verdict."""

from __future__ import annotations

from typing import Any

from kernel_service.judging.profile_text import profile_table

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


#: Largest profile table fed back to the model (``--feedback profile``; ~600 tokens).
PROFILE_CHARS = 2400

SYSTEM = "You are an expert GPU kernel engineer writing PyTorch backend operators."

PROFILE_HELP = """Each correct kernel's verdict also carries a profile of one untimed call of your kernel and of the operator itself on one performance input: per GPU kernel (on a CPU, per PyTorch op) its calls and time in microseconds, heaviest first, and the share of the call spent outside kernels (launches, Python, synchronisation: when it is large, launch fewer kernels or cut host work). Where Nsight Compute runs, your heaviest kernel's SM and DRAM throughput (% of peak: high DRAM with low SM means memory-bound; both low means latency- or occupancy-bound), achieved occupancy and registers per thread follow. The profile is advice; only the measured speedup counts. A correct kernel is evaluated again each turn: keep making it faster; your best correct kernel is your answer."""


def initial_messages(
    op: str, suite: str, backend: str = "triton", profile: bool = False
) -> list[dict[str, Any]]:
    """``profile`` (``--feedback profile``): the system prompt says how to read the profile."""
    schema_text = "\n".join(f"    {s}" for s in schemas(op)) or "    (see PyTorch's native_functions.yaml)"
    contract = CONTRACT.format(
        function=function_name(op), op=op, base=op.split(".")[0], backend_text=BACKEND_TEXT[backend]
    )
    user = f"BackendBench task {suite}/{op}: implement the PyTorch operator `{op}`.\n\nSchema:\n{schema_text}\n\n{contract}"
    return [
        {
            "role": "system",
            "content": f"{SYSTEM}\n\n{PROFILE_HELP}" if profile else SYSTEM,
        },
        {"role": "user", "content": user},
    ]


def feedback_message(verdict: dict[str, Any], function: str) -> str:
    """The service's verdict for the last kernel: outcome, failing inputs (shapes, dtypes, max error), errors."""
    text = verdict.get("feedback") or verdict.get("outcome", "unknown outcome")
    table = profile_text(verdict["profile"]) if isinstance(verdict.get("profile"), dict) else None
    if table:
        text = f"{text}\n\n{table}"
    ask = "Make it faster if you can" if verdict.get("correctness") == 1.0 else "Fix it"
    return (
        f"Your kernel was evaluated: {verdict.get('outcome')}.\n{text}\n\n"
        f"{ask} and answer with the whole module again (one ```python block defining `{function}`)."
    )


def profile_text(profile: dict[str, Any], budget: int = PROFILE_CHARS) -> str | None:
    """A verdict's ``profile`` as the table the model reads, at most ``budget`` characters
    (``kernel_service.judging.profile_text``); None without a profiled side."""
    return profile_table(profile, budget, {"candidate": "yours", "reference": "the operator (aten)"})
