"""How KernelBench's judge times the two sides and reads the speedup (the ``timing`` phase of
``judge.py``'s evaluation). On a GPU (:func:`_time`): the candidate timed first, then killed; the
reference timed after it, replaying the candidate's seeds, so nothing of the submission runs while the
reference is measured, and every timed output is checked. Readings are judge-side CUDA events ordered
around the side's work by inter-process events behind a short GPU-side gate (``judging/timing.py``), so
no host latency enters them; their arithmetic is ``judging/readings.py``. Under MPS a short call is timed
in several fresh pairs of side processes (:func:`_pairs`). On the CPU (:func:`_time_interleaved`): the
judge's clock around each request, the two sides' calls interleaved.

``_time`` is long for one concept: it is one evaluation's timing protocol, whose steps (reading sizes,
the host cap, dropped readings, lone readings, the reference's replay of the candidate's seeds) each use
what the one before measured.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..judging import transport
from ..judging.calibration import calibrate, reading_size
from ..judging.compare import compare_outputs
from ..judging.harness import HarnessError, Job, fresh_seed
from ..judging.judging import Run
from ..judging.outputs import Call, foreign, misplaced, unwrap
from ..judging.placement import LEVEL_MATCH_MS
from ..judging.readings import (
    LONE_READINGS,
    OWN_KEY,
    PRECISE_MIN_READINGS,
    SETTLE_KEY,
    candidate_reading_size,
    copy_bound,
    degraded,
    host_capped,
    lone_bound,
    lone_level,
    lone_noise,
    lone_ratio,
    net,
    own_level,
    pct_apart,
    precise,
    reading_count,
)
from ..judging.schemas import Outcome, TimingStats
from ..judging.timing import CpuTimer, GpuTimer, PrepError, Timer, under_mps

#: Stop timing early (keeping what was measured) once this share of the job's timeout is spent.
TIMING_BUDGET_SHARE = 0.6
MIN_TIMED_TRIALS = 5
#: Under MPS, a call whose median is under this on either side is timed in ``SHORT_PAIRS`` fresh pairs
#: of side processes, each side's time the mean of the pairs' medians (:func:`_pairs`).
SHORT_CALL_MS = 0.010
SHORT_PAIRS = 8
#: ... unless the first pair's speedup is at least this far from 1 (either way): the pairs average out
#: process offsets of a few percent (the speedup's sd over a job's pairs 0.9-13% for calls near 1x,
#: CUDA-L1 on 2x H200), which cannot carry such a speedup across fast_p's thresholds (1, 1.5, 2); 8 of
#: that corpus's 24 short-call jobs read 3.7-32000x and spent ~13 s each on seven more pairs.
DECIDED_SPEEDUP = 3.0
INTERLEAVED_METHOD = (
    "judge's time.perf_counter from writing the inputs to the side's answer (after it copied its outputs "
    "into the judge's shared memory); candidate and reference calls interleaved on the same inputs (each "
    "going first in turn), the candidate's processes stopped while the reference is timed; median"
)


#: Why a timed output (second) is not the reference's for the same inputs (first); None: it is.
Differs = Callable[[Any, Any], str | None]


class Incorrect(Exception):
    """An ``incorrect`` verdict found inside a phase (the timing here, ``judge.py``'s correctness trials)."""


def time_sides(
    run: Run,
    job: Job,
    get_inputs: Callable[[int], list[Any]],
    differs: Differs | None,
    started: float,
    own: bool = False,
) -> dict[str, Any]:
    """The timing phase: :func:`_time` in the job's pair of side processes or, under MPS, in fresh pairs
    too (:func:`_pairs`). ``differs``: why a timed output differs from the reference's for the same
    inputs (None: it does not), or None where they are not checked (a reference that keeps state).
    ``own``: the reference timed in the candidate's process first (``OWN_BASELINE_ENV``)."""
    return _pairs(run, job, partial(_time, run, job, get_inputs, differs, started), started, own)


def _time(
    run: Run,
    job: Job,
    get_inputs: Callable[[int], list[Any]],
    differs: Differs | None,
    started: float,
    own: bool = False,
) -> dict[str, Any]:
    """The candidate timed first, then killed; then the path's own cost calibrated and the reference
    timed on the seeds whose candidate outputs are checked: no code of the submission runs while the
    reference or the calibration is measured. (On the CPU, :func:`_time_interleaved`.)

    A reading is one request of ``n`` calls run back to back, each on values of its own (``n`` > 1 for
    calls under ``READING_TARGET_MS``: :func:`reading_size`; the candidate's ``m`` >= ``n``:
    :func:`candidate_reading_size`; both cut where a reading's host work would outgrow
    ``READING_HOST_US``: :func:`host_capped`), drawn into the side's arena after the reading's start, and
    every output of every call is checked against the reference's for the same seed. A reading that
    missed the longest gate (host time in it) is dropped and the side's readings halved; at one call a
    reading it is kept and the answer says ``timing_degraded``. Where readings hold several calls, each
    side also takes ``LONE_READINGS`` readings of one call, which bound its per-call time from below
    (:func:`lone_bound`).

    ``own`` (under MPS, ``OWN_BASELINE_ENV``): the candidate's process holds the reference's model first
    (:meth:`Run.start_pair`); the reference is timed there, then the submission loaded in its place, and
    the candidate is read against those readings, taken in its own process before its code was there."""
    opts, device = job.options, run.device
    if device.type != "cuda" and job.cached_ref_timing is None and not own:
        return _time_interleaved(run, job, get_inputs, differs, started)
    base: GpuTimer | CpuTimer = run.judge.gpu_timer(device) if device.type == "cuda" else CpuTimer()
    gpu = isinstance(base, GpuTimer)
    if isinstance(base, GpuTimer):
        base.start_job()
    # under MPS the reference is timed every time: its output copies are the candidate's baseline
    cached = job.cached_ref_timing if not under_mps() else None
    budget = opts.timeout_s * TIMING_BUDGET_SHARE
    timers: dict[str, Timer] = run.timers or {
        role: base.bind(role, partial(run.ask, role)) for role in ("candidate", "reference")
    }
    warm_seed = fresh_seed()  # inputs made again where used: a problem's inputs may take gigabytes
    n = cap = 1
    if isinstance(base, GpuTimer):
        n, cap = reading_size(run, base, timers, [(get_inputs(warm_seed), {})])

    def sets(seeds: list[int]) -> list[tuple[list[Any], dict[str, Any]]]:
        return [(get_inputs(seed), {}) for seed in seeds]

    def reading(role: str, seeds: list[int]) -> Call:
        """One timed reading, on a GPU its inputs drawn into the side's arena after the reading's start."""
        if not gpu:
            return run.calls(role, sets(seeds), timers[role])
        return run.drawn(role, partial(sets, seeds), len(seeds), nbytes * len(seeds), timers[role])

    def level(role: str, null_set: list[tuple[list[Any], dict[str, Any]]]) -> float:
        """The path's level through ``role``'s process right after a lone reading (two null calls with
        ``null_set`` written, made once for all of a side's lone readings)."""
        return calibrate(run, base, timers[role], null_set, role=role, readings=2, probe=True)

    def warm(role: str, calls: int) -> tuple[list[float], list[float]]:
        """Warm-up readings of ``calls`` calls on one set of inputs: their times (ms) and host round
        trips (us)."""
        warm_sets: list[tuple[list[Any], dict[str, Any]]] = [(get_inputs(warm_seed), {})] * calls
        times, trips = [], []
        for _ in range(math.ceil(opts.warmup / calls)):
            warmed = run.calls(role, warm_sets, timers[role], patient=False)
            if why := misplaced(warmed, device):
                raise Incorrect(f"warm-up call: {why}")
            if warmed.ms is not None:
                times.append(warmed.ms)
                trips.append(getattr(timers[role], "round_trip_us", 0.0))
        del warm_sets  # a problem's inputs may take gigabytes
        run.release()
        return times, trips

    nbytes = transport.layout_bytes((get_inputs(warm_seed), {}))
    # on a GPU a side's readings end once their median is precise enough (a 37 ms kernel's 100 readings
    # a side took 9 s of a level-1 sweep's 5 minutes; such kernels vary by well under 1%)
    rel = opts.perf_precision if gpu else 0.0
    own_raw: list[tuple[float, int]] = []  # the reference in the candidate's process (``own``)
    own_copy: list[float] = []
    own_info: dict[str, float] = {}
    if own:
        own_raw, own_copy, own_info = _own_readings(job, reading, warm, n, base.null_ms, rel, started)
        run.load_candidate()
    warm_ms, trips = warm("candidate", n)
    m = n  # the candidate's calls a reading
    if gpu and warm_ms:
        m = candidate_reading_size(n, (min(warm_ms) - base.null_ms) / n, cap, opts.perf_trials)
        m = host_capped(m, statistics.median(trips), n)
    readings = reading_count(opts.perf_trials, m)
    new_raw: list[tuple[float, int]] = []  # (ms, calls) of each counted reading
    new_copy: list[float] = []  # each counted reading's output copy (ms; ``copy_bound``)
    checked: list[tuple[int, Any]] = []  # (seed, output) of every timed call, checked against the reference's
    host = {"candidate": 0, "reference": 0, "dropped": 0}  # readings with host time: kept, dropped
    i = 0
    while len(new_raw) < readings:
        i += 1
        seeds = [fresh_seed() for _ in range(m)]
        timed = reading("candidate", seeds)
        assert timed.ms is not None
        if why := foreign(timed.out) or misplaced(timed, device):
            raise Incorrect(f"timed reading {i}: {why}")
        checked.extend(zip(seeds, timed.out, strict=True))
        if timed.host_timed and m > 1:  # the host could not keep up: fewer calls a reading
            host["dropped"] += 1
            m = max(1, m // 2)
            readings = max(readings, reading_count(opts.perf_trials, m))
            continue
        host["candidate"] += timed.host_timed
        new_raw.append((timed.ms, m))
        new_copy.append(timed.copy_ms)
        if time.perf_counter() - started > budget and len(new_raw) >= MIN_TIMED_TRIALS:
            break
        if precise(_per_call(new_raw, base.null_ms), 0.0, rel):
            break
    lone_checked: list[tuple[int, Any]] = []  # lone readings' (seed, output), replayed lone by the reference
    lone_pairs: list[tuple[float, float]] = []  # (lone reading, the path's level beside it) of each kept
    if gpu and max(m, n) > 1:
        null_set: list[tuple[list[Any], dict[str, Any]]] = [(get_inputs(warm_seed), {})]
        for k in range(LONE_READINGS):
            seed = fresh_seed()
            timed = reading("candidate", [seed])
            if why := foreign(timed.out) or misplaced(timed, device):
                raise Incorrect(f"lone reading {k + 1}: {why}")
            lone_checked.append((seed, timed.out[0]))
            beside = level("candidate", null_set)
            if not timed.host_timed and timed.ms is not None:
                lone_pairs.append((timed.ms, beside))
        del null_set  # a problem's inputs may take gigabytes
    new_level: float | None = None  # under MPS: the candidate's own level, its calls read against it
    after_ms = 0.0  # and its process's level after its readings
    if gpu and under_mps() and run.candidate_null_ms is not None:
        after_ms = calibrate(run, base, timers["candidate"], [(get_inputs(warm_seed), {})], role="candidate")
        new_level = own_level(run.candidate_null_ms, after_ms)
    run.end_candidate()
    mode_info: dict[str, float] = {}
    ref_warm: tuple[list[float], list[float]] | None = None  # the reference's warm-up, where it stays
    # the reference timed at the candidate's level, unless both sides' calls are long
    if new_level is not None and not own:  # with ``own`` the reference's process only checks
        ref_warm = warm("reference", n)  # how long its calls are, in its first process
        ref_call = (min(ref_warm[0]) - base.null_ms) / n if ref_warm[0] else 0.0
        new_call = statistics.median(_per_call(new_raw, new_level))
        spawn = run.spawn
        mode_info = run.reference_at(
            new_level, min(ref_call, new_call), spawn["build_dir"], spawn["setup"], spawn["load"]["reference"]
        )
        if mode_info["reference_forks"]:
            ref_warm = None

    # the null calls draw a candidate's reading of inputs: their preparation is its baseline
    null_ms = calibrate(run, base, timers["reference"], [(get_inputs(warm_seed), {})] * m,
                        partial(sets, [warm_seed] * m))  # fmt: skip
    try:
        base.check("null")
    except PrepError as exc:
        raise HarnessError(Outcome.EXECUTION_FAILURE, str(exc)) from exc
    ref_raw: list[tuple[float, int]] = []
    ref_copy: list[float] = []
    lone_ref: list[float] = []  # the reference's lone readings of the candidate's seeds, less their level
    ref_levels: list[float] = []
    mismatch: str | None = None

    def replay(chunk: list[tuple[int, Any]]) -> Call:
        """The reference's reading of ``chunk``'s seeds, each output checked against the candidate's."""
        nonlocal mismatch
        timed = reading("reference", [seed for seed, _ in chunk])
        assert timed.ms is not None
        for out, (_, snap) in zip(timed.out, chunk, strict=True):
            mismatch = mismatch or (differs(out, snap) if differs else None)
        return timed

    if cached is None:
        _, trips = ref_warm or warm("reference", n)
        if gpu and trips:
            n = host_capped(n, statistics.median(trips), n)
        k = 0
        while k < len(checked):  # the same seeds, ``n`` a reading
            chunk = checked[k : k + n]
            k += len(chunk)
            timed = replay(chunk)
            assert timed.ms is not None
            if timed.host_timed and n > 1:
                host["dropped"] += 1
                n = max(1, n // 2)
            elif len(chunk) == n:  # a shorter last reading is checked, not counted
                host["reference"] += timed.host_timed
                ref_raw.append((timed.ms, n))
                ref_copy.append(timed.copy_ms)
        # every seed the candidate ran is replayed; then, while the reference's median is less precise
        # than the candidate's was asked to be, readings on fresh seeds (no candidate output to check)
        while (
            rel > 0
            and not own  # then the reference's time here is only reported
            and not precise(_per_call(ref_raw, null_ms), 0.0, rel)
            and len(ref_raw) < reading_count(opts.perf_trials, n)
            and time.perf_counter() - started <= budget
        ):
            timed = reading("reference", [fresh_seed() for _ in range(n)])
            assert timed.ms is not None
            host["reference"] += timed.host_timed
            ref_raw.append((timed.ms, n))
            ref_copy.append(timed.copy_ms)
    else:
        for seed, snap in checked:
            if mismatch is None and differs is not None:
                mismatch = differs(unwrap(run.call("reference", get_inputs(seed)).out), snap)
    # the reference's lone readings, with a cached reference timing too (the candidate's floor needs the
    # reference's ratio), each read against the level beside it as the candidate's are
    null_set = [(get_inputs(warm_seed), {})] if lone_checked else []
    for seed, snap in lone_checked:
        timed = replay([(seed, snap)])
        ref_levels.append(level("reference", null_set))
        if not timed.host_timed and timed.ms is not None:
            lone_ref.append(timed.ms - ref_levels[-1])
    del null_set
    lone_new = [ms - lone_level(null_ms, run.candidate_null_ms, beside) for ms, beside in lone_pairs]
    ref_pc = _per_call(ref_raw, null_ms)
    # the reference's own several-to-lone ratio, where its readings hold several calls (at one call a
    # reading there is none: a lone call of a far faster candidate then has nothing to be scaled by)
    ratio = lone_ratio(ref_pc or ([cached.median] if cached else []), lone_ref) if n > 1 else None
    new_null = null_ms if new_level is None else new_level
    new_pc = _per_call(new_raw, new_null)
    if own and own_raw:  # against the level from before the reference's load: the submission cannot move it
        own_pc = _per_call(own_raw, run.candidate_null_ms if run.candidate_null_ms is not None else new_null)
        if ref_pc:
            own_info[OWN_KEY] = pct_apart(own_pc, ref_pc)
        ref_pc, ref_copy = own_pc, own_copy
    copy_info: dict[str, float] = {}
    if gpu and under_mps() and ref_copy:
        ref_copy_ms = statistics.median(ref_copy)
        copied = _per_call([(ms + c, k) for (ms, k), c in zip(new_raw, new_copy, strict=True)], new_null)
        new_pc, raised = copy_bound(new_pc, copied, ref_copy_ms)
        copy_info = {"reference_copy_us": round(ref_copy_ms * 1e3, 2), "copy_bound_readings": float(raised),
                     "candidate_after_null_us": round(after_ms * 1e3, 2),
                     "candidate_level_us": round(new_null * 1e3, 2), **mode_info}  # fmt: skip
    noise = lone_noise(lone_new, ratio, lone_ref)
    new_pc, lone_info = lone_bound(new_pc, lone_new, ratio, noise)
    if run.candidate_null_ms is not None:
        lone_info["candidate_null_us"] = round(run.candidate_null_ms * 1e3, 2)
    if lone_pairs and ref_levels:  # the levels beside each side's lone readings: median, range
        sides = {"candidate": [b for _, b in lone_pairs], "reference": ref_levels}
        for role, beside_ms in sides.items():
            lone_info[f"{role}_lone_null_us"] = round(statistics.median(beside_ms) * 1e3, 2)
            lone_info[f"{role}_lone_null_range_us"] = round((max(beside_ms) - min(beside_ms)) * 1e3, 2)
    if lone_ref:
        lone_info["reference_lone_us"] = round(statistics.median(lone_ref) * 1e3, 3)
        lone_info["reference_ratio"] = round(ratio, 4) if ratio is not None else -1.0
    gate = None
    why_degraded = None
    if isinstance(base, GpuTimer):
        gate = {**base.report(), "calls_per_reading": n, "candidate_calls_per_reading": m,
                "readings": len(new_raw), "reference_readings": len(ref_raw),
                "host_timed_readings": host["candidate"], "host_timed_reference_readings": host["reference"],
                "host_timed_dropped": host["dropped"],
                **lone_info, **copy_info, **own_info}  # fmt: skip
        ref_host = (int(own_info.get("own_host_timed_readings", 0)), len(own_raw)) if own else (
            host["reference"], len(ref_raw))  # fmt: skip
        if degraded(host["candidate"], len(new_raw)) or degraded(*ref_host):
            why_degraded = (
                f"{host['candidate']} of the candidate's and {ref_host[0]} of the reference's readings "
                "hold host time: even at one call a reading their host work outlasted the longest gate (a "
                "forward that synchronises the host, or a host too busy); the speedup is not a GPU timing"
            )
    return {
        "ref": cached if cached is not None else TimingStats.of(ref_pc),
        "new": TimingStats.of(new_pc),
        "ref_cached": cached is not None,
        "method": base.method
        + (
            f"; each side's readings end at perf_trials calls or, after at least {PRECISE_MIN_READINGS} "
            f"readings, once their median's standard error is within {rel:.2%} of it"
            if rel > 0
            else ""
        ),
        "mismatch": mismatch,
        "gate": gate,
        "degraded": why_degraded,
    }


def _own_readings(
    job: Job,
    reading: Callable[[str, list[int]], Call],
    warm: Callable[[str, int], tuple[list[float], list[float]]],
    n: int,
    null_ms: float,
    rel: float,
    started: float,
) -> tuple[list[tuple[float, int]], list[float], dict[str, float]]:
    """The reference's model timed in the candidate's process, before the submission is loaded there
    (``OWN_BASELINE_ENV``): warm-up, a set of readings that only settles the process (``SETTLE_KEY``),
    then the kept set, each reading on fresh seeds (none of them one the candidate will be timed on).
    Returns the kept readings ``(ms, calls)``, the judge's copies of their outputs, and the settling
    drift for the gate. No submitted code runs in that process yet, so nothing checks these outputs.
    ``rel``: the readings' precision that ends a set early, as for the candidate's."""
    opts = job.options
    budget = opts.timeout_s * TIMING_BUDGET_SHARE
    warm("candidate", n)
    sets: list[tuple[list[tuple[float, int]], list[float]]] = []
    for _ in range(2):
        got: list[tuple[float, int]] = []
        copied: list[float] = []
        host = 0  # readings with host time in them (one call a reading under MPS: kept, as the candidate's)
        while len(got) < reading_count(opts.perf_trials, n):
            timed = reading("candidate", [fresh_seed() for _ in range(n)])
            assert timed.ms is not None
            got.append((timed.ms, n))
            copied.append(timed.copy_ms)
            host += timed.host_timed
            if time.perf_counter() - started > budget and len(got) >= MIN_TIMED_TRIALS:
                break
            if precise(_per_call(got, null_ms), 0.0, rel):
                break
        sets.append((got, copied))
    (settle, _), (kept, copies) = sets
    drift = pct_apart(_per_call(kept, null_ms), _per_call(settle, null_ms))
    return kept, copies, {SETTLE_KEY: drift, "own_host_timed_readings": float(host)}


def _pairs(
    run: Run, job: Job, time_pair: Callable[[bool], dict[str, Any]], started: float, own: bool = False
) -> dict[str, Any]:
    """``time_pair()`` once or, under MPS where either side's median call is under ``SHORT_CALL_MS``, in
    ``SHORT_PAIRS`` fresh pairs of side processes (:meth:`Run.start_pair`), pooled (:func:`_pooled`);
    a pair whose timed outputs differ from the reference's ends it, and one pair suffices where its
    speedup is ``DECIDED_SPEEDUP`` or more from 1.

    Why: under MPS a side process reads a call's path at an offset of its own (a 1x128 add's readings
    sat 9.6-10.6 us by process, their spread inside one process ~0.3 us, H100), and a ~3.5 us call
    carries that offset whole: one pair read the add against itself 0.81-1.20x (sd 0.093 over 60 pairs),
    so the mean of eight has an sd of ~0.033. Each pair costs a job's start again (~1.2 s: two
    processes, their CUDA contexts, the model's load), so only calls that short pay it.

    ``own`` (``time_pair(True)``): where either side's call is under ``LEVEL_MATCH_MS``, the first timing
    (in the pair that ran the correctness checks) is only a measure of that: every pair is then fresh, its
    candidate's process holding the reference's model first (:meth:`Run.start_pair`). Longer calls keep
    the first timing, as they keep the reference where it is (the levels move them by at most 0.4%)."""
    first = time_pair(False)
    if run.device.type != "cuda" or not under_mps() or first["mismatch"]:
        return first
    if own and min(first["ref"].median, first["new"].median) < LEVEL_MATCH_MS:
        run.start_pair(own=True)
        first = time_pair(True)
        if first["mismatch"]:
            return first
    else:
        own = False
    if min(first["ref"].median, first["new"].median) >= SHORT_CALL_MS:
        return first
    ratio = first["ref"].median / max(first["new"].median, 1e-12)
    if not 1 / DECIDED_SPEEDUP < ratio < DECIDED_SPEEDUP:
        return {**first, "gate": {**(first["gate"] or {}), "process_pairs": 1.0}}
    timings = [first]
    budget = job.options.timeout_s * TIMING_BUDGET_SHARE
    start_s = time_s = 0.0  # what a pair costs, started and timed: the gate's pair_start_s, pair_time_s
    while len(timings) < SHORT_PAIRS and time.perf_counter() - started < budget:
        t0 = time.perf_counter()
        run.start_pair(own=own)
        t1 = time.perf_counter()
        timings.append(time_pair(own))
        start_s, time_s = start_s + t1 - t0, time_s + time.perf_counter() - t1
        if timings[-1]["mismatch"]:
            return timings[-1]
    pooled = _pooled(timings)
    if len(timings) > 1:
        extra = len(timings) - 1
        pooled["gate"].update(pair_start_s=round(start_s / extra, 3), pair_time_s=round(time_s / extra, 3))
    return pooled


def _pooled(timings: list[dict[str, Any]]) -> dict[str, Any]:
    """Several pairs' timings as one: each side's median the mean of the pairs' medians, its other figures
    over all of its readings; the gate the last pair's, with the pairs' count and spread."""
    if len(timings) == 1:
        return timings[0]
    gate = dict(timings[-1]["gate"] or {})
    gate["process_pairs"] = float(len(timings))
    pooled: dict[str, TimingStats] = {}
    for side in ("ref", "new"):
        stats = [t[side] for t in timings]
        n = sum(s.n for s in stats)
        mean = sum(s.mean * s.n for s in stats) / n
        var = sum((s.n - 1) * s.std**2 + s.n * (s.mean - mean) ** 2 for s in stats) / max(n - 1, 1)
        medians = [s.median for s in stats]
        pooled[side] = TimingStats(median=statistics.fmean(medians), mean=mean, std=var**0.5,
                                   min=min(s.min for s in stats), max=max(s.max for s in stats), n=n)  # fmt: skip
        gate[f"pair_sd_{side}_pct"] = round(100 * statistics.stdev(medians) / statistics.fmean(medians), 3)
    # what the pairs' count buys: the speedup's sd over the mean of P pairs is this / sqrt(P)
    speedups = [t["ref"].median / t["new"].median for t in timings]
    gate["pair_sd_speedup_pct"] = round(100 * statistics.stdev(speedups) / statistics.fmean(speedups), 3)
    degraded = next((t["degraded"] for t in timings if t.get("degraded")), None)
    method = timings[0]["method"] + (
        f"; a call under {SHORT_CALL_MS * 1e3:g} us timed in {len(timings)} fresh pairs of side processes, "
        "each side's median the mean of the pairs' medians"
    )
    return {**timings[-1], **pooled, "gate": gate, "degraded": degraded, "method": method}


def _per_call(raw: list[tuple[float, int]], null_ms: float) -> list[float]:
    """Per-call times of readings given as ``(ms, calls)`` (their counts may differ: :func:`net` each)."""
    return [net([ms], null_ms, calls)[0] for ms, calls in raw]


def _time_interleaved(
    run: Run, job: Job, get_inputs: Callable[[int], list[Any]], differs: Differs | None, started: float
) -> dict[str, Any]:
    """CPU timing: each timed call of the candidate is followed by one of the reference on the same inputs,
    with the candidate and everything it started stopped meanwhile (SIGSTOP, by the zygote). A shared
    CPU's slow and fast spells (another tenant, a cold cache, a host that deschedules the VM) then fall
    on both sides alike instead of on whichever was timed during them; nothing of the submission runs
    while the reference is timed; and every timed output is checked against the reference's."""
    opts = job.options
    timer = CpuTimer()
    budget = opts.timeout_s * TIMING_BUDGET_SHARE

    def timed(role: str, inputs: list[Any]) -> Call:
        # The other side (and all it started) is stopped for either side's call: the judge's steps
        # before a call (the zygote's scan of /proc, the signals) are then the same for both, where
        # freezing only for the reference once read an honest kernel 1.11-1.17x on this 2-core box.
        with run.frozen("reference" if role == "candidate" else "candidate"):
            return run.call(role, inputs, timer)

    def reference(inputs: list[Any]) -> Call:
        return timed("reference", inputs)

    def candidate(inputs: list[Any]) -> Call:
        return timed("candidate", inputs)

    warm = get_inputs(fresh_seed())
    for _ in range(opts.warmup):
        candidate(warm)
        reference(warm)
    del warm
    new_raw: list[float] = []
    ref_raw: list[float] = []
    mismatch: str | None = None
    for i in range(opts.perf_trials):
        inputs = get_inputs(fresh_seed())
        if i % 2:  # alternate which side goes first: neither always follows the judge's own work
            ref = reference(inputs)
            new = candidate(inputs)
        else:
            new = candidate(inputs)
            ref = reference(inputs)
        if why := foreign(new.out):
            raise Incorrect(f"timed call {i + 1}: {why}")
        assert new.ms is not None and ref.ms is not None
        new_raw.append(new.ms)
        ref_raw.append(ref.ms)
        if differs is not None and (mismatch := differs(ref.out, new.out)):
            break
        if time.perf_counter() - started > budget and len(new_raw) >= MIN_TIMED_TRIALS:
            break
    run.end_candidate()
    return {
        "ref": TimingStats.of(ref_raw),
        "new": TimingStats.of(new_raw),
        # the median of the pairs' ratios: a spell that slows both calls of a pair cancels out
        "speedup": statistics.median(r / n for r, n in zip(ref_raw, new_raw, strict=True)),
        "ref_cached": False,
        "method": INTERLEAVED_METHOD,
        "mismatch": mismatch,
    }


def output_differs(ref: Any, snap: Any, atol: float, rtol: float) -> str | None:
    """Why ``snap`` (a candidate's output) is not ``ref`` within the tolerances (None: it is)."""
    cmp = compare_outputs(ref, snap, atol, rtol)
    return None if cmp.ok else cmp.message
