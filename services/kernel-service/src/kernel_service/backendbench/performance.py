"""BackendBench's performance timing: each performance input timed for the kernel in fresh pairs of
side processes (the kernel's process killed before the op is timed in its pair's reference process), every
timed output checked, and an input's time the mean of the pairs' medians (:func:`time_cases`).

Split from ``evaluator.py``, which checks correctness and gives the verdict; it calls :func:`time_cases`
once a kernel is correct on every input.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..judging.calibration import calibrate, reading_size
from ..judging.harness import HarnessError, fresh_seed, seed_all
from ..judging.outputs import Call
from ..judging.readings import (
    OWN_KEY,
    SETTLE_KEY,
    copy_bound,
    net,
    own_baseline,
    own_level,
    pct_apart,
    reading_count,
)
from ..judging.schemas import Outcome
from ..judging.timing import CpuTimer, GpuTimer, PrepError, Timer, under_mps
from .compare import compare
from .prepared import Prepared, Sides, load_kernel, quiet, tensors_in, trim
from .schemas import InputResult
from .suites import Case, build_cases, default_dtypes


def _rebuild_perf(prep: Prepared, seed: int) -> list[Case]:
    """The request's performance inputs made again from ``seed``: same shapes, dtypes and layouts, new
    values (each timed call gets its own, so a kernel cannot answer a repeated input from a cache)."""
    req, opts = prep.req, prep.req.options
    seed_all(seed)
    with quiet():
        _, perf = build_cases(
            req.op, req.suite, device=prep.device, dtypes=opts.dtypes or default_dtypes(prep.device),
            seed=seed, max_inputs=opts.max_inputs, trace_file=opts.trace_file, trace=opts.trace, perf_only=True,
        )  # fmt: skip
    if [tuple(_shapes(c)) for c in perf] != [tuple(_shapes(c)) for c in prep.perf]:
        raise HarnessError(
            Outcome.UNKNOWN_ERROR, f"the performance inputs of {req.op} changed shape with the seed"
        )
    return perf


def _shapes(case: Case) -> Iterator[tuple[Any, ...]]:
    for t in tensors_in((case.args, case.kwargs)):
        yield (tuple(t.shape), tuple(t.stride()), t.dtype)


#: On a GPU, an op's performance inputs are timed in this many fresh pairs of side processes, each pair
#: taking its share of the readings (the candidate's process killed before the reference's is timed).
#: One process reads the same op steadily up to ~2.5% off another (BENCHMARKS.md, "How the figures got here": sd
#: 0.9-1.7% between processes timed at the same moments, 0.1-0.3% within one over time; the smoke
#: self-check's timing report, ``pair_sd_*_pct``: 0.4-2.1%): the mean over several processes is what makes
#: an op read within +-2% of itself. At 5 pairs a pair's speedup spread 1.9% (median over 18 self-checks, one
#: H200, the op against itself) and the op's 0.85%: 1 of 18 fell outside 0.98-1.02; 8 pairs take it to
#: ~0.67% (~0.9 s a pair). The levels the sides are net of explain little of it (``pair_sd_level_gap_pct``
#: 0.46% median), the readings about half.
PERF_PROCESSES = 8
#: The candidate's level (us) before its code was loaded and after its kernel's readings, the one those
#: readings are net of, the one the op's readings in its process are net of, and the settling drift: the
#: report's mean over the pairs.
LEVEL_KEYS = ("candidate_null_us", "candidate_after_us", "candidate_level_us", "own_level_us", SETTLE_KEY)
#: Readings of each input a pair takes at least (its share of ``perf_trials`` may be fewer), each a fresh set
#: of inputs per call.
PAIR_MIN_READINGS = 3
#: On a GPU, the readings a pair takes of an op's inputs together at least, shared among them (the op's
#: speedup is their geometric mean). Why: under MPS a reading is one call, and one process's readings of an
#: 8 us op spread 2-6% (robust sd, 2x H200, the smoke self-check's ``reading_sd_pct``): at 4 a pair (20
#: trials over 5 pairs) a pair's speedup spread 1-9% and 10 of 36 self-checks fell outside 0.98-1.02, the
#: op against itself (BENCHMARKS.md, issue 52). A reading costs a few ms; starting a pair ~0.6 s.
GPU_PAIR_READINGS = 24


@dataclass
class Block:
    """The readings one pair of side processes took: per input, net times a call (ms), and the first
    timed output that differed from the op's."""

    kernel: list[list[float]]
    ref: list[list[float]]
    bad: dict[int, str]
    gate: dict[str, float] | None


def time_cases(
    sides: Sides, prep: Prepared, cases: list[Case], results: list[InputResult]
) -> dict[str, float] | None:
    """Every performance input timed for the kernel, whose process is then killed, then for the op: no
    code of the submission runs while the op is timed. This is done by ``options.perf_processes`` fresh
    pairs of processes in turn (``PERF_PROCESSES`` on a GPU), each taking its share of the readings; a call's time is the mean of the
    pairs' medians. Each timed call gets fresh values (a seed from ``os.urandom`` per call, the same for both
    sides) and every timed output is checked against the op's output for the same values. A reading of
    an input holds as many calls as its size allows (``judge.reading_size``, from the op's speed), the
    same for both sides. Returns the GPU gate's report (None on the CPU)."""
    run, opts = sides.run, prep.req.options
    pairs = opts.perf_processes or (PERF_PROCESSES if run.device.type == "cuda" else 1)
    sizes: list[int] | None = None
    blocks: list[Block] = []
    mps = run.device.type == "cuda" and under_mps()
    own = own_baseline(mps)

    def load() -> None:
        if (failed := load_kernel(sides, prep.req, prep.base)) is not None:
            raise HarnessError(Outcome.EXECUTION_FAILURE, failed.feedback)

    start_s = time_s = 0.0  # the pairs' seconds, started and timed: the gate's pair_start_s, pair_time_s
    for p in range(pairs):
        # a fresh pair: the kernel imported anew, the op in a new reference process; under MPS the first
        # pair too, the candidate's level measured before its kernel is imported (``judging.own_level``), and
        # with an own baseline, the op timed in the candidate's process before then
        t0 = time.perf_counter()
        if p or mps or own:
            sides.start("reference", "candidate")
            if mps:
                run.bind_before_load(sides.build_dir, sides.setup)
            if not own:
                load()
        t1 = time.perf_counter()
        block, sizes = _time_block(sides, prep, cases, sizes, pairs, load if own else None)
        blocks.append(block)
        start_s, time_s = start_s + t1 - t0, time_s + time.perf_counter() - t1
    bad = {j: why for b in reversed(blocks) for j, why in b.bad.items()}
    for j, result in enumerate(results):
        # each pair's median, averaged over the pairs: a pooled median of readings from processes that sit
        # at different levels jumps between them (H100, 24 smoke self-checks at 5 pairs: 0.975-1.039 so,
        # 0.981-1.015 as the mean of the pairs' medians; readings of one process spread 0.1-0.4%, one
        # process's median 0.4-2.1% from another's)
        kernel_ms = result.kernel_ms = statistics.fmean(statistics.median(b.kernel[j]) for b in blocks)
        ref_ms = result.ref_ms = statistics.fmean(statistics.median(b.ref[j]) for b in blocks)
        if j in bad:
            result.correct = False
            result.error = trim("a timed call's output differs from the op's: " + bad[j])
            continue
        result.speedup = ref_ms / max(kernel_ms, 1e-9)
    gate = blocks[-1].gate
    if gate is None:
        return None
    readings = sum(len(b.kernel[0]) for b in blocks) if cases else 0
    host = {k: float(sum((b.gate or {}).get(k, 0.0) for b in blocks))
            for k in ("host_timed_readings", "host_timed_reference_readings")}  # fmt: skip
    # what a pair cost (s), started and timed: where a second GPU's worker makes the same op slower
    costs = {"pair_start_s": round(start_s / pairs, 4), "pair_time_s": round(time_s / pairs, 4)}
    return {
        **gate,
        **host,
        "readings": float(readings),
        "process_pairs": float(pairs),
        **costs,
        **_spread(blocks),
    }


def _spread(blocks: list[Block]) -> dict[str, float]:
    """How the first input's time varies (percent of its median): between the pairs' processes (the
    standard deviation of each pair's median, per side) and between one process's readings (a robust
    standard deviation, the median over the pairs and sides); the spread of the pairs' speedups; with an
    own baseline, how far the op read in the candidate's process from the reference's, the mean over the
    pairs and the widest."""
    if not blocks or not blocks[0].kernel:
        return {}
    out: dict[str, float] = {}
    within: list[float] = []
    for side in ("kernel", "ref"):
        runs = [getattr(b, side)[0] for b in blocks]
        medians = [statistics.median(r) for r in runs]
        mid = statistics.median(medians)
        if len(medians) > 1:
            out[f"pair_sd_{side}_pct"] = round(100 * statistics.stdev(medians) / mid, 3)
        for r, m in zip(runs, medians, strict=True):
            within.append(100 * 1.4826 * statistics.median(abs(x - m) for x in r) / m)
    out["reading_sd_pct"] = round(statistics.median(within), 3)
    # what the pairs' count buys: the speedup's sd over the mean of P pairs is this / sqrt(P)
    if len(blocks) > 1:
        ratios = [statistics.median(b.ref[0]) / statistics.median(b.kernel[0]) for b in blocks]
        out["pair_sd_speedup_pct"] = round(100 * statistics.stdev(ratios) / statistics.fmean(ratios), 3)
    pcts = [b.gate[OWN_KEY] for b in blocks if b.gate and OWN_KEY in b.gate]  # one a pair: a process's mode
    if pcts:
        out |= {OWN_KEY: round(statistics.fmean(pcts), 3), f"{OWN_KEY}_widest": max(pcts, key=abs)}
    for key in LEVEL_KEYS:  # the candidate's level over its life, the mean over the pairs
        if seen := [b.gate[key] for b in blocks if b.gate and key in b.gate]:
            out[key] = round(statistics.fmean(seen), 3)
    # how far apart the levels the op's and the kernel's readings are net of sit, pair by pair, in percent
    # of the op's call: the part of the pairs' speedup spread that the two levels' own noise makes
    levelled = [
        b
        for b in blocks
        if b.gate and "own_level_us" in b.gate and "candidate_level_us" in b.gate and b.ref[0]
    ]
    if len(levelled) > 1:
        gaps = [
            100
            * (b.gate["own_level_us"] - b.gate["candidate_level_us"])
            / (1e3 * statistics.median(b.ref[0]))
            for b in levelled
            if b.gate
        ]
        out["pair_sd_level_gap_pct"] = round(statistics.stdev(gaps), 3)
        out |= _other_levels(levelled)
    return out


def _other_levels(blocks: list[Block]) -> dict[str, float]:
    """What the op's speedup and its pairs' spread would be were the kernel's readings net of another level
    (report only: which netting a fix should take, read from the self-check): ``common``, the op's own level
    (from before the import) for both sides; ``lowest``, the lower of the kernel's and the op's. Both use only
    levels read before the import or the one after the kernel's readings (which a submission can only
    lower, raising its own time). ``blocks``: pairs with both levels, at least two."""
    ratios: dict[str, list[float]] = {"common": [], "lowest": []}
    for b in blocks:
        g = b.gate or {}
        size = g.get("calls_per_reading", 1.0)
        ref, kernel = statistics.median(b.ref[0]), statistics.median(b.kernel[0])
        own, cand = g["own_level_us"], g["candidate_level_us"]
        for name, level in (("common", own), ("lowest", min(own, cand))):
            ratios[name].append(ref / (kernel + (cand - level) / 1e3 / size))
    return {
        key: round(value, 4)
        for name, rs in ratios.items()
        for key, value in (
            (f"speedup_{name}_level", statistics.fmean(rs)),
            (f"pair_sd_speedup_{name}_level_pct", 100 * statistics.stdev(rs) / statistics.fmean(rs)),
        )
    }


def _time_block(
    sides: Sides,
    prep: Prepared,
    cases: list[Case],
    sizes: list[int] | None,
    share: int,
    load: Callable[[], None] | None = None,
) -> tuple[Block, list[int]]:
    """One pair's readings: ``1/share`` of each input's, the candidate's first (its process then killed),
    then the op's. ``sizes``: the calls a reading of each input holds (None: chosen now, from the op).
    ``load``: the kernel is not yet imported; the op is first timed in the candidate's process, then
    ``load`` imports the kernel, and the kernel is read against the op's readings from its own process
    (``judging.OWN_BASELINE_ENV``); the reference process still checks every timed output."""
    run, opts = sides.run, prep.req.options
    base: GpuTimer | CpuTimer = run.judge.gpu_timer(run.device) if run.device.type == "cuda" else CpuTimer()
    mps = isinstance(base, GpuTimer) and under_mps()
    if isinstance(base, GpuTimer) and not mps:  # each pair from the initial gate, as each KernelBench job
        base.start_job()
    # under MPS the pair was bound before the kernel was imported (``time_cases``)
    timers: dict[str, Timer] = run.timers if mps else {
        role: base.bind(role, partial(run.ask, role)) for role in ("candidate", "reference")
    }  # fmt: skip
    where = [next(k for k, p in enumerate(prep.perf) if p is c) for c in cases]
    op = [{"overload": str(case.overload)} for case in cases]
    if sizes is None:
        sizes = [1] * len(cases)
        if isinstance(base, GpuTimer):
            sizes = [
                reading_size(run, base, timers, [(list(c.args), c.kwargs)], op[j])[0]
                for j, c in enumerate(cases)
            ]
    # each input its perf_trials calls, shared among the pairs (at least PAIR_MIN_READINGS readings each,
    # on a GPU at least GPU_PAIR_READINGS among the inputs)
    least = max(
        PAIR_MIN_READINGS,
        math.ceil(GPU_PAIR_READINGS / max(len(cases), 1)) if run.device.type == "cuda" else 0,
    )
    counts = [max(math.ceil(reading_count(opts.perf_trials, size) / share), least) for size in sizes]

    def draw() -> list[list[int]]:
        return [[fresh_seed() for _ in range(max(sizes))] for _ in range(max(counts))]

    seeds = draw()

    def warm_up(role: str, as_op: bool = False) -> float:
        """Each input's warm-up readings; the shortest call among them (ms, less the judge's null).
        ``as_op``: the op called, not the side's callable (the reference always calls the op)."""
        shortest = math.inf
        for j, case in enumerate(cases):
            for _ in range(math.ceil(opts.warmup / sizes[j])):
                call = run.calls(role, [(list(case.args), case.kwargs)] * sizes[j], timers[role],
                                 op[j] if role == "reference" or as_op else None, patient=False)  # fmt: skip
                if call.ms is not None:
                    shortest = min(shortest, (call.ms - base.null_ms) / sizes[j])
        return shortest

    def timed(
        role: str, i: int, as_op: bool = False, drawn: list[list[int]] | None = None
    ) -> Iterator[tuple[int, Call]]:
        """Reading ``i`` of each input: its calls on values of their own, fresh from their seeds (``drawn``
        instead of the kernel's and the reference's)."""
        live = [j for j in range(len(cases)) if i < counts[j]]
        fresh = [_rebuild_perf(prep, seed) for seed in (drawn or seeds)[i][: max(sizes[j] for j in live)]]
        for j in live:
            k = where[j]
            sets = [(list(f[k].args), f[k].kwargs) for f in fresh[: sizes[j]]]
            yield j, run.calls(role, sets, timers[role], op[j] if role == "reference" or as_op else None)

    kernel_raw: list[list[float]] = [[] for _ in cases]
    copies: dict[str, list[list[float]]] = {
        role: [[] for _ in cases] for role in ("candidate", "reference", "own")
    }
    outs: list[list[list[Any]]] = [[] for _ in cases]
    host_timed = {"candidate": 0, "reference": 0}  # timed readings that missed the longest gate
    levels: dict[str, float] = {}  # where the candidate's process sat over its life (report only)

    def own_readings() -> tuple[list[list[float]], list[list[float]]]:
        """Every reading of each input, the op called in the candidate's process: the readings and the
        judge's copies of their outputs. Its values are drawn apart from the kernel's: what the op left in
        the process (freed blocks, arenas) holds no output the kernel will be asked for."""
        got: list[list[float]] = [[] for _ in cases]
        copied: list[list[float]] = [[] for _ in cases]
        own_seeds = draw()
        for i in range(len(own_seeds)):
            for j, call in timed("candidate", i, as_op=True, drawn=own_seeds):
                assert call.ms is not None
                got[j].append(call.ms)
                copied[j].append(call.copy_ms)
        return got, copied

    def candidate_level() -> float:
        """The path's level (ms) through the candidate's process now (null calls)."""
        return calibrate(
            run, base, timers["candidate"], [(list(cases[0].args), cases[0].kwargs)], role="candidate"
        )

    own_raw: list[list[float]] = []  # the op in the candidate's process (``load``)
    own_null_ms: float | None = None  # the level they are read against (under MPS)
    if load is not None:
        warm_up("candidate", as_op=True)
        settle, _ = own_readings()  # only brings the process to where the kernel's readings will find it
        own_raw, copies["own"] = own_readings()
        if settle and settle[0]:
            levels[SETTLE_KEY] = pct_apart(own_raw[0], settle[0])
        if mps and run.candidate_null_ms is not None:  # the level after them, before the import
            own_null_ms = own_level(run.candidate_null_ms, candidate_level())
            levels["own_level_us"] = round(own_null_ms * 1e3, 3)
        load()
    warm_up("candidate")
    for i in range(len(seeds)):
        for j, call in timed("candidate", i):
            assert call.ms is not None
            host_timed["candidate"] += call.host_timed
            kernel_raw[j].append(call.ms)
            copies["candidate"][j].append(call.copy_ms)
            outs[j].append(call.out)
    kernel_null: float | None = None  # under MPS: the candidate's own level, its calls read against it
    mode_info: dict[str, float] = {}
    if mps and run.candidate_null_ms is not None:
        after_ms = candidate_level()
        kernel_null = own_level(run.candidate_null_ms, after_ms)
        levels |= {"candidate_null_us": round(run.candidate_null_ms * 1e3, 2),
                   "candidate_after_us": round(after_ms * 1e3, 2)}  # fmt: skip
    run.end_candidate()
    warmed = False  # the reference's warm-up done in the process it is timed in
    # the op timed at the candidate's level, unless every call is long; with an own baseline neither the
    # reference's time nor its copies decide anything, so its process is not moved there (~0.3 s a pair)
    if kernel_null is not None and load is None:
        calls = [
            statistics.median(net(raw, kernel_null, sizes[j])) for j, raw in enumerate(kernel_raw) if raw
        ]
        shortest = min([warm_up("reference"), *calls])
        mode_info = run.reference_at(kernel_null, shortest, sides.build_dir, sides.setup)
        warmed = not mode_info["reference_forks"]
    null_ms = calibrate(run, base, timers["reference"], [(list(cases[0].args), cases[0].kwargs)])
    ref_raw: list[list[float]] = [[] for _ in cases]
    bad: dict[int, str] = {}
    if not warmed:
        warm_up("reference")
    for i in range(len(seeds)):
        for j, call in timed("reference", i):
            assert call.ms is not None
            host_timed["reference"] += call.host_timed
            ref_raw[j].append(call.ms)
            copies["reference"][j].append(call.copy_ms)
            for m, (ref_out, ker_out) in enumerate(zip(call.out, outs[j][i], strict=True)):
                if j not in bad:
                    mismatch, _ = compare(ref_out, ker_out, atol=opts.atol, rtol=opts.rtol)
                    if mismatch is not None:
                        bad[j] = f"timed call {i * sizes[j] + m + 1}: {mismatch.message}"
    ref = [net(ref_raw[j], null_ms, sizes[j]) for j in range(len(cases))]
    kernel_null = null_ms if kernel_null is None else kernel_null
    kernel = [net(kernel_raw[j], kernel_null, sizes[j]) for j in range(len(cases))]
    own_info: dict[str, float] = {}
    if load is not None:  # the op's time from the candidate's process; the reference process's only reported
        # against the level from before the kernel's import: a kernel that lowers the level after it (a
        # *done* before *go*) raises its own time, never the op's (a slow kernel would gain from both rising)
        # and, as the kernel's level is the lower of two (before its import, after its readings), the op's
        # is the lower of two from before the import (before its readings, after them): the lower of two
        # noisy levels sits ~0.4 sd below either: read against one, the op in its own readings read 0.5-1%
        # faster than as the kernel (2x H200, 8 us ops: the smoke self-check's mean 0.99)
        before = own_null_ms if own_null_ms is not None else kernel_null
        own = [net(own_raw[j], before, sizes[j]) for j in range(len(cases))]
        if own and own[0] and ref[0]:
            own_info[OWN_KEY] = pct_apart(own[0], ref[0])
        own_info |= levels
        ref = own
    raised = 0
    if mps:  # work outliving *done* (``judging.copy_bound``), against the op's copies in the process its
        # time came from (with an own baseline, the candidate's, before the import)
        against = copies["own" if load is not None else "reference"]
        for j in range(len(cases)):
            copied = [ms + c for ms, c in zip(kernel_raw[j], copies["candidate"][j], strict=True)]
            ref_copy = statistics.median(against[j]) if against[j] else 0.0
            kernel[j], k = copy_bound(kernel[j], net(copied, kernel_null, sizes[j]), ref_copy)
            raised += k
    try:
        base.check("reference")
    except PrepError as exc:
        raise HarnessError(Outcome.EXECUTION_FAILURE, str(exc)) from exc
    gate = None
    if isinstance(base, GpuTimer):
        gate = {**base.report(), "calls_per_reading": float(max(sizes)),
                "host_timed_readings": float(host_timed["candidate"]),
                "host_timed_reference_readings": float(host_timed["reference"]),
                "copy_bound_readings": float(raised),
                **({"candidate_level_us": round(kernel_null * 1e3, 2), **mode_info} if mps else {}),
                **own_info}  # fmt: skip
    return Block(kernel, ref, bad, gate), sizes
