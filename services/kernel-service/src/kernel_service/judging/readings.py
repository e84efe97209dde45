"""The arithmetic of readings, shared by both benchmarks' judges: how many readings a side takes and how
many calls each holds, when their median is precise enough, a reading's time per call less the path's
own cost (:func:`net`), and the bounds that correct what a side could make its readings say (its lone
calls: :func:`lone_bound`; its outputs' copy: :func:`copy_bound`; its own process's level:
:func:`own_level`), with the constants that tune them. Pure functions of measured numbers: the
measuring is :class:`~kernel_service.judging.judging.Run`'s and ``calibration.py``'s.
"""

from __future__ import annotations

import math
import os
import statistics

from .timing import READING_HOST_US, READING_TARGET_MS

#: Timed readings at least (up to ``perf_trials``) when each holds several calls.
MIN_READINGS = 10
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
#: A side's timing is ``timing_degraded`` when more than this share of its readings hold host time: a
#: forward that synchronises the host does in every one, a lone one hardly moves a median of ten or more.
DEGRADED_SHARE = 0.1


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


def degraded(host_timed: float, readings: float) -> bool:
    """Whether ``host_timed`` of a side's ``readings`` holding host time make its timing degraded."""
    return host_timed > DEGRADED_SHARE * readings


def net(raw: list[float], null_ms: float, calls: int = 1) -> list[float]:
    """Per call: readings of ``calls`` calls each, less the path's own cost (never below a nanosecond:
    a ratio must stay defined)."""
    return [max(ms - null_ms, 1e-6) / calls for ms in raw]
