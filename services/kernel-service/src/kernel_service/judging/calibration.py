"""What the path costs and how many calls a reading holds, measured through a run's sides before they are
timed: :func:`calibrate` (null calls: the path's own cost a reading, or the level through one side's
process) and :func:`reading_size` (the reference's calls per reading). Both benchmarks' judges time
with them; the arithmetic on what they measure is ``readings.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from . import transport
from .compare import flatten_outputs
from .timing import NULL_CALLS, CpuTimer, GatedSide, GpuTimer, Timer, calls_per_reading

if TYPE_CHECKING:
    from .judging import Run

#: Gated calls of the reference side that choose the calls per reading.
ESTIMATE_CALLS = 3


def reading_size(
    run: Run,
    base: GpuTimer,
    timers: dict[str, Timer],
    sets: list[tuple[list[Any], dict[str, Any]]],
    extra: dict[str, Any] | None = None,
) -> tuple[int, int]:
    """Calls per timed reading of the reference, from a few gated calls of the trusted reference side (the
    candidate stopped meanwhile) less a first estimate of the path's cost, and the most calls a reading
    may hold (bytes, values a reply names). The candidate's count is this one or, where its calls are far
    faster, more: :func:`~.readings.candidate_reading_size`. ``extra``: the reference side's request fields."""
    with run.frozen("candidate"):
        null_ms = calibrate(run, base, timers["reference"], sets)
        ms = []
        for _ in range(ESTIMATE_CALLS):
            call = run.calls("reference", sets, timers["reference"], extra)
            assert call.ms is not None
            ms.append(call.ms)
    outs = flatten_outputs(call.out)
    nbytes = transport.layout_bytes(sets) + 2 * sum(t.nbytes for t in outs if isinstance(t, torch.Tensor))
    leaves = transport.tensor_count(sets) + len(outs)
    cap = calls_per_reading(0.0, nbytes, leaves, transport.MAX_NODES)
    return calls_per_reading(min(ms) - null_ms, nbytes, leaves, transport.MAX_NODES), cap


def calibrate(
    run: Run,
    base: GpuTimer | CpuTimer,
    timer: Timer,
    sets: list[tuple[list[Any], dict[str, Any]]],
    draw: Callable[[], list[tuple[list[Any], dict[str, Any]]]] | None = None,
    role: str = "reference",
    readings: int = NULL_CALLS,
    probe: bool = False,
) -> float:
    """The path's own cost per reading, from null calls of the reference side with a reading's inputs
    (``sets``) written, as for a real reading (their preparation time is the baseline); ``draw``: drawn
    into the arena again for each null call, as readings made by :meth:`Run.drawn` are. A ``probe`` (and
    any call with ``role`` "candidate") measures the same through ``role``'s process, ``readings`` null
    calls, and leaves the calibration as it was (:meth:`GpuTimer.side_null`): the level beside a lone
    reading. A side may slow its own null calls: the candidate's are used only by
    :func:`~.readings.lone_level`, and only downwards."""
    if isinstance(base, CpuTimer):
        return 0.0
    values = [(list(a), dict(k)) for a, k in sets]
    arena = run.arena(role, "in", transport.layout_bytes(values))
    msg = {"op": "call", "null": True, "gated": True}
    packed, write = transport.pack(values, arena)
    msg["calls"] = packed
    if draw is not None:
        write = partial(run.draw, draw, arena, msg)
    assert isinstance(timer, GatedSide)
    if probe or role != "reference":
        return base.side_null(timer, partial(run.ask, role, msg), write, msg, readings)
    return base.calibrate_null(timer, partial(run.ask, role, msg), write, msg)
