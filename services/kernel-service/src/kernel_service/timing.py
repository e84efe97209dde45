"""How the judge times one call of a side, with clocks the side cannot reach.

GPU (:class:`GpuTimer`): per call, on the judge's own stream, L2 is flushed (a 256 MB buffer zeroed),
then a *gate* (``torch.cuda._sleep``: a GPU-side spin of a calibrated length) holds the stream while the
side is told to go; behind the gate the judge records its start event and an inter-process event *go*.
The side's stream waits on *go*, the side launches its work and records its inter-process event *done*,
and answers. The judge's stream then waits on *done* and records its end event, and the judge enqueues
its copies of the outputs right behind it. While the gate holds, no host latency (pipe, Python, kernel
launches) is in the reading: the GPU runs gate, start, the side's kernels, end, back to back. A call whose
answer came after the gate had already expired (``start`` completed) is measured again with a doubled gate
(``misses`` counts them); a call that synchronises the host inside ``forward`` can never beat the gate and
is measured with its host time, as an event timer around the call would. The side cannot move the judge's
events; recording *done* early only lets work on other streams run past the end event, and the outputs
the judge copies right there are then incomplete (an incorrect verdict).

CPU (:class:`CpuTimer`): the judge's ``perf_counter`` around the request, which returns once the side has
copied its outputs into the judge's shared memory; both sides pay the same round trip and copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

#: Bytes zeroed before every timed CUDA call: larger than any current GPU's L2 (H100: 50 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024
INITIAL_GATE_US = 2000.0
MAX_GATE_US = 64000.0
#: Measurements of one call that may miss the gate before a reading with host time is accepted.
GATE_TRIES = 4

Ask = Callable[[], dict[str, Any]]
#: Decodes a reply now and returns the thunk that copies the outputs (enqueued right after the end event).
Read = Callable[[dict[str, Any]], Callable[[], Any]]


class Timer(Protocol):
    """Times one call of one side (``bind`` gives the timer for a side)."""

    method: str

    def time_call(self, ask: Ask, read: Read, last_try: bool) -> tuple[float | None, dict[str, Any]]: ...


class CpuTimer:
    method = (
        "judge's time.perf_counter around each request (the side copies its outputs into the judge's shared "
        "memory before answering); candidate timed, killed, then the reference; median"
    )
    misses = 0

    def bind(self, role: str, ask: Callable[[dict[str, Any]], dict[str, Any]]) -> CpuTimer:
        return self

    def time_call(self, ask: Ask, read: Read, last_try: bool = True) -> tuple[float | None, dict[str, Any]]:
        t0 = time.perf_counter()
        reply = ask()
        ms = (time.perf_counter() - t0) * 1e3
        if reply.get("ok"):
            reply["read"] = read(reply)()
        return ms, reply


class GpuTimer:
    """Judge-side CUDA events behind a GPU-side gate (see the module docstring). One per judge."""

    method = (
        "judge-side CUDA events around the side's work (ordered by inter-process events behind a GPU gate, "
        "no host latency), L2 flushed per call; candidate timed, killed, then the reference; median"
    )

    def __init__(self, device: torch.device, deadline_s: float = 60.0) -> None:
        self.device = device
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.cycles_per_us = self._calibrate()
        self.gate_us = INITIAL_GATE_US
        self.misses = 0
        self.deadline_s = deadline_s

    def _calibrate(self) -> float:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) * 1e3)

    def bind(self, role: str, ask: Callable[[dict[str, Any]], dict[str, Any]]) -> GatedSide:
        go = torch.cuda.Event(interprocess=True)
        go.record()
        reply = ask({"op": "events", "go": bytes(go.ipc_handle()).hex()})
        handle = reply.get("done")
        if not reply.get("ok") or not isinstance(handle, str) or len(handle) != 128:
            raise RuntimeError(f"the {role} process did not share its event")
        done = torch.cuda.Event.from_ipc_handle(self.device, bytes.fromhex(handle))
        return GatedSide(self, go, done)


class GatedSide:
    """The gated timer bound to one side's inter-process events."""

    def __init__(self, timer: GpuTimer, go: torch.cuda.Event, done: torch.cuda.Event) -> None:
        self.timer, self.go, self.done = timer, go, done
        self.method = timer.method

    def bind(self, role: str, ask: Callable[[dict[str, Any]], dict[str, Any]]) -> GatedSide:
        return self

    def time_call(self, ask: Ask, read: Read, last_try: bool = True) -> tuple[float | None, dict[str, Any]]:
        t = self.timer
        stream = torch.cuda.current_stream(t.device)
        t.flush.zero_()
        torch.cuda._sleep(int(t.gate_us * t.cycles_per_us))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        self.go.record(stream)
        reply = ask()
        held = not start.query()
        if reply.get("ok"):
            copy = read(reply)  # decodes (opens the side's memory) before the end is recorded
            stream.wait_event(self.done)
            end.record(stream)
            reply["read"] = copy()
        else:
            end.record(stream)
        limit = time.monotonic() + t.deadline_s
        while not end.query():
            if time.monotonic() > limit:
                raise TimeoutError("a timed call did not finish on the GPU")
            time.sleep(0.0001)
        ms = float(start.elapsed_time(end))
        if held:
            return ms, reply
        t.misses += 1
        t.gate_us = min(t.gate_us * 2, MAX_GATE_US)
        return (ms if last_try else None), reply
