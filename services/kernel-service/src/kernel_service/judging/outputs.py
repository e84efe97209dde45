"""A call's outputs as the judge holds them: the :class:`Call` a side answers (its time, its decoded
outputs, its inputs as packed), the judge's own copies of outputs (:func:`snapshot`, sampled above
``TIMED_SAMPLE_ELEMENTS``) or views of them (:func:`unwrap`), and what refuses an output before it is
compared (:func:`foreign`, :func:`misplaced`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import integrity, transport
from .compare import flatten_outputs

#: Timed outputs of more elements are checked at this many random positions (correctness trials compare
#: whole outputs).
TIMED_SAMPLE_ELEMENTS = 1 << 20


@dataclass
class Call:
    """What one call gave: milliseconds when timed, outputs, the side's reply, the inputs as packed."""

    ms: float | None
    out: Any
    reply: dict[str, Any]
    packed: Any
    arena: transport.Arena
    #: A timed reading that missed the longest gate: its ``ms`` holds host time (``timing.GATE_TRIES``).
    host_timed: bool = False
    #: A timed reading's copy of its outputs behind its end (ms; :func:`~.readings.copy_bound`).
    copy_ms: float = 0.0

    def inputs_after(self) -> Any:
        """The judge's views of this call's inputs as the side left them (in-place and out= results)."""
        return transport.unpack(self.packed, self.arena.bytes)

    def inputs_kept(self) -> Any:
        """:meth:`inputs_after` copied now, in one copy of the arena's bytes they use (a side may write
        its arena again later; one copy, not one clone per tensor: a group of 64 inputs made hundreds of
        small GPU copies), each view keeping its strides and its offset in the copy."""
        region = self.arena.bytes[: transport.span(self.packed)].clone()
        return transport.unpack(self.packed, region)


def snapshot(out: Any, sample_above: int | None = None) -> Any:
    """The judge's own copy of decoded outputs (tensors cloned, or sampled above ``sample_above``)."""
    if isinstance(out, transport.OutputTensor):
        return integrity.snapshot_outputs(out.tensor, sample_above)
    if isinstance(out, (list, tuple)):
        return type(out)(snapshot(x, sample_above) for x in out)
    return out


def unwrap(out: Any) -> Any:
    """Decoded outputs as plain tensors (views: read them before the side's next call)."""
    if isinstance(out, transport.OutputTensor):
        return out.tensor
    if isinstance(out, (list, tuple)):
        return type(out)(unwrap(x) for x in out)
    return out


def foreign(out: Any) -> str | None:
    for i, v in enumerate(flatten_outputs(out)):
        if isinstance(v, transport.Foreign):
            return f"output {i} is a {v.what}: return plain torch.Tensor values"
    return None


def misplaced(call: Call, device: torch.device) -> str | None:
    """A CUDA job's output the side returned from host memory (it crossed through the output arena, so
    the judge's view of it is on the GPU): refused, as comparing it with the reference's fails upstream."""
    if device.type != "cuda":
        return None
    stack, i = [call.reply.get("out")], 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and isinstance(node.get("items"), list):
            stack.extend(reversed(node["items"]))
        elif isinstance(node, dict) and node.get("k") == "tensor":
            if node.get("loc") == "out":
                return f"output {i} is on the CPU, the reference's on {device}: return tensors on the inputs' device"
            i += 1
    return None
