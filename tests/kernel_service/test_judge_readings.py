"""A timed reading of several calls (issue 16): the side runs each call on its own values and returns
every output, in order; the count per reading follows the call's speed within its caps. Real judge, real
zygote and side process, on the CPU."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from kernel_service.judging import timing, transport
from kernel_service.judging.harness import HarnessError, probe_environment
from kernel_service.judging.judging import Judge, Run
from kernel_service.judging.outputs import unwrap
from kernel_service.judging.placement import LEVEL_MATCH_MS
from kernel_service.judging.readings import (
    COPY_ABS_MS,
    COPY_REL,
    LONE_ABS_MS,
    LONE_NOISE_CAP_MS,
    LONE_NOISE_Z,
    LONE_REL,
    copy_bound,
    host_capped,
    lone_bound,
    lone_level,
    lone_noise,
    lone_ratio,
    net,
    own_level,
)
from kernel_service.judging.sandbox import HardenPolicy
from kernel_service.judging.schemas import Outcome, TimingStats
from kernel_service.judging.timing import CpuTimer, calls_per_reading
from kernel_service.kernelbench.speedup import _pooled

KERNELS = """
import torch

def double(x, *, shift=0.0):
    return x * 2 + shift

_first = []

def stale(x, *, shift=0.0):
    if not _first:
        _first.append(x * 2 + shift)
    return _first[0]

def scale_in_place(x, *, shift=0.0):
    return x.mul_(2)

def truncate(x, *, shift=0.0):
    import kernel_service.workers.candidate as side  # the side's own runtime: a submission may rewrite it
    side._each = lambda fns, sets: [fns[0](*sets[0][0], **sets[0][1])]
    return x * 2 + shift
"""


def test_calls_per_reading_fills_the_target_within_its_caps() -> None:
    target = timing.READING_TARGET_MS
    assert calls_per_reading(target, 1 << 10, 2, 4096) == 1  # a long call: one a reading
    assert calls_per_reading(target / 10, 1 << 10, 2, 4096) == 10
    assert calls_per_reading(target / 10.5, 1 << 10, 2, 4096) == 11  # rounded up: never short of the target
    assert calls_per_reading(0.0, 1 << 10, 2, 4096) == timing.MAX_CALLS_PER_READING  # too short to tell
    assert calls_per_reading(-1.0, 1 << 10, 2, 4096) == timing.MAX_CALLS_PER_READING
    assert calls_per_reading(1e-6, timing.READING_BYTES // 3, 2, 4096) == 3  # bytes
    assert calls_per_reading(1e-6, 1 << 10, 98, 4096) == 40  # the values one reply may name
    assert calls_per_reading(1e-6, timing.READING_BYTES * 2, 2, 4096) == 1  # never below one call


def test_under_the_services_mps_every_reading_is_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/ks-mps-pipe")
    assert timing.under_mps()
    assert calls_per_reading(0.0, 1 << 10, 2, 4096) == 1
    assert calls_per_reading(timing.READING_TARGET_MS / 10, 1 << 10, 2, 4096) == 1
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    assert not timing.under_mps() and calls_per_reading(0.0, 1 << 10, 2, 4096) > 1


def test_copy_bound_raises_a_call_whose_output_copy_waited_for_hidden_work() -> None:
    # honest: the candidate's copies take what the reference's take, so its times stand
    honest, raised = copy_bound([0.050, 0.051], [0.055, 0.057], 0.005)
    assert honest == [0.050, 0.051] and raised == 0
    # hidden work: done at once (1 us), the copy queued behind 27 us of work on another stream
    hidden, raised = copy_bound([0.001, 0.001], [0.033, 0.032], 0.005)
    slack = 0.005 * (1 + COPY_REL) + COPY_ABS_MS
    assert hidden == pytest.approx([0.033 - slack, 0.032 - slack]) and raised == 2


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    """One judge, hence one zygote, for the module, as an eval worker keeps one across its jobs."""
    root = tmp_path_factory.mktemp("judge")
    judge = Judge(probe_environment(), HardenPolicy(writable=[root]), root)
    try:
        yield judge
    finally:
        judge.close()


@pytest.fixture()
def run(judge: Judge) -> Iterator[Run]:
    """A job of its own per test: a fresh candidate side forked from the module's zygote."""
    job = Path(tempfile.mkdtemp(prefix="job-", dir=judge.tmp))
    run = Run(judge, job / "job", torch.device("cpu"), timeout_s=120)
    build = job / "build"
    build.mkdir()
    try:
        run.fork("candidate", str(build))
        assert run.ask("candidate", {"op": "setup", "device": "cpu", "build_dir": str(build)})["ok"]
        yield run
    finally:
        run.close()


def load(run: Run, function: str) -> None:
    reply = run.ask("candidate", {"op": "load_fn", "source": KERNELS, "function": function})
    assert reply["ok"], reply


def sets(n: int) -> list[tuple[list[torch.Tensor], dict[str, float]]]:
    return [([torch.randn(64, 8)], {"shift": float(k)}) for k in range(n)]


def test_a_reading_runs_each_call_on_its_own_values_in_order(run: Run) -> None:
    load(run, "double")
    values = sets(7)
    call = run.calls("candidate", values, CpuTimer())
    assert call.ms is not None and call.ms > 0
    assert isinstance(call.out, list) and len(call.out) == 7
    for (args, kwargs), out in zip(values, call.out, strict=True):
        torch.testing.assert_close(out, args[0] * 2 + kwargs["shift"])
    # the same side answers a one-call reading, and a plain call, after it
    assert len(run.calls("candidate", values[:1], CpuTimer()).out) == 1
    plain = run.call("candidate", values[0][0], kwargs=values[0][1]).out  # a view of the side's answer
    torch.testing.assert_close(unwrap(plain), values[0][0][0] * 2)


def test_an_output_reused_across_a_readings_calls_is_visible_to_the_judge(run: Run) -> None:
    load(run, "stale")
    values = sets(4)
    call = run.calls("candidate", values, CpuTimer())
    torch.testing.assert_close(call.out[0], values[0][0][0] * 2)
    for (args, kwargs), out in zip(values[1:], call.out[1:], strict=True):
        assert not torch.allclose(out, args[0] * 2 + kwargs["shift"])


def test_a_reading_answered_with_too_few_outputs_is_refused(run: Run) -> None:
    load(run, "truncate")
    values = sets(3)
    run.call("candidate", values[0][0], kwargs=values[0][1])  # rewrites the side's loop over a reading
    with pytest.raises(HarnessError) as refused:
        run.calls("candidate", values, CpuTimer())
    assert refused.value.outcome == Outcome.EXECUTION_FAILURE
    assert "a reading of 3 calls was answered with 1 outputs" in refused.value.message


def test_a_reading_drawn_into_the_arena_gives_the_outputs_of_the_values_drawn(run: Run) -> None:
    load(run, "double")

    def draw() -> list[tuple[list[torch.Tensor], dict[str, float]]]:
        torch.manual_seed(11)
        return [([torch.rand(64, 8)], {"shift": float(k)}) for k in range(5)]

    expected = draw()
    nbytes = sum(transport.layout_bytes(s) for s in expected)
    call = run.drawn("candidate", draw, 5, nbytes, CpuTimer())
    assert isinstance(call.out, list) and len(call.out) == 5
    for (args, kwargs), out in zip(expected, call.out, strict=True):
        torch.testing.assert_close(out, args[0] * 2 + kwargs["shift"])
    inputs = call.inputs_after()  # the side read them where they were drawn
    torch.testing.assert_close(inputs[4][0][0], expected[4][0][0])


def test_a_far_faster_candidate_gets_more_calls_a_reading_within_its_caps() -> None:
    from kernel_service.judging.readings import MIN_READINGS, candidate_reading_size

    assert candidate_reading_size(2, 1.4, 256, 100) == 2  # as fast as the reference: its count
    assert candidate_reading_size(2, 5.0, 256, 100) == 2  # slower: never fewer calls
    assert candidate_reading_size(2, 0.06, 256, 100) == 2 * 100 // MIN_READINGS  # replays bounded
    assert candidate_reading_size(2, 0.5, 256, 100) == 4  # the reading target
    assert candidate_reading_size(2, 0.06, 3, 100) == 3  # bytes / values
    assert candidate_reading_size(5, 0.0, 256, 100) == 20  # too short to tell
    assert candidate_reading_size(40, 0.001, 256, 100) == 40


def test_inputs_kept_after_a_call_are_a_copy_that_keeps_strides_and_later_calls_cannot_change(
    run: Run,
) -> None:
    load(run, "scale_in_place")
    base = torch.arange(12.0).reshape(3, 4)
    x = base.t()  # non-contiguous: the copy keeps the strides
    call = run.call("candidate", [x])
    kept = call.inputs_kept()
    assert kept[0][0].stride() == x.stride()
    torch.testing.assert_close(kept[0][0], x * 2)  # as the side left it
    run.call("candidate", [torch.full((4, 3), 5.0)])  # the same arena, written and scaled again
    torch.testing.assert_close(kept[0][0], x * 2)
    torch.testing.assert_close(call.inputs_after()[0][0], torch.full((4, 3), 10.0))  # views are not kept


def test_a_sides_readings_end_once_their_median_is_precise() -> None:
    """GPU timing stops a side's readings once the median's standard error is within the asked share of
    the time measured (never before PRECISE_MIN_READINGS); a noisy side, or a slow odd reading among
    steady ones, is handled as it should be."""
    import random

    from kernel_service.judging.readings import PRECISE_MIN_READINGS, precise

    rng = random.Random(7)
    steady = [10.0 + rng.gauss(0, 0.02) for _ in range(PRECISE_MIN_READINGS)]  # 0.2% spread
    assert precise(steady, 0.0, 0.0025)
    assert not precise(steady[:-1], 0.0, 0.0025)  # too few readings, however steady
    assert not precise(steady, 0.0, 0.0)  # 0: always every trial
    noisy = [10.0 + rng.gauss(0, 0.5) for _ in range(100)]  # 5% spread: 0.6% standard error at 100
    assert not precise(noisy, 0.0, 0.0025)
    assert precise(noisy, 0.0, 0.01)
    # the path's cost is not part of the time measured: 0.3 ms of it around a 0.05 ms kernel
    short = [0.35 + rng.gauss(0, 0.001) for _ in range(PRECISE_MIN_READINGS)]
    assert precise(short, 0.0, 0.0025) and not precise(short, 0.3, 0.0025)
    # a few far-off readings (a host pause) do not stop a steady side from being precise
    assert precise(steady + [50.0, 80.0], 0.0, 0.0025)


def test_a_readings_calls_are_cut_to_what_the_host_can_do_inside_the_gate() -> None:
    """Issue 30: 256 calls of a 1x128 add took 47-65 ms of host work a reading on a busy H100 host."""
    assert host_capped(256, 50_000.0, 256) == int(timing.READING_HOST_US // (50_000.0 / 256))
    assert host_capped(256, 50_000.0, 256) < 256
    assert host_capped(64, 3_000.0, 64) == 64  # quick host work: the count stands
    assert host_capped(256, 3_000.0, 8) == int(timing.READING_HOST_US // (3_000.0 / 8))  # measured at 8
    assert host_capped(16, 10_000_000.0, 16) == 1  # never below one call
    assert host_capped(16, 0.0, 16) == 16


def test_lone_calls_bound_the_candidates_per_call_time_by_the_references_ratio() -> None:
    """Issue 30: a lone call of an honest 4-layer MLP read 61 us, 35 us a call at 33 a reading (H100).
    Lone readings come each less the path's level beside it."""
    ratio = lone_ratio([0.035, 0.036, 0.034], [0.061, 0.060, 0.062])
    assert ratio is not None and abs(ratio - 0.035 / 0.061) < 1e-9
    lone = [0.060, 0.061, 0.062]  # the candidate's lone calls
    honest = [0.035, 0.0355, 0.0345]
    kept, info = lone_bound(honest, lone, ratio)
    assert kept == honest and info["lone_bound"] == 0.0
    batched = [0.009, 0.0095, 0.0085]  # the set batched into one call: ~4x faster a call in the readings
    raised, info = lone_bound(batched, lone, ratio)
    floor = 0.061 * ratio * (1 - LONE_REL) - LONE_ABS_MS
    assert info["lone_bound"] == 1.0
    assert abs(sorted(raised)[1] - floor) < 1e-9  # the median raised to the floor, the spread kept
    assert 0.035 / sorted(raised)[1] <= 1.1  # what batching gains against the honest side (issue 30's bound)
    tiny, info = lone_bound([0.00226], [0.0033], 1.0)  # a 2 us add: noise, not a floor
    assert tiny == [0.00226] and info["lone_bound"] == 0.0
    assert lone_bound(batched, [], ratio) == (batched, {})  # no lone readings: nothing to bound with
    assert lone_bound(batched, lone, None) == (batched, {})  # no reference ratio (one call a reading)
    assert lone_ratio([0.01], []) is None


def test_each_sides_lone_calls_are_read_against_its_own_processs_level() -> None:
    """On one H100 the MLP's lone readings came to ~345 us raw in some processes and ~352 us in others
    (the reference at 352 and a streams cheat at 344: 1.20x read against one level for both). Each side
    read against its own process's level reads the same code alike."""
    ref_pc = 0.035  # the reference's per-call time in readings of several calls
    overlapped = [0.018] * 5  # the candidate's calls overlapped on streams

    def gain(cand_raw: float, cand_level: float, ref_raw: float, ref_level: float) -> float:
        ratio = lone_ratio([ref_pc], [ref_raw - ref_level])
        kept, _ = lone_bound(overlapped, [cand_raw - cand_level], ratio)
        return ref_pc / kept[0]

    assert gain(0.344, 0.2845, 0.352, 0.2845) > 1.15  # one level for both: the mode gap is the cheat's
    assert gain(0.344, 0.2845, 0.352, 0.2925) <= 1.1  # each its own: within the 1.1x
    assert gain(0.344, 0.2845, 0.344, 0.2845) == pytest.approx(gain(0.344, 0.2925, 0.344, 0.2925))


def test_under_mps_the_candidate_is_read_against_its_own_process_level() -> None:
    """Under MPS the hop sits at ~6.6 or ~10.9 us by process: a 57 us call read against the other
    process's level is off by 8%. The level from before the submission loaded bounds the one after it,
    which the submission can only lower (raising its own time)."""
    assert own_level(0.0066, 0.0067) == 0.0066  # its own level, not the reference's
    assert own_level(0.0109, 0.0108) == 0.0108
    assert own_level(0.0066, 0.0500) == 0.0066  # slowed null calls after the load gain nothing
    assert own_level(0.0109, 0.0010) == 0.0010  # a done before go only lowers it
    assert own_level(0.0066, 0.0) == 0.0066  # no null calls after: the level from before
    raw = 0.057 + 0.0066  # a 57 us call through a process at the lower level
    assert net([raw], own_level(0.0066, 0.0066))[0] == pytest.approx(0.057)
    assert net([raw], 0.0109)[0] < 0.057 * 0.93  # against the reference's level: 8% faster than it is


def test_lone_calls_are_read_against_their_own_process_level_capped_by_the_trusted_nulls() -> None:
    """The candidate's null calls after its lone ones decide the level only downwards: slowing them (to
    have more subtracted from its lone calls) is capped by the trusted nulls; a null read low only
    raises the candidate's own floor."""
    assert lone_level(0.291, 0.283, 0.0) == 0.291  # no null calls beside the lone ones: the higher trusted
    assert lone_level(0.291, 0.283, 0.284) == 0.284  # the process sits at the lower level now
    assert lone_level(0.291, 0.283, 0.900) == 0.291  # slowed null calls gain nothing past the cap
    assert lone_level(0.291, None, 0.295) == 0.291
    null = 0.291
    lone_raw = [null - 0.007 + 0.035] * 10  # lone calls of ~35 us at a level 7 us under the reference's
    honest = [0.035] * 5
    batched = [0.004] * 5
    ratio = 1.0

    def read(beside: float) -> list[float]:
        return [ms - lone_level(null, 0.283, beside) for ms in lone_raw]

    capped, _ = lone_bound(batched, read(0.0), ratio)
    own, _ = lone_bound(batched, read(null - 0.007), ratio)
    assert 0.035 / capped[0] > 1.2  # read against the higher level, batching would gain over 1.2x
    assert 0.035 / own[0] <= 1.1  # against its own level, within the 1.1x
    assert lone_bound(honest, read(null - 0.007), ratio)[0] == honest


def test_the_lone_floor_allows_for_its_own_error_but_no_more_than_its_cap() -> None:
    """A 3 us op against itself read 0.81x on the H100 with the floor binding on noise: its lone calls,
    each less the level beside it, spread by about the call itself. The floor moves down by twice its
    standard error, never more than ``LONE_NOISE_CAP_MS`` (what lone calls made to vary on purpose gain)."""
    steady = [0.0046 + 0.0001 * (i % 3) for i in range(10)]  # lone calls less their level: 4.6-4.8 us
    noisy = [0.0046 + 0.0025 * (-1) ** i for i in range(10)]  # the same median, +-2.5 us
    ref_lone = [0.095 + 0.0005 * (i % 2) for i in range(10)]  # the reference's, each less its level
    assert lone_noise(steady, 1.0, ref_lone) < lone_noise(noisy, 1.0, ref_lone)
    assert lone_noise([], 1.0, ref_lone) == 0.0 and lone_noise(noisy, None, ref_lone) == 0.0
    several = [0.0025] * 5  # 2.5 us a call in the readings
    _, tight = lone_bound(several, noisy, 1.0)
    assert tight["lone_bound"] == 1.0  # without its error the floor binds
    noise = lone_noise(noisy, 1.0, ref_lone)
    kept, loose = lone_bound(several, noisy, 1.0, noise)
    assert kept == several and loose["lone_bound"] == 0.0
    assert loose["lone_slack_us"] == round(min(LONE_NOISE_Z * noise, LONE_NOISE_CAP_MS) * 1e3, 3)
    wild = [0.0046 + 0.050 * (-1) ** i for i in range(10)]  # lone calls made to vary by 50 us
    _, capped = lone_bound([0.0005] * 5, wild, 1.0, lone_noise(wild, 1.0, ref_lone))
    assert capped["lone_slack_us"] == LONE_NOISE_CAP_MS * 1e3 and capped["lone_bound"] == 1.0


def _timing(ref: list[float], new: list[float], degraded: str | None = None) -> dict[str, Any]:
    return {"ref": TimingStats.of(ref), "new": TimingStats.of(new), "gate": {"null_us": 6.5}, "mismatch": None,
            "degraded": degraded, "method": "events", "ref_cached": False}  # fmt: skip


def test_pooled_pairs_read_each_side_as_the_mean_of_the_pairs_medians() -> None:
    """Several process pairs (under MPS, a call under 10 us): each side's median is the mean of the pairs'
    medians (a pooled median would jump between the processes' offsets), the rest over every reading."""
    first = _timing([0.0040, 0.0041, 0.0042], [0.0035, 0.0036, 0.0037])
    second = _timing([0.0036, 0.0037, 0.0038, 0.0039], [0.0039, 0.0040, 0.0041, 0.0042], degraded="host time")
    assert _pooled([first]) is first  # one pair: as it was
    got = _pooled([first, second])
    for side, values in (("ref", [0.0040, 0.0041, 0.0042, 0.0036, 0.0037, 0.0038, 0.0039]),
                         ("new", [0.0035, 0.0036, 0.0037, 0.0039, 0.0040, 0.0041, 0.0042])):  # fmt: skip
        stats = got[side]
        assert stats.median == pytest.approx(statistics.fmean([first[side].median, second[side].median]))
        assert stats.median != pytest.approx(statistics.median(values))  # not the pooled median
        assert stats.n == 7 and stats.min == min(values) and stats.max == max(values)
        assert stats.mean == pytest.approx(statistics.fmean(values))
        assert stats.std == pytest.approx(statistics.stdev(values))
    assert got["gate"]["process_pairs"] == 2 and got["gate"]["null_us"] == 6.5
    assert got["gate"]["pair_sd_new_pct"] > 0 and got["gate"]["pair_sd_ref_pct"] > 0
    speedups = [t["ref"].median / t["new"].median for t in (first, second)]
    assert got["gate"]["pair_sd_speedup_pct"] == pytest.approx(
        100 * statistics.stdev(speedups) / statistics.fmean(speedups), abs=1e-3
    )
    assert got["degraded"] == "host time"  # any pair's host time marks the whole
    assert "2 fresh pairs" in got["method"]


@pytest.fixture()
def paired(judge: Judge) -> Iterator[Run]:
    """A job whose two sides are started by :meth:`Run.start_pair`, both loading ``double``."""
    job = Path(tempfile.mkdtemp(prefix="job-", dir=judge.tmp))
    run = Run(judge, job / "job", torch.device("cpu"), timeout_s=120)
    build = job / "build"
    build.mkdir()
    load = {"op": "load_fn", "source": KERNELS, "function": "double"}
    run.spawn = {"build_dir": str(build), "setup": {"op": "setup", "device": "cpu", "build_dir": str(build)},
                 "load": {"reference": load, "candidate": load}}  # fmt: skip
    try:
        run.start_pair()
        yield run
    finally:
        run.close()


def test_a_new_pair_forks_both_sides_afresh_and_loads_them(paired: Run) -> None:
    run = paired
    first = dict(run.sides)
    run.start_pair()
    assert all(not side.alive for side in first.values())  # the old pair is gone
    assert {r: s.pid for r, s in run.sides.items()}.keys() == {"reference", "candidate"}
    assert all(run.sides[r].pid != first[r].pid for r in first)
    out = run.call("candidate", [torch.ones(4)]).out
    assert torch.equal(unwrap(out), torch.full((4,), 2.0))  # loaded as the first pair was
    load = run.spawn["load"]["candidate"]
    run.spawn["load"] = {"reference": load, "candidate": {**load, "function": "absent"}}
    with pytest.raises(HarnessError, match="defines no function `absent`"):
        run.start_pair()  # a side that refuses its load is that side's error


def test_long_calls_keep_the_reference_where_it_is(paired: Run) -> None:
    """Under MPS, where both sides' calls take ``LEVEL_MATCH_MS`` or more, the reference is timed in its
    first process: the two path levels move such a call by at most 0.4%, and forking it to the candidate's
    took 0.65 s a level-1 job. (Shorter calls fork, which needs a GPU: the GPU tests.)"""
    run, spawn = paired, paired.spawn
    reference = run.sides["reference"]
    run.end_candidate()
    info = run.reference_at(
        0.0066, LEVEL_MATCH_MS, spawn["build_dir"], spawn["setup"], spawn["load"]["reference"]
    )
    assert info["reference_forks"] == 0.0
    assert run.sides["reference"] is reference and reference.alive and run.companion is None
    out = run.call("reference", [torch.ones(4)]).out  # the first process still answers
    assert torch.equal(unwrap(out), torch.full((4,), 2.0))


def test_an_own_baseline_pair_runs_the_reference_in_the_candidates_process_until_the_submission_loads(
    paired: Run,
) -> None:
    """``OWN_BASELINE_ENV``: the candidate's new process first holds the reference's model, which is timed
    there before any submitted code is in it; :meth:`Run.load_candidate` then loads the submission in the
    same process, in its place."""
    run = paired
    load = run.spawn["load"]["reference"]
    run.spawn["load"] = {"reference": load, "candidate": {**load, "function": "stale"}}
    run.start_pair(own=True)
    pid = run.sides["candidate"].pid
    for k in (3.0, 5.0):  # the reference's ``double``, not the submission's ``stale``
        assert torch.equal(unwrap(run.call("candidate", [torch.full((4,), k)]).out), torch.full((4,), 2 * k))
    run.load_candidate()
    assert run.sides["candidate"].pid == pid  # the same process, now holding the submission
    first = unwrap(run.call("candidate", [torch.ones(4)]).out)
    again = unwrap(run.call("candidate", [torch.full((4,), 5.0)]).out)
    assert torch.equal(first, torch.full((4,), 2.0)) and torch.equal(again, first)  # ``stale``'s answer
    assert torch.equal(unwrap(run.call("reference", [torch.full((4,), 5.0)]).out), torch.full((4,), 10.0))


def test_an_own_baseline_keeps_the_second_set_of_the_references_readings_each_on_fresh_seeds() -> None:
    """The reference's readings in the candidate's process (:func:`judge._own_readings`): a warm-up, a set
    that only settles the process, then the kept set; every reading on a seed of its own."""
    from kernel_service.judging.outputs import Call
    from kernel_service.judging.readings import SETTLE_KEY
    from kernel_service.judging.schemas import EvalOptions
    from kernel_service.kernelbench.speedup import _own_readings

    asked: list[tuple[str, Any]] = []
    times = iter([0.020 + 0.001 * i for i in range(1000)])  # each reading slower than the last

    def reading(role: str, seeds: list[int]) -> Call:
        asked.append((role, tuple(seeds)))
        return Call(next(times), None, {}, None, None, copy_ms=0.002)  # type: ignore[arg-type]

    def warm(role: str, calls: int) -> tuple[list[float], list[float]]:
        asked.append((role, "warm"))
        return [], []

    job = type("Job", (), {"options": EvalOptions(perf_trials=10, timeout_s=60)})()
    kept, copies, info = _own_readings(job, reading, warm, 1, 0.0, 0.0, float("inf"))  # type: ignore[arg-type]
    assert asked[0] == ("candidate", "warm") and all(role == "candidate" for role, _ in asked)
    seeds = [s for _, s in asked[1:]]
    assert len(seeds) == 20 and len(set(seeds)) == 20  # two sets of ten, no seed twice
    assert [ms for ms, _ in kept] == pytest.approx([0.030 + 0.001 * i for i in range(10)])  # the second set
    assert copies == [0.002] * 10 and {calls for _, calls in kept} == {1}
    assert info[SETTLE_KEY] == pytest.approx(100 * (0.0345 / 0.0245 - 1), abs=1e-3)
    assert info["own_host_timed_readings"] == 0.0


@pytest.mark.parametrize(
    ("call_ms", "own", "timed", "pairs", "speedup"),
    [
        (0.004, True, [False, True] + [True] * 7, 8, 1.0),  # short: re-timed in eight own pairs
        (0.5, True, [False, True], 1, 1.0),  # under LEVEL_MATCH_MS: re-timed in one own pair
        (2.0, True, [False], 1, 1.0),  # long: the first timing stands, as without the switch
        (0.004, False, [False] * 8, 8, 1.0),  # no switch: the pairs as before
        (0.004, True, [False, True], 1, 4.0),  # 4x: no process offset decides fast_p there
        (0.004, True, [False, True], 1, 0.25),  # nor at 0.25x
        (0.004, True, [False, True] + [True] * 7, 8, 2.5),  # 2.5x: fast_2 may turn on the pairs
    ],
)
def test_under_mps_an_own_baseline_retimes_calls_under_the_level_match_in_fresh_own_pairs(
    monkeypatch: pytest.MonkeyPatch, call_ms: float, own: bool, timed: list[bool], pairs: int, speedup: float
) -> None:
    """:func:`judge._pairs` with ``OWN_BASELINE_ENV``: the first timing (in the pair that ran the checks)
    only tells how long the calls are; where either side's is under ``LEVEL_MATCH_MS`` every timing that
    counts is taken in a fresh pair whose candidate process timed the reference first."""
    from kernel_service.kernelbench import speedup as kb

    monkeypatch.setattr(kb, "under_mps", lambda: True)
    started: list[bool] = []
    asked: list[bool] = []
    run = type(
        "FakeRun",
        (),
        {"device": torch.device("cuda"), "start_pair": lambda self, own=False: started.append(own)},
    )()
    job = type("Job", (), {"options": type("Opts", (), {"timeout_s": 600})()})()

    def time_pair(own_pair: bool) -> dict[str, Any]:
        asked.append(own_pair)
        ms, new = call_ms, call_ms / speedup
        return _timing([ms, ms * 1.01, ms * 0.99], [new, new * 1.02, new * 0.98])

    got = kb._pairs(run, job, time_pair, time.perf_counter(), own)  # type: ignore[arg-type]
    assert asked == timed
    assert started == timed[1:]  # a fresh pair before every timing after the first, own where it counts
    assert got["gate"].get("process_pairs", 1.0) == pairs
    # what a further pair cost, started and timed (the corpus's short calls spend ~10 s a job on them)
    assert ("pair_start_s" in got["gate"] and "pair_time_s" in got["gate"]) == (pairs > 1), got["gate"]


SLOW_DOUBLE = """
import time

def slow_double(x, *, shift=0.0):
    time.sleep(0.01)
    return x * 2 + shift
"""


@pytest.mark.parametrize("candidate", ["slow_double", "stale"])
def test_an_own_baseline_reads_the_candidate_against_the_reference_timed_in_its_process_first(
    paired: Run, monkeypatch: pytest.MonkeyPatch, candidate: str
) -> None:
    """:func:`judge._time` with ``own`` (the GPU path; here on the CPU's timer through real side
    processes): the reference's function is timed in the candidate's process before the submission is
    loaded there, and its time is the one the candidate is read against; the reference's process still
    replays every seed the candidate was timed on, so a candidate wrong only there is caught."""
    from kernel_service.judging.harness import Job
    from kernel_service.judging.schemas import EvalOptions
    from kernel_service.kernelbench.speedup import _time, output_differs

    run = paired
    reference = run.spawn["load"]["reference"]
    source = SLOW_DOUBLE if candidate == "slow_double" else KERNELS
    run.spawn["load"] = {
        "reference": reference,
        "candidate": {**reference, "source": source, "function": candidate},
    }
    run.start_pair(own=True)
    asked: list[tuple[str, str, float | None]] = []  # (role, what, ms)
    calls, ask = Run.calls, Run.ask

    def spy_calls(
        self: Run, role: str, sets: Any, timer: Any, extra: Any = None, patient: bool = True
    ) -> Any:
        call = calls(self, role, sets, timer, extra, patient)
        asked.append((role, "call", call.ms if patient else None))
        return call

    def spy_ask(self: Run, role: str, msg: dict[str, Any], fd: int | None = None) -> Any:
        if msg.get("op") == "load_fn":
            asked.append((role, "load", None))
        return ask(self, role, msg, fd)

    monkeypatch.setattr(Run, "calls", spy_calls)
    monkeypatch.setattr(Run, "ask", spy_ask)
    job = Job(
        "j", "", "", "torch", EvalOptions(perf_trials=6, warmup=1, timeout_s=120), run.spawn["build_dir"]
    )

    def get_inputs(seed: int) -> list[Any]:
        return [torch.randn(64, generator=torch.Generator().manual_seed(seed))]

    differs = partial(output_differs, atol=1e-5, rtol=1e-5)
    got = _time(run, job, get_inputs, differs, time.perf_counter(), own=True)
    load = asked.index(("candidate", "load", None))
    before = [ms for role, what, ms in asked[:load] if role == "candidate" and ms is not None]
    after = [role for role, what, _ in asked[load:] if what == "call"]
    assert before and "candidate" in after and "reference" in after  # the reference process replays
    assert all(role == "candidate" for role, _, _ in asked[:load])  # nothing of the reference's yet
    if candidate == "stale":
        assert got["mismatch"] is not None  # its timed outputs are its first, whatever the values
        return
    assert got["mismatch"] is None
    kept = before[len(before) // 2 :]  # the settling set, then the kept one
    assert got["ref"].median == pytest.approx(statistics.median(kept))
    assert got["new"].median > got["ref"].median + 0.005  # the candidate sleeps 10 ms a call
