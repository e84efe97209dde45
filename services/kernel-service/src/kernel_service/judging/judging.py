"""The judge's state, shared by both benchmarks' judges: one :class:`Judge` per eval worker (its zygote,
its GPU timer, what it keeps between jobs) and one :class:`Run` per evaluation (its two side processes,
their arenas, what was opened of theirs, and every exchange with them: set-ups, loads, calls, readings).

Beside it in ``judging``: a call's outputs as the judge holds them (``outputs.py``: :class:`~.outputs.Call`),
the path's cost and the calls per reading measured through a run (``calibration.py``), where a run's
sides sit under MPS (``placement.py``), and the arithmetic of readings (``readings.py``) that
KernelBench's judge (``kernelbench/speedup.py``) and BackendBench's (``backendbench/performance.py``)
both time with.

Nothing here runs a submission's code: a side runs it, in a process of its own, and answers with
descriptions the judge validates (``transport``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import torch

from . import placement, transport
from .harness import (
    Environment,
    HarnessError,
)
from .outputs import TIMED_SAMPLE_ELEMENTS, Call, snapshot, unwrap
from .sandbox import HardenPolicy
from .schemas import Outcome
from .sides import SideFault, SideProcess, Zygote
from .timing import (
    GATE_TRIES,
    GpuTimer,
    HostGate,
    SideFaulted,
    Timer,
    under_mps,
)

#: GPU memory the judge may still hold after a job before its worker is replaced: one problem's
#: inputs take gigabytes, and what the judge keeps the next job's two sides cannot allocate.
JUDGE_LEAK_BYTES = 64 << 20


class Judge:
    """One per eval worker: the zygote that forks sides, and the GPU timer's calibration."""

    def __init__(
        self, env: Environment, policy: HardenPolicy, tmp: Path, zygote: Zygote | None = None
    ) -> None:
        self.env = env
        self.tmp = tmp
        # One CPU thread for the judge's own tensor work: spinning OpenMP workers of the judge would
        # compete with the side being timed on the same cores.
        torch.set_num_threads(1)
        self.policy = policy
        self._zygote: Zygote | None = zygote
        #: Set when the zygote had to be replaced: a new one carries this process's restrictions into its
        #: forks, so the worker should be replaced after this job.
        self.recycle: str | None = None
        self._gpu_timer: GpuTimer | None = None
        #: What a benchmark keeps between this judge's jobs, by name (BackendBench's prepared inputs);
        #: a value's ``device_nbytes`` is GPU memory of the judge's own, not a job's leak.
        self.memo: dict[str, Any] = {}

    @property
    def zygote(self) -> Zygote:
        if self._zygote is not None and self._zygote.proc.poll() is not None:
            self.recycle = "the zygote died and was restarted"
            self._zygote = None
        if self._zygote is None:
            self._zygote = Zygote(self.tmp / "zygote-log.txt")
        if not self._zygote.forks_can_use_cuda:  # an import touched CUDA: fork from a bare one
            self._zygote.close()
            self._zygote = Zygote(self.tmp / "zygote-log.txt", preimport=False)
            self.recycle = "the zygote restarted without preimports"
        return self._zygote

    def keep_pids(self) -> set[int]:
        """Processes of the judge's own that the leftover-process sweep must spare."""
        return {self._zygote.pid} if self._zygote is not None else set()

    def own_threads(self) -> frozenset[int]:
        """Threads of the judge's own that the leftover-thread check must spare (the gate's watchdog)."""
        gate = self._gpu_timer.gate if self._gpu_timer is not None else None
        return frozenset({gate.watchdog.ident or 0}) if isinstance(gate, HostGate) else frozenset()

    def resident_bytes(self) -> int:
        """GPU memory the judge keeps between jobs (the timer's L2-flush buffer, what ``memo`` holds)."""
        kept = sum(int(getattr(v, "device_nbytes", 0)) for v in self.memo.values())
        return kept + (self._gpu_timer.flush.nbytes if self._gpu_timer is not None else 0)

    def gpu_timer(self, device: torch.device) -> GpuTimer:
        if self._gpu_timer is None:
            self._gpu_timer = GpuTimer(device)
        return self._gpu_timer

    @property
    def kernel_cache(self) -> Path:
        """PyTorch's NVRTC kernel cache for this judge's sides (ops such as ``mul`` on complex values or
        ``digamma`` are compiled at first use, 0.3-11 s an op on the H100, in every new process): written
        only by the reference side, which runs trusted code, and read-only to the candidate, whose cubins
        would otherwise be loaded by the next reference."""
        path = self.tmp / "nvrtc-cache"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def side_request(self, tmp: Path, build_dir: str, role: str) -> dict[str, Any]:
        """What a side process may do. It writes its temp dir and its job's build dir, not the rest of the
        worker's (the build cache: another submission's sources and extensions, which a candidate could
        replace before they load)."""
        p = self.policy
        cache = str(self.kernel_cache)
        return {
            "tmp": str(tmp),
            "writable": [build_dir] + ([cache] if role == "reference" else []),
            "readable": [str(r) for r in p.readable] + ([cache] if role != "reference" else []),
            "kernel_cache": cache,
            "fsize": p.fsize_bytes,
            "nproc": p.nproc,
            "address_space": p.address_space,
            "landlock": p.landlock,
        }

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()


class Run:
    """The state of one evaluation: its two sides, their arenas, what was opened of theirs."""

    def __init__(self, judge: Judge, workdir: Path, device: torch.device, timeout_s: float) -> None:
        self.judge, self.workdir, self.device, self.timeout_s = judge, workdir, device, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.sides: dict[str, SideProcess] = {}
        self.arenas: dict[tuple[str, str], transport.Arena] = {}
        self.opened: dict[str, transport.Opened] = {}
        self.phase = "startup"
        self.candidate_output: str | None = None
        self.recycle: str | None = None
        #: The precision both sides run at: a reference that fails at fp16/bf16 is named for it.
        self.precision = "fp32"
        #: What forking a side again needs (``_profile``): the build dir and each role's setup and load.
        self.spawn: dict[str, Any] = {}
        #: GPU: the timers bound to each side before the submission was loaded (:meth:`bind_before_load`).
        self.timers: dict[str, Timer] = {}
        #: GPU: the path's cost (ms) through the candidate's process, measured before its code was loaded.
        self.candidate_null_ms: float | None = None
        #: Under MPS: how each side was brought to the candidate's level (for the gate).
        self.level_info: dict[str, float] = {}
        #: Under MPS: the reference process the timed one was forked beside, kept alive (idle) until the
        #: reference's readings end (:meth:`reference_at`).
        self.companion: tuple[SideProcess, transport.Opened] | None = None
        #: Whether the submission's code was sent to run: a failure before that is not the candidate's
        #: (``environment_fault``), and ``on_candidate`` tells the worker's parent the moment it is.
        self.candidate_started = False
        self.on_candidate: Callable[[], None] | None = None
        #: Why this judge's stream can never run again (a timed call's side faulted: ``SideFaulted``): then
        #: nothing of the judge's may touch the GPU (freeing or unmapping memory would wait on it for good),
        #: and the worker is replaced.
        self.stuck: str | None = None

    def bind_before_load(self, build_dir: str | None = None, setup: dict[str, Any] | None = None) -> None:
        """Bind the GPU timer to both sides and measure the path's cost through the candidate's process
        before the submission is loaded; under MPS, with ``build_dir`` and ``setup``, the candidate first
        moved to the lower level (:func:`~.placement.bind_before_load`)."""
        placement.bind_before_load(self, build_dir, setup)

    def reference_at(
        self, level_ms: float, call_ms: float, build_dir: str, *msgs: dict[str, Any]
    ) -> dict[str, float]:
        """Under MPS, with the candidate gone: the reference in a new process (sent ``msgs``) at the
        candidate's level ``level_ms``, unless ``call_ms`` is long (:func:`~.placement.reference_at`)."""
        return placement.reference_at(self, level_ms, call_ms, build_dir, *msgs)

    def fork(self, role: str, build_dir: str) -> SideProcess:
        tmp = self.workdir / role
        side = SideProcess(
            self.judge.zygote, role, self.judge.side_request(tmp, build_dir, role), self.deadline
        )
        self.sides[role] = side
        self.opened[role] = transport.Opened()
        return side

    def restart(
        self, roles: Iterable[str], build_dir: str, setup: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Each of ``roles`` in a new process (the old one, its arenas and the companion gone first), all
        sent ``setup`` at once (each side's CUDA context takes ~0.3 s to start on the H100); their replies."""
        placement.dismiss_companion(self)
        for role in roles:
            self.kill(role)
            self.drop_arenas(role)  # the new process has mapped none of the old one's arenas
            self.fork(role, build_dir)
        return self.ask_each({role: setup for role in roles})

    def start_pair(self, own: bool = False) -> None:
        """Both sides in new processes (any old ones and the companion killed first), set up at once (two
        CUDA contexts start together), bound before the submission's load (:meth:`bind_before_load`), then
        loaded (``spawn``); a refusal is that side's error. ``own``: the candidate's process loads the
        reference's model instead, to time it there first (``OWN_BASELINE_ENV``; :meth:`load_candidate`
        then loads the submission)."""
        build_dir, setup = self.spawn["build_dir"], self.spawn["setup"]
        for role, reply in self.restart(("reference", "candidate"), build_dir, setup).items():
            if not reply.get("ok"):
                raise self.side_error(role, reply)
        self.level_info = {}
        self.bind_before_load(build_dir, setup)
        loads = {**self.spawn["load"], **({"candidate": self.spawn["load"]["reference"]} if own else {})}
        replies = self.ask_each(loads)
        for role, reply in replies.items():
            if not reply.get("ok"):
                raise self.side_error(role, reply)
        if not self.spawn["load"]["reference"].get("on_cpu") and any(
            r.get("drew_on_cpu") for r in replies.values()
        ):
            # weights drawn from the CPU's generator on a GPU (``harness.drew_on_cpu``): both models built on
            # the CPU from now on, as upstream builds them, in a new pair (an ``__init__`` runs once a process)
            self.spawn["load"] = {role: {**msg, "on_cpu": True} for role, msg in self.spawn["load"].items()}
            self.start_pair(own)

    def load_candidate(self) -> None:
        """The submission's model into the candidate's process, in place of what it ran (``spawn``)."""
        self.ask_in_turn("candidate", (self.spawn["load"]["candidate"],))

    def refork(self, role: str) -> SideProcess:
        """A fresh process for ``role`` (the old one killed, its arenas dropped: the new one maps its
        own), set up and its model loaded as the first was (``spawn``)."""
        self.kill(role)
        self.drop_arenas(role)
        side = self.fork(role, self.spawn["build_dir"])
        self.ask_in_turn(role, (self.spawn["setup"], self.spawn["load"][role]))
        return side

    def drop_arenas(self, role: str) -> None:
        """Close ``role``'s arenas: a new process of that role maps its own."""
        for key in [k for k in self.arenas if k[0] == role]:
            self.arenas.pop(key).close()

    def ask_in_turn(self, role: str, msgs: Iterable[dict[str, Any]]) -> None:
        """Each of ``msgs`` to ``role`` in turn (a set-up, a load); a refusal is the side's error."""
        for msg in msgs:
            if not (reply := self.ask(role, msg)).get("ok"):
                raise self.side_error(role, reply)

    def _starting(self, role: str, msg: dict[str, Any]) -> None:
        """Note the first message that runs the submission's code (its module's load)."""
        if self.candidate_started or role != "candidate" or msg.get("op") != "load_model":
            return
        if msg.get("name") == "solution":
            self.candidate_started = True
            if self.on_candidate is not None:
                self.on_candidate()

    def ask(self, role: str, msg: dict[str, Any], fd: int | None = None) -> dict[str, Any]:
        self._starting(role, msg)
        try:
            return self.sides[role].request(msg, self.phase, fd)
        except SideFault as fault:
            raise self._fault(role, fault) from None

    def ask_each(self, msgs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each side its own message, both at work at once (starting CUDA, importing a model); the
        replies by role. A fault raises as :meth:`ask` would, for the first side (in ``msgs``' order)."""
        for role, msg in msgs.items():
            self._starting(role, msg)
            try:
                self.sides[role].send(msg, self.phase)
            except SideFault as fault:
                raise self._fault(role, fault) from None
        replies = {}
        for role in msgs:
            try:
                replies[role] = self.sides[role].receive(self.phase)
            except SideFault as fault:
                raise self._fault(role, fault) from None
        return replies

    def _fault(self, role: str, fault: SideFault) -> HarnessError:
        if fault.kind == "timeout":
            return HarnessError(
                Outcome.TIMEOUT,
                f"evaluation exceeded timeout_s={self.timeout_s:g} (during {self.phase}); {role} process killed",
            )
        if role == "reference":
            return HarnessError(Outcome.UNKNOWN_ERROR, f"the reference process failed: {fault.message}")
        return HarnessError(Outcome.EXECUTION_FAILURE, fault.message)

    def arena(self, role: str, which: str, nbytes: int) -> transport.Arena:
        """The side's ``which`` ("in" | "out") arena, (re)made and shared when it is smaller than ``nbytes``."""
        key = (role, which)
        old = self.arenas.get(key)
        if old is not None and old.nbytes >= nbytes:
            return old
        arena = transport.Arena(max(nbytes, 2 * old.nbytes if old else 0), self.device)
        msg = {"op": "arena", "which": which, "nbytes": arena.nbytes, "kind": arena.kind}
        if arena.handle is not None:
            msg["handle"] = arena.handle.hex()
        reply = self.ask(role, msg, arena.fd)
        if not reply.get("ok"):  # the side still maps the old arena: it must not be written for it
            arena.close()
            raise self.side_error(role, reply)
        self.arenas[key] = arena
        if old is not None:
            old.close()
        return arena

    def call(
        self,
        role: str,
        args: list[Any],
        timer: Timer | None = None,
        kwargs: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Call:
        """One call of ``role``'s callable on copies of ``args``/``kwargs`` (written to its arena now).

        Timed candidate outputs come back already copied by the judge (sampled when large), inside the
        timer, right after the call's end is recorded; other outputs are views, to read before the side's
        next call.
        """
        return self._request(role, (list(args), dict(kwargs or {})), False, timer, extra)

    def calls(
        self,
        role: str,
        sets: list[tuple[list[Any], dict[str, Any]]],
        timer: Timer,
        extra: dict[str, Any] | None = None,
        patient: bool = True,
    ) -> Call:
        """One timed reading of ``len(sets)`` calls, one per ``(args, kwargs)`` set, run back to back by
        the side between one go and one done: ``ms`` is their total and ``out`` the list of their outputs.
        Every set has values of its own, and every output is the judge's to check. ``patient=False``: a
        warm-up, taken as it comes (never measured again after a missed gate)."""
        return self._request(role, [(list(a), dict(k)) for a, k in sets], True, timer, extra, patient=patient)

    def tried(
        self, role: str, sets: list[tuple[list[Any], dict[str, Any]]], extra: dict[str, Any] | None = None
    ) -> Call:
        """Untimed, one call per ``(args, kwargs)`` set in one request: ``out`` holds, per set, ``(True,
        output)`` or ``(False, None)`` where the call raised (``extra``: ``overloads``, one aten overload
        name per set, for the reference side; ``record``)."""
        return self._request(
            role, [(list(a), dict(k)) for a, k in sets], True, None, {**(extra or {}), "tried": True}
        )

    def drawn(
        self,
        role: str,
        draw: Callable[[], list[tuple[list[Any], dict[str, Any]]]],
        count: int,
        nbytes: int,
        timer: Timer,
    ) -> Call:
        """As :meth:`calls`, the ``count`` sets made by ``draw`` inside the timer, after its start, straight
        into the side's arena (``transport.DrawInto``; ``nbytes``: what they take there) instead of
        being made before and copied in (a KernelBench problem's 6 GiB input took 4 ms to copy, as long
        as its kernel)."""
        return self._request(role, [None] * count, True, timer, None, (draw, nbytes))

    def _request(
        self,
        role: str,
        values: Any,
        many: bool,
        timer: Timer | None,
        extra: dict[str, Any] | None,
        drawing: tuple[Callable[[], Any], int] | None = None,
        patient: bool = True,
    ) -> Call:

        def read(reply: dict[str, Any]) -> Callable[[], Any]:
            out = self.decode(role, reply)
            if self.device.type != "cuda":  # the CPU timer's span ends with this copy: the same for both
                return lambda: snapshot(out)
            if role == "candidate":  # sampled (cloning multi-GB outputs costs more than the kernels)
                return lambda: snapshot(out, TIMED_SAMPLE_ELEMENTS)
            if under_mps():  # the same copy, only timed: its length is the candidate's baseline (copy_bound)
                return lambda: (snapshot(out, TIMED_SAMPLE_ELEMENTS), unwrap(out))[1]
            return lambda: unwrap(out)

        tries = 0
        while True:
            arena = self.arena(role, "in", drawing[1] if drawing else transport.layout_bytes(values))
            msg: dict[str, Any] = {"op": "call", **(extra or {})}
            if not drawing:
                packed, write = transport.pack(values, arena)
                msg.update({"calls": packed} if many else {"args": packed[0], "kwargs": packed[1]})
            else:
                write = partial(self.draw, drawing[0], arena, msg)
            msg["gated"] = timer is not None and self.device.type == "cuda"
            if timer is None:
                write()
                ms, reply = None, self.ask(role, msg)
                if reply.get("ok"):
                    call = Call(None, self.decode(role, reply), reply, packed, arena)
                    return self._answered(role, values, many, call)
            else:
                tries += 1
                try:
                    ms, reply = timer.time_call(
                        partial(self.ask, role, msg),
                        read,
                        write,
                        not patient or tries >= GATE_TRIES or getattr(timer, "longest", False),
                        len(values) if many else 1,
                        msg=msg,
                    )
                except TimeoutError as exc:
                    self.recycle = f"a timed call of the {role} never finished on the GPU"
                    raise self._fault(role, SideFault("timeout", str(exc))) from exc
                except SideFaulted as fault:  # the judge's stream waits on a dead context for good
                    self.stuck = self.recycle = f"the {role}'s GPU context failed inside a timed call"
                    if isinstance(fault.error, HarnessError):
                        raise fault.error from None
                    raise self.side_error(role, fault.reply) from None
                if reply.get("ok"):
                    if ms is None:
                        continue  # the gate expired before the side answered: measure again
                    packed = msg["calls"] if drawing else packed
                    host_timed, copy_ms = getattr(timer, "host_timed", False), getattr(timer, "copy_ms", 0.0)
                    call = Call(ms, reply["read"], reply, packed, arena, host_timed, copy_ms)
                    return self._answered(role, values, many, call)
            if isinstance(reply.get("need"), int) and 0 < reply["need"] < 1 << 40:
                self.arena(role, "out", reply["need"])
                continue
            raise self.side_error(role, reply)

    def draw(
        self, draw: Callable[[], Any], arena: transport.Arena, msg: dict[str, Any], blocking: bool = True
    ) -> None:
        """The ``write`` of a drawn reading: the sets made into ``arena``, what is not in place copied
        there, and ``msg`` given their descriptors."""
        with transport.DrawInto(arena):
            values = draw()
        if transport.layout_bytes(values) > arena.nbytes:
            raise HarnessError(
                Outcome.UNKNOWN_ERROR, "the reference's get_inputs made larger inputs for a new seed"
            )
        msg["calls"], write = transport.pack(values, arena)
        write(blocking)

    def _answered(self, role: str, values: Any, many: bool, call: Call) -> Call:
        """``call``, once a reading of several calls has exactly one output per call (a side describes its
        own answer: one that names a single tensor, or too few, is refused, never zipped short)."""
        if many and not (isinstance(call.out, (list, tuple)) and len(call.out) == len(values)):
            got = f"{len(call.out)} outputs" if isinstance(call.out, (list, tuple)) else "a single value"
            why = f"a reading of {len(values)} calls was answered with {got}"
            if role == "reference":
                raise HarnessError(Outcome.UNKNOWN_ERROR, f"reference outputs: {why}")
            raise HarnessError(Outcome.EXECUTION_FAILURE, f"the candidate's outputs were refused: {why}")
        return call

    def decode(self, role: str, reply: dict[str, Any]) -> Any:
        try:
            return transport.decode(
                reply.get("out"), self.arenas[(role, "in")], self.arenas.get((role, "out")), self.opened[role]
            )
        except (transport.TransportError, RuntimeError) as exc:
            raise (
                HarnessError(Outcome.UNKNOWN_ERROR, f"reference outputs: {exc}")
                if role == "reference"
                else HarnessError(Outcome.EXECUTION_FAILURE, f"the candidate's outputs were refused: {exc}")
            ) from exc

    def side_error(self, role: str, reply: dict[str, Any]) -> HarnessError:
        message = str(reply.get("message", "failed"))[:1500]
        if role == "reference":
            if self.precision != "fp32":  # the problem's own code does not run at this precision
                return HarnessError(
                    Outcome.UNSUPPORTED_PRECISION,
                    f"the reference does not run at precision {self.precision}: {message}",
                    tb=_text(reply, "traceback"),
                )
            return HarnessError(
                Outcome.UNKNOWN_ERROR, f"the reference failed: {message}", tb=_text(reply, "traceback")
            )
        try:
            outcome = Outcome(str(reply.get("outcome")))
        except ValueError:
            outcome = Outcome.EXECUTION_FAILURE
        if outcome in (
            Outcome.CORRECT,
            Outcome.COMPILED,
            Outcome.REQUIRES_GPU,
            Outcome.UNSUPPORTED_PRECISION,
        ):
            outcome = Outcome.EXECUTION_FAILURE  # a side never decides a favourable verdict
        err = HarnessError(
            outcome, message, tb=_text(reply, "traceback"), compile_log=_text(reply, "compile_log")
        )
        err.reply = reply
        return err

    def release(self) -> None:
        """Give the judge's cached free GPU memory back to the driver: blocks its caching allocator keeps
        are memory neither side can allocate (a problem's inputs may take gigabytes)."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @contextmanager
    def frozen(self, role: str) -> Iterator[None]:
        """``role``'s side and every process it started, stopped for the duration (see the zygote)."""
        side = self.sides[role]
        side.zygote.freeze(side.pid)
        try:
            yield
        finally:
            side.zygote.thaw(side.pid)

    def end_candidate(self) -> None:
        """Wait for the candidate's queued work (an asynchronous fault of its last calls is its own),
        then kill it: nothing of the submission runs after its timing."""
        reply = self.ask("candidate", {"op": "sync"})
        if not reply.get("ok"):
            raise self.side_error("candidate", reply)
        self.kill("candidate")

    def kill(self, role: str) -> None:
        side = self.sides.get(role)
        if side is None:
            return
        if not self.stuck:
            self.opened[role].close()
        side.kill()
        if role == "candidate":
            self.candidate_output = side.tail.text()

    def close(self) -> None:
        placement.dismiss_companion(self)
        for role in list(self.sides):
            self.kill(role)
            self.sides[role].tail.text(wait=1.0)
        if not self.stuck:  # else its memory goes with the worker
            for arena in self.arenas.values():
                arena.close()
            self.arenas.clear()
        if (
            self.device.type == "cuda" and not self.stuck
        ):  # the judge's cached blocks would starve the next job's sides
            torch.cuda.empty_cache()
            kept = torch.cuda.memory_allocated(self.device) - self.judge.resident_bytes()
            if kept > JUDGE_LEAK_BYTES:  # e.g. tensors a caught exception's frames still hold
                gc.collect()
                torch.cuda.empty_cache()
                kept = torch.cuda.memory_allocated(self.device) - self.judge.resident_bytes()
                if kept > JUDGE_LEAK_BYTES:
                    self.recycle = f"the judge still held {kept >> 20} MiB of GPU memory after the job"
        if self.sides:  # daemons a side left behind were reparented to the zygote: they go now
            try:
                self.judge.zygote.sweep()
            except (OSError, ValueError):
                pass


def _text(reply: dict[str, Any], key: str) -> str | None:
    v = reply.get(key)
    return str(v)[:4000] if v else None
