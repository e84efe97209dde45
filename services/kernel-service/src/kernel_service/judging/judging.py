"""The judge's state, shared by both benchmarks' judges: one :class:`Judge` per eval worker (its zygote,
its GPU timer, what it keeps between jobs) and one :class:`Run` per evaluation (its two side processes,
their arenas, what was opened of theirs), the :class:`Call` a side answers, and the reading arithmetic
(calls per reading, readings, the path's null cost) that KernelBench's judge (``judge.py``) and
BackendBench's (``backendbench/evaluator.py``) both time with.

Nothing here runs a submission's code: a side runs it, in a process of its own, and answers with
descriptions the judge validates (``transport``). Over 600 lines for one concept: ``Run`` (~320 of them) is
every exchange of an evaluation with its two sides.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from . import integrity, transport
from .compare import flatten_outputs
from .harness import (
    Environment,
    HarnessError,
)
from .sandbox import HardenPolicy
from .schemas import Outcome
from .sides import SideFault, SideProcess, Zygote
from .timing import (
    GATE_TRIES,
    NULL_CALLS,
    READING_HOST_US,
    READING_TARGET_MS,
    CpuTimer,
    GatedSide,
    GpuTimer,
    HostGate,
    SideFaulted,
    Timer,
    calls_per_reading,
    under_mps,
)

#: Timed outputs of more elements are checked at this many random positions (correctness trials compare
#: whole outputs).
TIMED_SAMPLE_ELEMENTS = 1 << 20
#: Timed readings at least (up to ``perf_trials``) when each holds several calls.
MIN_READINGS = 10
#: Gated calls of the reference side that choose the calls per reading.
ESTIMATE_CALLS = 3
#: Timed readings of a side before their precision (``EvalOptions.perf_precision``) may end its timing.
PRECISE_MIN_READINGS = 20
#: How much longer than the reference's a candidate's output copy may take before the copy bounds its
#: time (:func:`copy_bound`): a sampled copy of up to ``TIMED_SAMPLE_ELEMENTS`` takes a few us.
COPY_REL, COPY_ABS_MS = 0.10, 0.002
#: Readings of one call each that a side takes beside its readings of several (:func:`lone_bound`). Twenty,
#: not ten: the floor's error (and so its noise slack) falls with their number, and on the H100 the 64 MB
#: weights then read x1.005 twice (x0.98-1.18 with ten), level 1's mean evaluation unchanged (1.97 s).
LONE_READINGS = 20
#: How far the candidate's per-call time may fall below its lone calls' (scaled by the reference's
#: ratio) before they bound it: lone readings of a ~60 us call spread a few percent. The slack is the
#: most a batched reading gains: 5% and 2 us let a 35 us MLP batched across its reading's calls read
#: 1.11-1.15x the honest rewrite on the H100 (the issue's bound is 1.1x). (Each lone reading is read
#: against the path's level beside it: :func:`lone_level`.)
LONE_REL = 0.03
#: And by this much more: a lone call of a 1x128 add (~2 us) read 3.3 us against 2.3 us a call in its
#: readings, with the reference's ratio at 1.16 (noise at that scale), and a floor without it read the
#: honest add 0.74x on the H100 while 12 builds ran (bench/results/gpu30_loaded_lone.json).
LONE_ABS_MS = 0.0015
#: And by this many standard errors of the floor itself (the lone readings' spread about their own
#: process's level, and the reference's ratio's), at most ``LONE_NOISE_CAP_MS``: a 3 us op timed against
#: itself read 0.81x with the floor binding on noise, and the 1x128 add +24% on a busy host (H100). The
#: cap is what a submission could gain by making its lone calls vary on purpose. One cap for every floor:
#: scaling it down above 10 us (to correct the L2 bias of a 64 MB-weights rewrite through the floor) did
#: not move that case (x1.17-1.18 on the H100) and read the honest 4-layer MLP 0.92x (BENCHMARKS.md).
LONE_NOISE_Z = 2.0
LONE_NOISE_CAP_MS = 0.002
#: The kernel is read against the reference timed in the kernel's own process before the kernel is
#: imported there (BackendBench: the op; KernelBench: the reference model, where a call is under
#: ``LEVEL_MATCH_MS``), and the reference's process only checks every timed output, so it is not moved to
#: the candidate's level. The reference is called there on values of its own, and the kernel's copy bound
#: is read against its copies there (:func:`copy_bound`). The service sets it for its eval workers
#: (``KernelServiceConfig.own_baseline``): auto (under MPS, the default), on (BackendBench on any GPU path
#: too) or off. Why: a side process sits in one of two modes for real calls (~1.1 us apart on mm, 10% of
#: the call) that the level probes do not see, and one role kept the slow mode for a whole service's life:
#: mm read 0.927-1.093 against itself over six services (H100, MPS). The reference and the kernel read in
#: one process share its mode; the submission's code is not in that process until the reference's
#: readings are taken. Under MPS with it, the BackendBench smoke ops read 0.985-1.012 against themselves
#: (30 of 30 within 0.98-1.02 on the H100; without it 0.965-1.075), and level 1, fidelity, the reading
#: cheats and the adversarial runs held (BENCHMARKS.md, issue 30).
OWN_BASELINE_ENV = "KS_OWN_BASELINE"
#: The timing report's key for it: the reference's time in the candidate's process against its time in
#: the reference's (percent).
OWN_KEY = "own_baseline_vs_reference_pct"
#: With an own baseline, the reference's readings in the candidate's process are taken twice and the first
#: set dropped. Why: a process's real calls read slower as it ages, levels unmoved: the op's second set read
#: +0.64% over its first (20 BackendBench smoke self-checks, H100, MPS), and against the first set the op
#: itself, loaded as the kernel, read 0.988 (0.972-1.000); against the second, 0.998 (0.980-1.020).
SETTLE_KEY = "own_settle_pct"

#: Under MPS a side process's path sits at one of two levels (~6.6 or ~10.9 us a null call on the H100),
#: and the two sides of a job, forked together, sat at opposite ones in 16 of 16 jobs; a real call's path
#: moved more with it (a 4-layer MLP's ~7 us). The reference is timed in a process forked once the
#: candidate is gone, while the old one still runs, whose level is within ``MODE_SLACK_MS`` of the
#: candidate's (:meth:`Run.reference_at`), up to ``MODE_FORKS`` tries, each level from
#: ``MODE_NULL_CALLS`` null calls.
MODE_SLACK_MS = 0.002
MODE_FORKS = 3
MODE_NULL_CALLS = 5
#: Under MPS, sides whose calls both take at least this long are timed where they are, not brought to one
#: level: the levels move a real call by ~4 us, at most 0.4% of such a call. Matching took 1.76 forks
#: (0.65 s) a job in a level-1 sweep, 64.5 s of its 301.6 s, and 98 of its 100 problems are this long (H100).
LEVEL_MATCH_MS = 1.0
#: Under MPS, how many times the two sides may swap places before the submission is loaded so that the
#: candidate sits at the lower level (:meth:`Run._candidate_low`).
LOW_SWAPS = 2
#: A side's timing is ``timing_degraded`` when more than this share of its readings hold host time: a
#: forward that synchronises the host does in every one, a lone one hardly moves a median of ten or more.
DEGRADED_SHARE = 0.1
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
        p = self.policy
        cache = str(self.kernel_cache)
        return {
            "tmp": str(tmp),
            "writable": [str(w) for w in p.writable[1:]]
            + [build_dir]
            + ([cache] if role == "reference" else []),
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
        while it runs only our code: a lone call's cost is read against its own process's level (levels
        ~8 us apart per process), which the submission, not yet loaded, could not have slowed. Under MPS,
        with ``build_dir`` and ``setup`` (how a side is forked and set up), the candidate is first moved
        to the lower level (:meth:`_candidate_low`)."""
        if self.device.type != "cuda":
            return
        base = self.judge.gpu_timer(self.device)
        base.start_job()
        self.timers = {role: base.bind(role, partial(self.ask, role)) for role in ("candidate", "reference")}
        self.candidate_null_ms = calibrate(
            self, base, self.timers["candidate"], self._probe(), role="candidate"
        )
        if build_dir is not None and setup is not None and under_mps():
            self._candidate_low(base, build_dir, setup)

    def _candidate_low(self, base: GpuTimer, build_dir: str, setup: dict[str, Any]) -> None:
        """Under MPS, before the submission is loaded: while the candidate's level is above the
        reference's (two sides forked together sit at opposite levels), the reference killed and a new
        candidate forked in its place, then the old candidate killed and a new reference forked in its
        place, up to ``LOW_SWAPS`` times.

        Why: at the upper level (~10.9 us on the H100) a real call's path costs ~4 us more than its null
        calls account for, on both sides, so a fast candidate against a slow reference reads slower than
        it is: the 64 MB-weights rewrite read x0.93-0.94 of an L2-flushed timer there, x0.975-0.98 once
        moved (H100). A process forked while another is killed takes the level that one left
        (:meth:`reference_at`): one swap reached the lower level each time one was needed (5 of 24
        KernelBench jobs, 1 of 6 BackendBench pairs)."""
        swaps, t0 = 0, time.perf_counter()
        while swaps < LOW_SWAPS:
            assert self.candidate_null_ms is not None
            if self.candidate_null_ms <= self._level(base, "reference") + MODE_SLACK_MS:
                break
            swaps += 1
            self.kill("reference")
            del self.sides["reference"], self.opened["reference"]
            self.drop_arenas("reference")
            for role in ("candidate", "reference"):  # each in the place the other's old process left
                self._fork_beside(base, role, build_dir, (setup,))
            self.candidate_null_ms = calibrate(
                self, base, self.timers["candidate"], self._probe(), role="candidate"
            )
        self.level_info["candidate_swaps"] = float(swaps)
        self.level_info["candidate_swaps_s"] = round(time.perf_counter() - t0, 3)

    def _fork_beside(
        self, base: GpuTimer, role: str, build_dir: str, msgs: Iterable[dict[str, Any]], keep: bool = False
    ) -> None:
        """A new process for ``role``, sent ``msgs`` while the old one (if any) still runs, then the old
        one killed (``keep``: kept idle as the :attr:`companion` instead, an earlier companion killed)
        and its arenas dropped; the GPU timer bound to the new one."""
        old, opened = self.sides.pop(role, None), self.opened.pop(role, None)
        try:
            self.fork(role, build_dir)
            self._send(role, msgs)
        finally:
            if old is not None and opened is not None:
                self.dismiss_companion()
                if keep and old.alive:
                    self.companion = (old, opened)
                else:
                    opened.close()
                    old.kill()
                self.drop_arenas(role)
        self.timers[role] = base.bind(role, partial(self.ask, role))

    def dismiss_companion(self) -> None:
        """Kill the :attr:`companion`, if any."""
        if self.companion is not None:
            side, opened = self.companion
            self.companion = None
            if not self.stuck:
                opened.close()
            side.kill()

    def _level(self, base: GpuTimer, role: str) -> float:
        """The path's level (ms) through ``role``'s process now: ``MODE_NULL_CALLS`` null calls (asked of
        that process, in its arena: another side's timer waits for a *done* that never comes)."""
        return calibrate(
            self, base, self.timers[role], self._probe(), role=role, readings=MODE_NULL_CALLS, probe=True
        )

    def _probe(self) -> list[tuple[list[Any], dict[str, Any]]]:
        """What a null call that measures a process's level is given: one element of ours."""
        return [([torch.zeros(1, device=self.device)], {})]

    def reference_at(
        self, level_ms: float, call_ms: float, build_dir: str, *msgs: dict[str, Any]
    ) -> dict[str, float]:
        """Under MPS, with the candidate gone: a new reference process (sent ``msgs``: its set-up, its
        model's load), forked while the old one still runs, again while its path's level is more than
        ``MODE_SLACK_MS`` from ``level_ms`` (the candidate's), up to ``MODE_FORKS`` times; its timer bound
        in ``self.timers``. Returns the forks it took (none where ``call_ms``, the shorter side's call, is
        at least ``LEVEL_MATCH_MS``) and the level it sits at (us).

        Why: each side is read against its own process's level (:func:`own_level`), but a real call's path
        moves more than a null call's between the two levels, so the two sides must sit at one level. The
        levels fit a process's place among the daemon's clients: a candidate forked again beside a live
        reference took the upper level 3 times of 3 in each of 30 BackendBench pairs, a reference forked
        after its predecessor was killed matched the candidate in 4 of 7 jobs, and one forked while its
        predecessor still ran matched it in every job (H100).

        The predecessor is then kept alive, idle, as the :attr:`companion` until the reference's readings
        end: the candidate was timed beside the idle first reference, and a side timed with one client
        fewer on the daemon reads faster. With the predecessor killed, a 1x128 add against itself read
        0.79-1.08x, median 0.90, over 14 jobs (the candidate slower in most); with it kept, 1.003 median
        (0.81-1.20) over 60 pairs (H100)."""
        if call_ms >= LEVEL_MATCH_MS:
            return {**self.level_info, "reference_forks": 0.0}
        base = self.judge.gpu_timer(self.device)
        ms, forks, t0 = 0.0, 0, time.perf_counter()
        while forks < MODE_FORKS:
            forks += 1
            self._fork_beside(base, "reference", build_dir, msgs, keep=True)
            ms = self._level(base, "reference")
            if abs(ms - level_ms) <= MODE_SLACK_MS:
                break
        return {**self.level_info, "reference_forks": float(forks), "reference_mode_us": round(ms * 1e3, 2),
                "reference_forks_s": round(time.perf_counter() - t0, 3)}  # fmt: skip

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
        self.dismiss_companion()
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
        for role, reply in self.ask_each(loads).items():
            if not reply.get("ok"):
                raise self.side_error(role, reply)

    def load_candidate(self) -> None:
        """The submission's model into the candidate's process, in place of what it ran (``spawn``)."""
        self._send("candidate", (self.spawn["load"]["candidate"],))

    def refork(self, role: str) -> SideProcess:
        """A fresh process for ``role`` (the old one killed, its arenas dropped: the new one maps its
        own), set up and its model loaded as the first was (``spawn``)."""
        self.kill(role)
        self.drop_arenas(role)
        side = self.fork(role, self.spawn["build_dir"])
        self._send(role, (self.spawn["setup"], self.spawn["load"][role]))
        return side

    def drop_arenas(self, role: str) -> None:
        """Close ``role``'s arenas: a new process of that role maps its own."""
        for key in [k for k in self.arenas if k[0] == role]:
            self.arenas.pop(key).close()

    def _send(self, role: str, msgs: Iterable[dict[str, Any]]) -> None:
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
        self.dismiss_companion()
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
    #: A timed reading's copy of its outputs behind its end (ms; :func:`copy_bound`).
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


def _text(reply: dict[str, Any], key: str) -> str | None:
    v = reply.get(key)
    return str(v)[:4000] if v else None


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


def precise(raw: list[float], null_ms: float, rel: float) -> bool:
    """Whether the median of ``raw`` (readings, each holding the path's cost ``null_ms``) is known to
    within ``rel`` of the time it measures: its standard error, taken from the readings' median absolute
    deviation (robust to the odd slow reading), against the median less the path's cost; never before
    ``PRECISE_MIN_READINGS`` readings. A side cannot gain by it: every reading it ran is counted, and
    one that varies only gets more readings."""
    if rel <= 0 or len(raw) < PRECISE_MIN_READINGS:
        return False
    return median_error(raw) <= rel * max(statistics.median(raw) - null_ms, 1e-9)


def median_error(values: list[float]) -> float:
    """The standard error of ``values``' median, from their median absolute deviation (robust to the odd
    slow reading); 0 for fewer than two."""
    k = len(values)
    if k < 2:
        return 0.0
    med = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(x - med) for x in values)  # a standard deviation, robustly
    return math.sqrt(math.pi / 2) * spread / math.sqrt(k)


def candidate_reading_size(n: int, call_ms: float, cap: int, perf_trials: int) -> int:
    """Calls a timed reading of the candidate: the reference's count ``n``, or more where the candidate's
    calls (``call_ms`` each, from its warm-up) are so much faster that ``n`` of them would be mostly the
    path's cost, whose level moves ~8 us between side processes (a 60 us kernel at the 2 calls of its
    1.4 ms reference read 5-7% off an independent timer on the H100). Up to ``READING_TARGET_MS`` of
    work, within ``cap`` (bytes, values a reply names) and ``2 * perf_trials / MIN_READINGS`` calls (the
    reference replays every seed the candidate ran: that many calls of it at most twice ``perf_trials``).
    Chosen by the candidate's own speed, it gains nothing by it: a slower warm-up only keeps ``n``."""
    want = cap if call_ms <= 0 else math.ceil(READING_TARGET_MS / call_ms)
    return max(n, min(want, cap, 2 * perf_trials // MIN_READINGS))


def host_capped(calls: int, round_trip_us: float, measured_calls: int) -> int:
    """``calls`` a reading, or fewer where a reading's host work (``round_trip_us``, measured on readings of
    ``measured_calls`` calls) would outgrow ``READING_HOST_US``: a gate missed by the host is a reading
    with host time in it, and a host busy compiling slows that work several times over."""
    per_call = round_trip_us / max(measured_calls, 1)
    if per_call <= 0:
        return calls
    return max(1, min(calls, int(READING_HOST_US // per_call)))


def lone_ratio(per_call: list[float], lone: list[float]) -> float | None:
    """How a side's per-call time in readings of several calls compares with its lone calls' (``lone``:
    each less the path's level beside it; <= 1 where the lone calls cost more), or None without both."""
    if not per_call or not lone:
        return None
    mid = statistics.median(lone)
    return statistics.median(per_call) / mid if mid > 0 else None


def lone_level(reference_null_ms: float, before_load_ms: float | None, beside_ms: float) -> float:
    """The path's cost (ms) that a candidate's lone reading is read against: its own process's null calls
    made right after it (``beside_ms``), never above the higher of the two trusted nulls (the
    reference's, the candidate's before its code was loaded). The reference's lone readings are read
    against its own null calls beside them, uncapped (its process is ours).

    Why: the path sits at either of two levels ~8 us apart, switching by process and by moment, and a
    35 us call's lone reading moves with it. Read against one level for both sides, a streams cheat whose
    process sat 8 us under the reference's read 1.20x on the H100; read against a level measured before
    its code was loaded, 1.39x once the process had switched. The level beside each reading follows it
    most often; the submission can only lower its own null calls' reading (a *done* recorded before
    *go*), which raises its own floor, and slowing them gains nothing past the cap."""
    trusted = max(reference_null_ms, before_load_ms or 0.0)
    return min(trusted, beside_ms) if beside_ms > 0 else trusted


def pct_apart(times: list[float], against: list[float]) -> float:
    """How far the median of ``times`` sits from the median of ``against``, in percent: the own baseline's
    report figures (``OWN_KEY``, ``SETTLE_KEY``)."""
    return round(100 * (statistics.median(times) / statistics.median(against) - 1), 3)


def own_baseline(mps: bool) -> bool:
    """Whether kernels are read against the reference timed in their own process (``OWN_BASELINE_ENV``:
    on, off, or auto: ``mps``, whether this worker times under MPS)."""
    setting = os.environ.get(OWN_BASELINE_ENV, "auto")
    return setting == "on" or (setting != "off" and mps)


def own_level(before_load_ms: float, after_ms: float) -> float:
    """Under MPS: the path's level (ms) that the candidate's readings, one call each, are read against: the
    lower of its own process's null calls before its code was loaded (``before_load_ms``) and after its
    readings (``after_ms``).

    Why: under MPS the hop sits at one of two levels per side process (6.5-6.7 or 10.6-11.1 us on the
    H100), and a reading of one 6-60 us call is mostly the hop: read against the reference's level, the
    honest 4-layer MLP read 1.16x where its process sat at the lower level and 0.86-0.92x where the
    reference's did, and a BackendBench relu against itself 0.72x. The submission cannot reach the level
    from before its load; it can only lower the one after it (a *done* written before *go*), which raises
    its own time, and the lower of the two ignores it made slower."""
    return min(before_load_ms, after_ms) if after_ms > 0 else before_load_ms


def lone_bound(
    per_call: list[float], lone: list[float], ratio: float | None, noise_ms: float = 0.0
) -> tuple[list[float], dict[str, float]]:
    """The candidate's per-call times (from readings of several calls), raised where needed so that their
    median is not below its lone calls' (``lone``: each less the path's level beside it, :func:`lone_level`)
    times ``ratio`` (the same relation measured on the trusted reference side: :func:`lone_ratio`), less
    ``LONE_REL``, ``LONE_ABS_MS`` and ``LONE_NOISE_Z`` times ``noise_ms`` (the floor's standard error:
    :func:`lone_noise`), at most ``LONE_NOISE_CAP_MS``.

    Why: the calls of one reading are written before it starts and run by the side's own loop, so a side
    can overlap them on streams, batch them into one call or find them in its frames; a lone call allows
    none of that. A lone call also costs more than a call inside a reading for honest code (the first
    kernels after the GPU switches contexts: a 4-layer MLP read 61 us lone and 35 us a call at 33 a
    reading on the H100), hence the reference's ratio rather than the lone time itself. The rule is
    continuous (the floor, not the lone time, once it binds)."""
    if not lone or not per_call or ratio is None:
        return per_call, {}
    lone_ms = statistics.median(lone)
    slack = min(LONE_NOISE_Z * noise_ms, LONE_NOISE_CAP_MS)
    floor = lone_ms * min(ratio, 1.0) * (1 - LONE_REL) - LONE_ABS_MS - slack
    med = statistics.median(per_call)
    info = {"lone_us": round(lone_ms * 1e3, 3), "several_us": round(med * 1e3, 3), "lone_bound": 0.0,
            "lone_slack_us": round(slack * 1e3, 3)}  # fmt: skip
    if med >= floor or med <= 0:
        return per_call, info
    return [x * floor / med for x in per_call], {**info, "lone_bound": 1.0}


def lone_noise(lone: list[float], ratio: float | None, reference_lone: list[float]) -> float:
    """The standard error (ms) of :func:`lone_bound`'s floor: the candidate's lone readings and the
    reference's ratio through its own (both each less the path's level beside it), combined as
    independent errors.

    Why: a call of a few us is read lone against a level that moves by about as much (a 2-launch kernel's
    lone calls read 2.5-7.6 us in four runs on the H100), so a floor without its error binds honest kernels
    on noise."""
    if not lone or ratio is None:
        return 0.0
    ref_lone = statistics.median(reference_lone) if reference_lone else 0.0
    rel = median_error(reference_lone) / ref_lone if ref_lone > 0 else 0.0
    scale = min(ratio, 1.0)
    return math.hypot(median_error(lone) * scale, statistics.median(lone) * scale * rel)


def copy_bound(
    per_call: list[float], copied: list[float], reference_copy_ms: float
) -> tuple[list[float], int]:
    """Under MPS, each of the candidate's per-call times (``per_call``: to its *done*) raised to its time
    until the judge's copy of its outputs finished (``copied``, per call, the path's cost taken off) less
    the reference's median copy of the same outputs (``reference_copy_ms``, with ``COPY_REL`` and
    ``COPY_ABS_MS`` of slack); and how many it raised.

    Why: under MPS the side's work runs beside the judge's, so a submission can mark its call done and
    finish on another stream. The judge's copy of the outputs, right behind *done*, then reads them
    unfinished (incorrect) or, when that work fills the GPU, queues behind it: a side-stream ReLU read
    284431x with the copy unbounded (bench/results/timing_fidelity_h100_mps_side_stream_escapes.json).
    An honest kernel's outputs copy as fast as the reference's, so its time stands."""
    slack = reference_copy_ms * (1 + COPY_REL) + COPY_ABS_MS
    bound = [max(d, c - slack) for d, c in zip(per_call, copied, strict=True)]
    return bound, sum(b > d for b, d in zip(bound, per_call, strict=True))


def reading_count(perf_trials: int, calls: int) -> int:
    """Timed readings of ``calls`` calls each: ``perf_trials`` calls in all, and at least
    ``MIN_READINGS`` readings (up to ``perf_trials``) so that a median of readings stays one."""
    return max(math.ceil(perf_trials / calls), min(MIN_READINGS, perf_trials))


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
    faster, more: :func:`candidate_reading_size`. ``extra``: the reference side's request fields."""
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


def degraded(host_timed: float, readings: float) -> bool:
    """Whether ``host_timed`` of a side's ``readings`` holding host time make its timing degraded."""
    return host_timed > DEGRADED_SHARE * readings


def net(raw: list[float], null_ms: float, calls: int = 1) -> list[float]:
    """Per call: readings of ``calls`` calls each, less the path's own cost (never below a nanosecond:
    a ratio must stay defined)."""
    return [max(ms - null_ms, 1e-6) / calls for ms in raw]


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
    reading. A side may slow its own null calls: the candidate's are used only by :func:`lone_level`, and
    only downwards."""
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
