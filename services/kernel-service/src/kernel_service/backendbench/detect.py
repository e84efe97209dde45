"""Catch a kernel that 'implements' an op by calling the op itself.

The kernel runs under a ``TorchDispatchMode`` that records every op reaching the dispatcher. Composite
ops show up as what they decompose to (``torch.softmax`` is seen as ``aten._softmax``), so ``F.softmax``,
``x @ y`` or ``torch.ops.aten.add.Tensor`` are all caught. Forbidden for op ``X``: every overload of
``aten.X``/``aten.X_``/``aten._X`` and ``prims.X``, whatever single op the real ``X`` dispatches to, and
a short list of equivalents (``mm``: ``bmm``, ``addmm``...). A kernel could hide calls by switching the
mode off, so source that touches dispatch-mode internals is refused too (a static check: it stops the
honest mistake and the lazy cheat, not a determined adversary; the sandbox is the real wall).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .suites import Case, DispatchRecorder
from .tensors import clone_value

EQUIVALENTS: dict[str, set[str]] = {
    "mm": {"bmm", "addmm", "matmul", "baddbmm", "addbmm", "mv", "dot", "_int_mm"},
    "bmm": {"mm", "baddbmm", "matmul"},
    "addmm": {"mm", "bmm", "baddbmm", "matmul"},
    "softmax": {"_softmax", "_safe_softmax"},
    "_softmax": {"softmax", "_safe_softmax"},
    "log_softmax": {"_log_softmax"},
    "_log_softmax": {"log_softmax"},
    "sum": {"nansum"},
    "relu": {"threshold"},
}
_VIEW_PACKETS = {
    "view",
    "_unsafe_view",
    "reshape",
    "permute",
    "t",
    "transpose",
    "expand",
    "unsqueeze",
    "squeeze",
}

#: names whose use in a kernel's source means it tinkers with the tracing that catches op calls.
TAMPER_PATTERNS = re.compile(
    r"_DisableTorchDispatch|_pop_mode|_python_dispatch|_get_current_dispatch_mode|_len_torch_dispatch_stack"
    r"|_set_torch_dispatch_mode|_unset_dispatch_mode|DisableTorchFunction|_ExcludeDispatchKeyGuard"
    r"|_dispatch_tls_set|\.redispatch\(|_push_mode|TorchDispatchMode|_disabled_torch_dispatch_impl"
)


def packet_name(func: Any) -> str:
    """``aten.add.Tensor`` -> ``aten.add``."""
    if isinstance(func, torch._ops.OpOverload):
        return f"{func.namespace}.{func.overloadpacket.__name__}"
    return str(func)


def forbidden_packets(op: str, cases: list[Case]) -> set[str]:
    """Namespaced packet names a kernel for ``op`` may not call."""
    base = op.split(".")[0].lstrip("_")
    names = (
        {base, base + "_", "_" + base}
        | EQUIVALENTS.get(op.split(".")[0], set())
        | EQUIVALENTS.get(base, set())
    )
    packets = {f"aten.{n}" for n in names} | {f"prims.{n}" for n in names}
    seen: set[str] = set()
    for case in cases:
        if case.overload_name in seen:
            continue
        seen.add(case.overload_name)
        packets.add(packet_name(case.overload))
        rec = DispatchRecorder()
        try:
            with rec:
                case.overload(*clone_value(case.args), **clone_value(case.kwargs))
        except Exception:
            continue
        real = {packet_name(f) for f, _, _ in rec.calls} - {f"aten.{v}" for v in _VIEW_PACKETS}
        if len(real) == 1:  # the op is (or decomposes to) exactly this one op
            packets |= real
    return packets


def tampering(source: str) -> str | None:
    """The first dispatch-internals name the source mentions, if any."""
    found = TAMPER_PATTERNS.search(source)
    return found.group(0) if found else None
