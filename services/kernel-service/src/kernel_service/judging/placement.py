"""Under MPS, where a run's side processes sit. The path through a side process sits at one of two levels
(~6.6 or ~10.9 us a null call on the H100), set by the process's place among the daemon's clients, and a
real call's path moves more with it than a null call's. So the candidate is moved to the lower level
before the submission is loaded (:func:`bind_before_load`, :func:`_candidate_low`), and once it is gone
the reference is timed in a process at its level (:func:`reference_at`), beside its predecessor kept idle
as the run's ``companion``.

Functions of a :class:`~kernel_service.judging.judging.Run`: they keep its ``timers``,
``candidate_null_ms``, ``level_info`` and ``companion``, and the judges reach them through
``Run.bind_before_load`` and ``Run.reference_at``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from .calibration import calibrate
from .timing import GpuTimer, under_mps

if TYPE_CHECKING:
    from .judging import Run

#: Under MPS a side process's path sits at one of two levels (~6.6 or ~10.9 us a null call on the H100),
#: and the two sides of a job, forked together, sat at opposite ones in 16 of 16 jobs; a real call's path
#: moved more with it (a 4-layer MLP's ~7 us). The reference is timed in a process forked once the
#: candidate is gone, while the old one still runs, whose level is within ``MODE_SLACK_MS`` of the
#: candidate's (:func:`reference_at`), up to ``MODE_FORKS`` tries, each level from
#: ``MODE_NULL_CALLS`` null calls.
MODE_SLACK_MS = 0.002
MODE_FORKS = 3
MODE_NULL_CALLS = 5
#: Under MPS, sides whose calls both take at least this long are timed where they are, not brought to one
#: level: the levels move a real call by ~4 us, at most 0.4% of such a call. Matching took 1.76 forks
#: (0.65 s) a job in a level-1 sweep, 64.5 s of its 301.6 s, and 98 of its 100 problems are this long (H100).
LEVEL_MATCH_MS = 1.0
#: Under MPS, how many times the two sides may swap places before the submission is loaded so that the
#: candidate sits at the lower level (:func:`_candidate_low`).
LOW_SWAPS = 2


def bind_before_load(run: Run, build_dir: str | None = None, setup: dict[str, Any] | None = None) -> None:
    """Bind the GPU timer to both sides and measure the path's cost through the candidate's process
    while it runs only our code: a lone call's cost is read against its own process's level (levels
    ~8 us apart per process), which the submission, not yet loaded, could not have slowed. Under MPS,
    with ``build_dir`` and ``setup`` (how a side is forked and set up), the candidate is first moved
    to the lower level (:func:`_candidate_low`)."""
    if run.device.type != "cuda":
        return
    base = run.judge.gpu_timer(run.device)
    base.start_job()
    run.timers = {role: base.bind(role, partial(run.ask, role)) for role in ("candidate", "reference")}
    run.candidate_null_ms = calibrate(run, base, run.timers["candidate"], _probe(run), role="candidate")
    if build_dir is not None and setup is not None and under_mps():
        _candidate_low(run, base, build_dir, setup)


def _candidate_low(run: Run, base: GpuTimer, build_dir: str, setup: dict[str, Any]) -> None:
    """Under MPS, before the submission is loaded: while the candidate's level is above the
    reference's (two sides forked together sit at opposite levels), the reference killed and a new
    candidate forked in its place, then the old candidate killed and a new reference forked in its
    place, up to ``LOW_SWAPS`` times.

    Why: at the upper level (~10.9 us on the H100) a real call's path costs ~4 us more than its null
    calls account for, on both sides, so a fast candidate against a slow reference reads slower than
    it is: the 64 MB-weights rewrite read x0.93-0.94 of an L2-flushed timer there, x0.975-0.98 once
    moved (H100). A process forked while another is killed takes the level that one left
    (:func:`reference_at`): one swap reached the lower level each time one was needed (5 of 24
    KernelBench jobs, 1 of 6 BackendBench pairs)."""
    swaps, t0 = 0, time.perf_counter()
    while swaps < LOW_SWAPS:
        assert run.candidate_null_ms is not None
        if run.candidate_null_ms <= _level(run, base, "reference") + MODE_SLACK_MS:
            break
        swaps += 1
        run.kill("reference")
        del run.sides["reference"], run.opened["reference"]
        run.drop_arenas("reference")
        for role in ("candidate", "reference"):  # each in the place the other's old process left
            _fork_beside(run, base, role, build_dir, (setup,))
        run.candidate_null_ms = calibrate(run, base, run.timers["candidate"], _probe(run), role="candidate")
    run.level_info["candidate_swaps"] = float(swaps)
    run.level_info["candidate_swaps_s"] = round(time.perf_counter() - t0, 3)


def _fork_beside(
    run: Run, base: GpuTimer, role: str, build_dir: str, msgs: Iterable[dict[str, Any]], keep: bool = False
) -> None:
    """A new process for ``role``, sent ``msgs`` while the old one (if any) still runs, then the old
    one killed (``keep``: kept idle as the run's ``companion`` instead, an earlier companion killed)
    and its arenas dropped; the GPU timer bound to the new one."""
    old, opened = run.sides.pop(role, None), run.opened.pop(role, None)
    try:
        run.fork(role, build_dir)
        run.ask_in_turn(role, msgs)
    finally:
        if old is not None and opened is not None:
            dismiss_companion(run)
            if keep and old.alive:
                run.companion = (old, opened)
            else:
                opened.close()
                old.kill()
            run.drop_arenas(role)
    run.timers[role] = base.bind(role, partial(run.ask, role))


def dismiss_companion(run: Run) -> None:
    """Kill the run's ``companion``, if any."""
    if run.companion is not None:
        side, opened = run.companion
        run.companion = None
        if not run.stuck:
            opened.close()
        side.kill()


def _level(run: Run, base: GpuTimer, role: str) -> float:
    """The path's level (ms) through ``role``'s process now: ``MODE_NULL_CALLS`` null calls (asked of
    that process, in its arena: another side's timer waits for a *done* that never comes)."""
    return calibrate(
        run, base, run.timers[role], _probe(run), role=role, readings=MODE_NULL_CALLS, probe=True
    )


def _probe(run: Run) -> list[tuple[list[Any], dict[str, Any]]]:
    """What a null call that measures a process's level is given: one element of ours."""
    return [([torch.zeros(1, device=run.device)], {})]


def reference_at(
    run: Run, level_ms: float, call_ms: float, build_dir: str, *msgs: dict[str, Any]
) -> dict[str, float]:
    """Under MPS, with the candidate gone: a new reference process (sent ``msgs``: its set-up, its
    model's load), forked while the old one still runs, again while its path's level is more than
    ``MODE_SLACK_MS`` from ``level_ms`` (the candidate's), up to ``MODE_FORKS`` times; its timer bound
    in ``run.timers``. Returns the forks it took (none where ``call_ms``, the shorter side's call, is
    at least ``LEVEL_MATCH_MS``) and the level it sits at (us).

    Why: each side is read against its own process's level (:func:`~.readings.own_level`), but a real
    call's path moves more than a null call's between the two levels, so the two sides must sit at one
    level. The levels fit a process's place among the daemon's clients: a candidate forked again beside
    a live reference took the upper level 3 times of 3 in each of 30 BackendBench pairs, a reference
    forked after its predecessor was killed matched the candidate in 4 of 7 jobs, and one forked while
    its predecessor still ran matched it in every job (H100).

    The predecessor is then kept alive, idle, as the run's ``companion`` until the reference's readings
    end: the candidate was timed beside the idle first reference, and a side timed with one client
    fewer on the daemon reads faster. With the predecessor killed, a 1x128 add against itself read
    0.79-1.08x, median 0.90, over 14 jobs (the candidate slower in most); with it kept, 1.003 median
    (0.81-1.20) over 60 pairs (H100)."""
    if call_ms >= LEVEL_MATCH_MS:
        return {**run.level_info, "reference_forks": 0.0}
    base = run.judge.gpu_timer(run.device)
    ms, forks, t0 = 0.0, 0, time.perf_counter()
    while forks < MODE_FORKS:
        forks += 1
        _fork_beside(run, base, "reference", build_dir, msgs, keep=True)
        ms = _level(run, base, "reference")
        if abs(ms - level_ms) <= MODE_SLACK_MS:
            break
    return {**run.level_info, "reference_forks": float(forks), "reference_mode_us": round(ms * 1e3, 2),
            "reference_forks_s": round(time.perf_counter() - t0, 3)}  # fmt: skip
