"""What every suite produces: :class:`Case` (one call of an aten overload), and the helpers that name
overloads and record which ones a call reaches.

Kept apart from ``suites.py`` so the suite modules (``opinfo``, ``traces``) and the evaluator share one
definition without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .catalog import UnknownOpError
from .tensors import SpecError

__all__ = ["UnknownOpError"]  # defined with the catalog, which needs no torch


@dataclass
class Case:
    """One call of the op under test: the aten overload, its arguments, and what the call is for."""

    overload: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    kind: str = "correctness"  # or "performance"
    dtype: str | None = None

    @property
    def overload_name(self) -> str:
        return str(self.overload)


def resolve_overload(name: str) -> torch._ops.OpOverload:
    """``aten.add.Tensor`` / ``add.Tensor`` -> the OpOverload; a clear error otherwise."""
    parts = name.split(".")
    if parts[0] == "aten":
        parts = parts[1:]
    if len(parts) == 1:
        parts.append("default")
    try:
        packet = getattr(torch.ops.aten, parts[0])
        return getattr(packet, parts[1])
    except (AttributeError, RuntimeError):
        raise SpecError(f"no aten overload named {name!r}") from None


def overload_key(overload: torch._ops.OpOverload) -> str:
    """``aten.add.Tensor`` -> ``add.Tensor``: how suites and tasks name an overload."""
    return f"{overload.overloadpacket.__name__}.{overload._overloadname}"


def matches_op(op: str, overload: torch._ops.OpOverload) -> bool:
    """``add`` matches every overload of aten.add; ``add.Tensor`` matches only that one."""
    packet = overload.overloadpacket.__name__
    if "." in op:
        base, ovl = op.split(".", 1)
        return packet == base and overload._overloadname == ovl
    return packet == op


class DispatchRecorder(TorchDispatchMode):
    """Records the ops that reach the dispatcher (composite ops appear as what they decompose to).

    By default each distinct op once, without its arguments: a kernel may dispatch millions of ops, and
    keeping their tensors alive would hold every intermediate result (gigabytes for a blocked matmul).
    ``keep_args``: every call with its arguments (to trace a single call).
    """

    def __init__(self, keep_args: bool = False) -> None:
        super().__init__()
        self.keep_args = keep_args
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
        self._seen: set[Any] = set()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.keep_args:
            self.calls.append((func, args, kwargs))
        elif func not in self._seen:
            self._seen.add(func)
            self.calls.append((func, (), {}))
        return func(*args, **kwargs)
