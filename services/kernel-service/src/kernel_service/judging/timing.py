"""How the judge times one call of a side, with clocks the side cannot reach.

GPU (:class:`GpuTimer`), per call, on the judge's own stream: a *gate* holds the stream while the side is
told to go (:class:`HostGate`: a GPU-side wait on a word the judge writes once the call's end and output
copies are enqueued, opened by a watchdog after the gate's length otherwise; :class:`SleepGate`, a spin of
that length, where the driver lacks stream memory operations); behind it the judge records
``start``, writes this call's inputs into the side's arena, flushes L2 (a 256 MB buffer zeroed), records
``mid`` and an inter-process event *go*. The side's stream waits on *go*, the side launches its work,
records its inter-process event *done* and answers; the judge's stream waits on *done* and records
``end``, and the judge's copies of the outputs are enqueued right behind it. The reading is ``mid -> end``
less the path's own cost (the median of null calls through the same path on the trusted reference side,
made once the candidate is gone: two inter-process event hops, ~0.29 ms of GPU context switches on the
H100 without MPS, ~6.6 or ~10.9 us through the stream-memory hop under MPS), so no host latency (pipe, Python, launches) is in it while the gate
holds. A call whose end (and output copies) were enqueued after the gate opened by itself is measured
again with a doubled gate, up to the longest;
a call that synchronises the host inside ``forward`` never beats it and is read with its host time, as an
event timer around the call would read it, and counted (``timing_degraded`` when more than a tenth of a
side's readings hold host time: ``kernelbench.judge``). A reading may hold several calls (:func:`calls_per_reading`),
each on inputs of its own, all written before ``mid``, run back to back between one *go* and one *done*:
the path's cost, and its noise, is then divided among them.

What a side cannot do: start early (its inputs do not exist before ``start``; work done on stale arena
contents gives wrong outputs), hide work on another stream (``end`` only waits for *done*, and the
outputs the judge copies right there are then incomplete: an incorrect verdict), or work while the judge
writes its inputs and flushes L2 (``start -> mid`` is the judge's own work: a side's median that exceeds
the reference side's for the same inputs by over ``PREP_SLACK`` is an execution failure).

Under the service's MPS daemon (``workers.mps``) clients run at once, so a reading is one call, the hop
is a pair of counters in device memory (``cuda_ipc.Hop``) instead of the events, each side's readings are
read against its own process's level (``judging.own_level``; the candidate moved to the lower level
before its code loads: ``placement._candidate_low``; the reference timed in a process at the candidate's level:
``Run.reference_at``), and a candidate's time is bounded by the judge's copy of its
outputs (``judging.copy_bound``).

CPU (:class:`CpuTimer`): the judge's ``perf_counter`` from before it writes the inputs until it has its own
copy of the outputs the side put into the judge's shared memory (the same copy for both sides).
"""

from __future__ import annotations

import ctypes
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from . import cuda_ipc

#: Bytes zeroed before every timed CUDA call: larger than any current GPU's L2 (H100: 50 MB).
L2_FLUSH_BYTES = 256 * 1024 * 1024
#: A job's first gate: long enough for a side's first launches (lazy CUDA/cuBLAS set-up).
INITIAL_GATE_US = 2000.0
#: The gate halves, down to this, while replies take under 1/GATE_MARGIN of the halved gate (a spin gate
#: costs its whole length per call; a side's round trip was ~0.7-1.7 ms on the H100).
MIN_GATE_US = 250.0
MAX_GATE_US = 64000.0
GATE_MARGIN = 4.0
#: A reading of several calls holds the gate at least this long per call: a host-released gate costs
#: nothing when the judge opens it early, and a reading the watchdog opens is measured again.
GATE_US_PER_CALL = 250.0
#: Measurements of one reading that may miss the gate before it is accepted with host time in it: the gate
#: doubles on each miss, so from the initial gate it reaches ``MAX_GATE_US`` within these; a reading
#: that misses the longest gate is accepted at once, marked ``host_timed`` (a forward that synchronises
#: the host never meets any gate; the judge then reads fewer calls a reading: ``speedup._time``).
GATE_TRIES = 7
#: A reading's calls are cut so that its host work (the judge drawing and copying, the side launching)
#: takes about this long, well inside the longest gate: 256 calls of a 1x128 ``load_inline`` add took
#: 47-65 ms of host time a reading on the H100 while 12 nvcc builds ran (the gate's cap was 64 ms),
#: and such readings, accepted with host time, read it 0.08x-8.6x (bench/loaded_fidelity.py).
READING_HOST_US = 12000.0
NULL_CALLS = 20
#: A timed call whose end the GPU has not reached after this long has its side asked to synchronise: a
#: side whose context faulted says so at once (measured without MPS: the judge's wait on a faulted
#: process's *done* never ends, even after that process exits, so waiting out the deadline found a fault
#: inside timing only at ``timeout_s``), an honest long call answers once it is done.
HEALTH_AFTER_S = 0.5
#: A candidate's input preparation (``start -> mid``) may exceed the reference side's by this factor
#: plus ``PREP_SLACK_MS`` before it counts as work done while the judge prepared the call.
PREP_SLACK = 1.25
PREP_SLACK_MS = 0.010
#: A reading of a short call holds this much GPU work: the calls of one reading run back to back behind one
#: go/done hop, so the hop's cost (~0.29 ms of GPU context switches without MPS, at either of two levels
#: ~8 us apart per side process) is divided among them. One call per reading read a ~60 us kernel 4-7%
#: off an independent event timer on the H100, and a 3 us op anywhere from 0.25x to 1.56x of itself.
READING_TARGET_MS = 2.0
#: At most this many calls in one reading: each is queued behind the gate (the side's launch queue must
#: not fill while the GPU is held) and each output stays alive until the judge has read it.
MAX_CALLS_PER_READING = 256
#: One reading's inputs, outputs and the judge's copies of them stay under this many bytes. On the H100
#: (BENCHMARKS.md, "Several calls a reading") 2 GiB read every fidelity kernel within bounds; 512 MiB left
#: the 95 us chain at one call a reading (the hop's noise again). (A broadcast multiply of 64 MB read
#: 77-86 us a call at 10 calls a reading, 60 us in one process, while arenas were legacy IPC mappings:
#: ``cuda_ipc.Shared``.)
READING_BYTES = 2 << 30

Ask = Callable[[], dict[str, Any]]
#: Decodes a reply now and returns the thunk that copies the outputs (enqueued right after the end event).
Read = Callable[[dict[str, Any]], Callable[[], Any]]
Write = Callable[..., None]


def under_mps() -> bool:
    """Whether this worker's GPU work goes through the service's own MPS daemon (``workers.mps`` gives the
    eval workers ``CUDA_MPS_PIPE_DIRECTORY``)."""
    return bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))


def calls_per_reading(call_ms: float, call_bytes: int, leaves: int, max_nodes: int) -> int:
    """How many calls one timed reading of a call taking ``call_ms`` (GPU work, the path's cost taken
    off; <= 0 when too short to tell) makes: enough for ``READING_TARGET_MS`` of work, within the caps on
    calls, on bytes (``call_bytes``: one call's inputs, outputs and the judge's copies of the outputs) and
    on the values a reply may name.

    Under MPS, one: the path costs ~6.6-10.9 us there (no context switch), so nothing needs dividing, and a
    reading of one call leaves a candidate no set of calls to overlap, batch or share work across, and
    starts every call from a flushed L2 (bench/chained_calls_probe.py measured the per-call path)."""
    if under_mps():
        return 1
    calls = MAX_CALLS_PER_READING if call_ms <= 0 else math.ceil(READING_TARGET_MS / call_ms)
    calls = min(calls, MAX_CALLS_PER_READING, READING_BYTES // max(call_bytes, 1))
    return max(1, min(calls, max_nodes // max(leaves + 2, 1)))


class Timer(Protocol):
    """Times one call of one side (a timer factory's ``bind`` gives the timer for a side)."""

    method: str

    def time_call(
        self,
        ask: Ask,
        read: Read,
        write: Write,
        last_try: bool,
        calls: int = 1,
        msg: dict[str, Any] | None = None,
    ) -> tuple[float | None, dict[str, Any]]: ...


class SideFaulted(Exception):
    """A timed call's side reports a fault (its GPU context failed) while the judge waits for its *done*.

    Without MPS the judge's stream then waits on an event of a dead context for good: nothing queued on it
    behind the wait ever runs, and anything of the judge's that synchronises the device (freeing memory,
    closing a mapping) hangs with it, so the judge must not touch the GPU again (``Run.stuck``)."""

    def __init__(self, reply: dict[str, Any], error: Exception | None = None) -> None:
        super().__init__(str(reply.get("message", "the side's GPU context failed")))
        self.reply = reply
        #: What asking raised instead of a reply (the side died or overran: the judge's own error for it).
        self.error = error


class PrepError(Exception):
    """The candidate's calls slowed the judge's own preparation of them: it worked before its start."""


class CpuTimer:
    method = (
        "judge's time.perf_counter from writing the inputs to the side's answer (after it copied its "
        "outputs into the judge's shared memory); candidate timed, killed, then the reference; median"
    )

    def bind(self, role: str, ask: Callable[[dict[str, Any]], dict[str, Any]]) -> CpuTimer:
        return self

    def time_call(
        self,
        ask: Ask,
        read: Read,
        write: Write,
        last_try: bool = True,
        calls: int = 1,
        msg: dict[str, Any] | None = None,
    ) -> tuple[float | None, dict[str, Any]]:
        t0 = time.perf_counter()
        write()
        reply = ask()
        if reply.get("ok"):
            # inside the reading: work a side's native thread finishes after its answer but before the
            # judge's copy would otherwise be untimed and still be read as done
            reply["read"] = read(reply)()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, reply

    null_ms = 0.0

    def calibrate_null(self, side: Any, ask_null: Ask, write: Write) -> float:
        return 0.0

    def check(self, baseline: str) -> None:
        pass


def _reached(event: torch.cuda.Event, within_s: float) -> bool:
    """Whether the GPU reaches ``event`` within ``within_s`` (polled: a stuck stream must not hang the judge)."""
    limit = time.monotonic() + within_s
    while not event.query():
        if time.monotonic() > limit:
            return False
        time.sleep(0.0001)
    return True


class SleepGate:
    """The gate as a GPU-side spin of the gate's length (``torch.cuda._sleep``): where the driver has no
    stream memory operations. Every call costs the whole length; a call is held if its ``start`` had not
    run when its end and output copies were enqueued."""

    def __init__(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        self.cycles_per_us = cycles / (start.elapsed_time(end) * 1e3)

    def hold(self, us: float) -> None:
        torch.cuda._sleep(int(us * self.cycles_per_us))

    def release(self, start: torch.cuda.Event) -> bool:
        return not start.query()


class HostGate:
    """The gate as a GPU-side wait on a word of the judge's page-locked memory (``cuStreamWaitValue32``):
    the stream holds until the judge writes the call's number, right after it has enqueued the call's end
    and output copies, so a call costs the host's round trip and no more (a 2-8 ms spin per call was
    most of the wall time of a level-1 job). A watchdog thread writes it after the gate's length instead
    (a side that synchronises inside ``forward`` waits for a go that waits for its own reply): that call
    is not held, as with the spin."""

    def __init__(self, device: torch.device) -> None:
        self.word = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self.dptr = cuda_ipc.host_device_pointer(self.word.data_ptr())
        self.value = ctypes.c_int32.from_address(self.word.data_ptr())
        self.n = 0
        self.deadline: float | None = None
        self.cv = threading.Condition()
        self.hold(0.0)  # raises CudaDriverError where the driver has no stream memory operations
        self.release(None)
        passed = torch.cuda.Event()
        passed.record()
        if not _reached(passed, 10.0):
            raise GateStuck("the GPU never saw the judge's gate word: its stream is blocked")
        self.watchdog = threading.Thread(target=self._watch, name="gate-watchdog", daemon=True)
        self.watchdog.start()

    def hold(self, us: float) -> None:
        with self.cv:
            self.n += 1
            cuda_ipc.stream_wait_value(torch.cuda.current_stream().cuda_stream, self.dptr, self.n)
            self.deadline = time.monotonic() + us * 1e-6
            self.cv.notify()

    def release(self, start: torch.cuda.Event | None) -> bool:
        """Open the gate; True if the judge opened it (the watchdog had not)."""
        with self.cv:
            if self.value.value >= self.n:
                return False
            self.value.value = self.n
            self.deadline = None
            return True

    def _watch(self) -> None:
        with self.cv:
            while True:
                left = None if self.deadline is None else self.deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.value.value = self.n
                    self.deadline = None
                else:
                    self.cv.wait(left)


class GateStuck(RuntimeError):
    """The host-released gate did not open: this judge's stream cannot be used (the worker must go)."""


def make_gate(device: torch.device) -> SleepGate | HostGate:
    """The host-released gate where the driver supports stream memory operations, else the spin."""
    try:
        return HostGate(device)
    except (cuda_ipc.CudaDriverError, AttributeError):
        return SleepGate(device)


#: How a reading is made under the service's MPS daemon (``workers.mps``).
MPS_METHOD = (
    "judge-side CUDA events around the side's work under MPS: one call a reading, go and done as counters "
    "written and waited on by stream memory operations behind a GPU gate (inputs written after the start, "
    "L2 flushed, no host latency, the path's null-call cost subtracted), each candidate call's time at least "
    "its time to the end of the judge's copy of its outputs less the reference's copy; candidate timed, "
    "killed, then the reference; median of the readings"
)


class GpuTimer:
    """Judge-side CUDA events behind a GPU-side gate (see the module docstring). One per judge."""

    method = (
        "judge-side CUDA events around the side's work, ordered by inter-process events behind a GPU gate "
        "(inputs written after the start, L2 flushed, no host latency, the path's null-call cost "
        "subtracted); calls under 2 ms timed several per reading, back to back, each on values of its own "
        "(as many as the host's work on them fits well inside the gate); candidate timed, killed, then the "
        "reference; median of the readings' per-call means (KernelBench: the candidate's floored by its lone "
        "calls times the reference's several-to-lone ratio)"
    )

    def __init__(self, device: torch.device, deadline_s: float = 60.0) -> None:
        self.device = device
        if under_mps():
            self.method = MPS_METHOD
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.gate = make_gate(device)
        self.gate_us = INITIAL_GATE_US
        self.misses = 0
        self.round_trips_us: list[float] = []
        self.deadline_s = deadline_s
        self.null_ms = 0.0
        self.prep: dict[str, list[float]] = {}
        #: Under MPS, each role's counters for hops through stream memory operations (``cuda_ipc.Hop``).
        self.hops: dict[str, cuda_ipc.Hop] = {}

    def start_job(self) -> None:
        """Each job starts from the initial gate: one slow reply (a first launch, a pause of the host)
        doubles the gate for the rest of its job, not for every later job of this judge; every held call
        costs the gate's length in wall time."""
        self.gate_us = INITIAL_GATE_US
        self.misses = 0
        self.round_trips_us = []

    def report(self) -> dict[str, float]:
        """This job's gate: misses, final length, the median reply round trip and the null call (us)."""
        rt = statistics.median(self.round_trips_us) if self.round_trips_us else 0.0
        return {
            "host_released": float(isinstance(self.gate, HostGate)),
            "misses": self.misses,
            "final_us": self.gate_us,
            "round_trip_us": round(rt, 1),
            "null_us": round(self.null_ms * 1e3, 2),
        }

    def bind(self, role: str, ask: Callable[[dict[str, Any]], dict[str, Any]]) -> GatedSide:
        go = torch.cuda.Event(interprocess=True)
        go.record()
        msg = {"op": "events", "go": bytes(go.ipc_handle()).hex()}
        hop = None
        if under_mps():
            if role not in self.hops:
                self.hops[role] = cuda_ipc.Hop()
            hop = self.hops[role]
            hop.reset()
            msg["hop"] = hop.handle.hex()
        reply = ask(msg)
        handle = reply.get("done")
        if not reply.get("ok") or not isinstance(handle, str) or len(handle) != 128:
            raise RuntimeError(f"the {role} process did not share its event")
        done = torch.cuda.Event.from_ipc_handle(self.device, bytes.fromhex(handle))
        self.prep[role] = []
        side = GatedSide(self, role, go, done, hop if reply.get("hop") else None)
        side.ask = ask
        return side

    def calibrate_null(
        self, side: GatedSide, ask_null: Ask, write: Write, msg: dict[str, Any] | None = None
    ) -> float:
        """The path's own cost (ms), from null calls (wait on *go*, record *done*) of the trusted reference
        side, with this job's inputs written as for a real call (their preparation time is the baseline).
        Call it with the candidate gone: nothing else may run on the GPU meanwhile."""
        self.prep["reference"] = []
        self.null_ms = self._null_median(side, ask_null, write, msg)
        self.prep["null"], self.prep["reference"] = self.prep["reference"], []
        return self.null_ms

    def side_null(
        self,
        side: GatedSide,
        ask_null: Ask,
        write: Write,
        msg: dict[str, Any] | None = None,
        readings: int = NULL_CALLS,
    ) -> float:
        """The path's cost (ms) through ``side``'s own process, measured as :meth:`calibrate_null` does
        through the reference's, ``readings`` of them: it changes neither the calibration nor the
        preparation records. A side may make its own null calls slow, so only ``judging.lone_level`` uses
        this, capped by the trusted nulls."""
        kept = {role: list(times) for role, times in self.prep.items()}
        try:
            return self._null_median(side, ask_null, write, msg, readings)
        finally:
            self.prep = kept

    def _null_median(
        self,
        side: GatedSide,
        ask_null: Ask,
        write: Write,
        msg: dict[str, Any] | None,
        count: int = NULL_CALLS,
    ) -> float:
        readings = []
        for i in range(count + GATE_TRIES):
            ms, reply = side.time_call(ask_null, lambda r: lambda: None, write, i >= count, msg=msg)
            if ms is not None:
                readings.append(ms)
            if len(readings) >= count:
                break
        return statistics.median(readings) if readings else 0.0

    def check(self, baseline: str) -> None:
        """Raise :class:`PrepError` when the candidate's calls slowed the judge's preparation of them
        (``baseline``: "null" calls with the same inputs, or the "reference" side's calls)."""
        cand, base = self.prep.get("candidate"), self.prep.get(baseline)
        if cand and base:
            c, b = statistics.median(cand), statistics.median(base)
            if c > b * PREP_SLACK + PREP_SLACK_MS:
                raise PrepError(
                    "GPU work of the submission was still running after forward returned (work left on "
                    "another stream, or launched and not waited for): it ran while the judge wrote the next "
                    f"timed call's inputs and flushed L2, which took {c * 1e3:.1f} us against {b * 1e3:.1f} us "
                    "with nothing else running. Make forward's work finish on the current stream before it "
                    "returns (torch.cuda.current_stream().wait_stream(side_stream), or launch on the current "
                    "stream)"
                )


class GatedSide:
    """The gated timer bound to one side's inter-process events."""

    def __init__(
        self,
        timer: GpuTimer,
        role: str,
        go: torch.cuda.Event,
        done: torch.cuda.Event,
        hop: cuda_ipc.Hop | None = None,
    ) -> None:
        self.timer, self.role, self.go, self.done, self.hop = timer, role, go, done, hop
        self.method = timer.method
        #: Asks the side's process something (``{"op": "sync"}`` when a call seems stuck: :meth:`_health`).
        self.ask: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        #: The last reading's host round trip (us) and whether it was accepted with host time in it.
        self.round_trip_us = 0.0
        self.host_timed = False
        #: The last reading's copy of the outputs (ms from ``end``): under MPS a side's work hidden on
        #: another stream delays it (``judging.copy_bound``).
        self.copy_ms = 0.0

    def _health(self) -> None:
        """Ask the side to synchronise; raise :class:`SideFaulted` with its answer if it failed."""
        if self.ask is None:
            return
        try:
            reply = self.ask({"op": "sync"})
        except Exception as exc:  # noqa: BLE001 - the side died or overran: the judge's stream still waits
            raise SideFaulted({"message": str(exc)}, exc) from exc
        if not reply.get("ok"):
            raise SideFaulted(reply)

    @property
    def longest(self) -> bool:
        """The gate is at its longest: a reading that misses it now is accepted with host time."""
        return self.timer.gate_us >= MAX_GATE_US

    def time_call(
        self,
        ask: Ask,
        read: Read,
        write: Write,
        last_try: bool = True,
        calls: int = 1,
        msg: dict[str, Any] | None = None,
    ) -> tuple[float | None, dict[str, Any]]:
        """One reading of ``calls`` calls (the gate waits for the host's work on each: the judge writes
        and copies, the side launches, and a reading of 256 short calls took 10-30 ms of host time)."""
        t = self.timer
        stream = torch.cuda.current_stream(t.device)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        start, mid, end, copied = ev
        gate_us = max(t.gate_us, calls * GATE_US_PER_CALL)  # one call: the gate (>= MIN_GATE_US) itself
        t.gate.hold(gate_us)
        asked = time.perf_counter()  # the gate must outlast the judge's writing (drawing) of the inputs too
        start.record(stream)
        write(False)
        t.flush.zero_()
        mid.record(stream)
        hop = self.hop if msg is not None else None
        if hop is not None:  # ``msg`` tells the side which count to wait for
            assert msg is not None
            msg["hop"] = n = hop.next()
            cuda_ipc.stream_write_value(stream.cuda_stream, hop.ptr, n)
        else:
            self.go.record(stream)
        try:
            reply = ask()
            if reply.get("ok"):
                copy = read(reply)  # decodes (opens the side's memory) before the end is recorded
                if hop is not None:
                    cuda_ipc.stream_wait_value(stream.cuda_stream, hop.ptr + hop.DONE_AT, n)
                else:
                    stream.wait_event(self.done)
                end.record(stream)
                reply["read"] = copy()
                copied.record(stream)  # under MPS the copy can queue behind work the side still runs
            else:
                end.record(stream)
                copied.record(stream)
        finally:
            # Held only if the end and the output copies were enqueued while the gate still held the
            # stream: then ``end`` marks the side's *done* (not this process's latency in decoding the
            # reply) and the copies run right behind it, before the side could change its outputs.
            held = t.gate.release(start)
        round_trip_us = self.round_trip_us = (time.perf_counter() - asked) * 1e6
        self.copy_ms = 0.0
        t.round_trips_us.append(round_trip_us)
        self.host_timed = False
        if not _reached(copied, HEALTH_AFTER_S):  # behind ``end``: the outputs' copy as well
            self._health()
            if not _reached(copied, t.deadline_s):
                raise TimeoutError("a timed call did not finish on the GPU")
        if not held:
            t.misses += 1
            t.gate_us = min(gate_us * 2, MAX_GATE_US)
            if not last_try:
                return None, reply
            self.host_timed = True
        elif t.gate_us > MIN_GATE_US and GATE_MARGIN * round_trip_us < t.gate_us / 2:
            t.gate_us = max(t.gate_us / 2, MIN_GATE_US)  # replies are fast (again)
        t.prep[self.role].append(float(start.elapsed_time(mid)))
        self.copy_ms = float(end.elapsed_time(copied))
        return float(mid.elapsed_time(end)), reply
