"""The calls of one timed reading (issue 30), on a GPU through the real service: a submission that sees a
reading's calls as a set (overlapping them on streams, batching them into one call, finding them in its
caller's frames, deferring their work past its *done*, sharing work between them) must end ``incorrect``,
or ``correct`` with no gain: at most 1.1x the honest rewrite's speedup, read in the same run.

The reference is latency-bound (four 1024-wide linear layers on a batch of 16: tens of microseconds a
call), so the judge times it many calls a reading. BackendBench's relu gets the batching trick too.
Run: ``pytest -m gpu tests/adversarial/test_adv_reading_calls_gpu.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kernel_service.service import KernelService, KernelServiceConfig

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

pytestmark = pytest.mark.gpu

CASES = Path(__file__).parent / "reading_cases"
OPTS = {
    "correctness_trials": 3,
    "perf_trials": 100,
    "warmup": 10,
    "timeout_s": 120,
    "use_result_cache": False,
}
CHEATS = ["streams_per_call", "batch_calls", "batch_through_frames", "defer_past_done", "reuse_across_calls"]
#: Issue 30's bound: a cheat reads at most 1.1x the honest rewrite's speedup. Without MPS the lone calls
#: bound these cases (``judging.lone_bound``), each lone reading read against the path's level beside it
#: (``judging.lone_level``). The level switches between two modes ~8 us apart by process and by moment,
#: so a cheat whose process sits in the lower mode can still read up to ~1.2x (BENCHMARKS.md, "The calls
#: of one reading").
NO_GAIN = 1.1


def _judge_gain(got: float, honest: float, what: str) -> None:
    assert got <= NO_GAIN * honest, (what, got, honest, f"{got / honest:.3f}x")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> KernelService:
    """The service's default config: under MPS where the host runs it (``KS_MPS=off``: the same cases
    without, several calls a reading)."""
    return KernelService(KernelServiceConfig(gpus=None, work_dir=tmp_path_factory.mktemp("ks-reading")))


@pytest.fixture(scope="module")
def server(service: KernelService) -> Iterator[RunningServer]:
    with start_server(make_app(service), startup_timeout=300) as running:
        yield running


@pytest.fixture(scope="module")
def mps(server: RunningServer, service: KernelService) -> bool:
    """Whether the started service times under its MPS daemon."""
    return service.mps_running


def _evaluate(url: str, solution: str, reference: str = "ref_latency.py", **options: object) -> dict:
    body = {
        "reference": (CASES / reference).read_text(),
        "solution": solution,
        "options": {**OPTS, **options},
    }
    answer = httpx.post(f"{url}/v1/evaluate", json=body, timeout=600)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture(scope="module")
def honest(server: RunningServer, mps: bool) -> dict:
    got = _evaluate(server.url, (CASES / "honest.py").read_text())
    assert got["outcome"] == "correct", got.get("message")
    if not mps:
        assert got["timing_gate"]["calls_per_reading"] > 1  # the premise: several calls a reading
    return got


@pytest.mark.parametrize("case", CHEATS)
def test_a_reading_seen_as_a_set_gains_nothing(server: RunningServer, honest: dict, case: str) -> None:
    got = _evaluate(server.url, (CASES / f"{case}.py").read_text())
    print(case, got["outcome"], got.get("speedup"), "honest", honest["speedup"], got.get("timing_gate"))
    # the bound is relative: a low honest reading fails it too
    print("honest's gate", honest.get("timing_gate"))
    if got["outcome"] == "correct":
        _judge_gain(got["speedup"], honest["speedup"], case)
    else:
        assert got["outcome"] in ("incorrect", "execution_failure"), got.get("message")


def test_a_cached_reference_timing_keeps_the_floor(server: RunningServer, honest: dict, mps: bool) -> None:
    """With ``reuse_reference_timing`` the reference's readings are not taken again, but its lone readings
    are: without its ratio the candidate's calls would have no floor (the streams case read 2.3x)."""
    got = _evaluate(server.url, (CASES / "streams_per_call.py").read_text(), reuse_reference_timing=True)
    print("streams, cached reference", got["outcome"], got.get("speedup"), got.get("timing_gate"))
    assert got["outcome"] == "correct", got.get("message")
    if not mps:  # under MPS the reference is timed every time
        assert got["ref_timing_cached"] is True  # the honest run filled the cache
        assert got["timing_gate"]["reference_ratio"] > 0
    _judge_gain(got["speedup"], honest["speedup"], "streams, cached reference")


def test_a_fused_rewrite_batched_across_a_reading(server: RunningServer, mps: bool) -> None:
    """The lone floor's known gap (docs/integrity.md): it scales the candidate's lone time by the
    *reference's* several-to-lone ratio. Here the reference is 48 tiny launches, whose lone calls pay the
    GPU's first-kernels cost many times, and the candidate is the honest two-launch fusion of it that also
    batches each reading's calls into one launch: its lone calls pay that cost twice, so the reference's
    ratio scales them below its honest time. On the H100 it read 1.11x, 1.14x, 1.66x and 5.1x the honest
    fusion in four runs (a lone reading of a ~5 us call moves by about the call itself), so it is not closed
    without MPS: above 1.1x the test reports an expected failure with its figures; under MPS (the default
    where the host runs it) 1.1x is a hard bound."""
    honest = _evaluate(server.url, (CASES / "fused_honest.py").read_text(), "ref_many_kernels.py")
    assert honest["outcome"] == "correct", honest.get("message")
    got = _evaluate(server.url, (CASES / "fused_batched.py").read_text(), "ref_many_kernels.py")
    print("fused_batched", got["outcome"], got.get("speedup"), "honest", honest["speedup"])
    print("  honest gate", honest.get("timing_gate"))
    print("  cheat gate", got.get("timing_gate"))
    if got["outcome"] != "correct":
        assert got["outcome"] in ("incorrect", "execution_failure"), got.get("message")
        return
    if got["speedup"] > NO_GAIN * honest["speedup"] and not mps:
        pytest.xfail(
            f"the lone floor's ratio gap: {got['speedup']:.3f} against the honest {honest['speedup']:.3f}"
        )
    _judge_gain(got["speedup"], honest["speedup"], "fused_batched")  # under MPS: one call a reading


def _evaluate_bb(url: str, source: str) -> dict:
    body = {
        "kind": "backendbench",
        "dataset": "backendbench-smoke",
        "op": "relu",
        "suite": "smoke",
        "source": source,
        "options": {"device": "cuda", "detect_original_op": False},
    }
    answer = httpx.post(f"{url}/v1/evaluate", json=body, timeout=600)
    assert answer.status_code == 200, answer.text
    return answer.json()["details"]


@pytest.mark.parametrize("case", ["bb_batch_relu", "bb_defer_relu"])
def test_backendbench_a_reading_seen_as_a_set_gains_nothing(server: RunningServer, case: str) -> None:
    """Batching a reading through frames, or leaving the work past *done* on a stream of its own (under
    MPS, with the own baseline, this is the copy bound read against the op's copies in the kernel's own
    process)."""
    honest = _evaluate_bb(server.url, (CASES / "bb_honest_relu.py").read_text())
    assert honest["outcome"] == "correct", honest["feedback"]
    got = _evaluate_bb(server.url, (CASES / f"{case}.py").read_text())
    print("bb", case, got["outcome"], got["performance"], "honest", honest["performance"])
    if got["outcome"] != "correct":
        assert got["outcome"] in ("incorrect", "execution_failure"), got["feedback"]
    else:  # BackendBench has no lone floor (its 6-10 us ops are mostly the path's level): open without MPS
        _judge_gain(got["performance"], honest["performance"], f"BackendBench {case}")
