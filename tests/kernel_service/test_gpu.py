"""GPU tests (H100): real CUDA and Triton kernels through the real service. Run: pytest -m gpu tests/kernel_service."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ks_gpu_sources as G
import pytest
import torch
from kernel_service.kernelbench.schemas import KernelEvalResponse
from kernel_service.kernelbench.speedup import SHORT_PAIRS
from kernel_service.service import KernelService, KernelServiceConfig
from ks_sources import REF_RNN, SOL_RNN

from benchmark_runner.service.app import make_app
from benchmark_runner.service.server import RunningServer, start_server

pytestmark = pytest.mark.gpu

OPTS = {"correctness_trials": 5, "perf_trials": 50, "warmup": 5, "timeout_s": 240}


@pytest.fixture(scope="module")
def gpu_service(tmp_path_factory: pytest.TempPathFactory) -> KernelService:
    """The service's default config (``KS_MPS``, ``KS_OWN_BASELINE``: auto when unset)."""
    return KernelService(KernelServiceConfig(gpus=None, work_dir=tmp_path_factory.mktemp("ks-gpu")))


@pytest.fixture(scope="module")
def gpu_server(gpu_service: KernelService) -> Iterator[RunningServer]:
    with start_server(make_app(gpu_service), startup_timeout=300) as server:
        yield server


def _submit_all(url: str, subs: list[tuple[str, str, dict]]) -> list[KernelEvalResponse]:
    async def run() -> list[KernelEvalResponse]:
        async with httpx.AsyncClient(base_url=url, timeout=900) as ac:
            posts = [
                ac.post(
                    "/v1/evaluate",
                    json={"reference": G.REF_FUSED, "solution": sol, "backend": be, "options": {**OPTS, **o}},
                )
                for sol, be, o in subs
            ]
            answers = await asyncio.gather(*posts)
            for a in answers:
                assert a.status_code == 200, a.text
            return [KernelEvalResponse.model_validate(a.json()) for a in answers]

    return asyncio.run(run())


def _evaluate(url: str, reference: str, solution: str, **options: object) -> KernelEvalResponse:
    """One PyTorch submission, judged alone with ``OPTS`` (``options`` override them)."""
    r = httpx.post(
        f"{url}/v1/evaluate",
        json={
            "reference": reference,
            "solution": solution,
            "backend": "torch",
            "options": {**OPTS, **options},
        },
        timeout=900,
    )
    assert r.status_code == 200, r.text
    return KernelEvalResponse.model_validate(r.json())


def test_gpu_kernels_outcomes_and_recovery(gpu_server: RunningServer) -> None:
    # Submitted together: the six CUDA builds run in parallel on the CPU compile pool.
    ok, tri, wrong, oob, hang, guarded, tmpdir = _submit_all(
        gpu_server.url,
        [
            (G.CUDA_OK, "cuda", {}),
            (G.TRITON_OK, "triton", {}),
            (G.CUDA_WRONG, "cuda", {}),
            (G.CUDA_OOB, "cuda", {}),
            (G.CUDA_HANG, "cuda", {"timeout_s": 30}),
            (G.CUDA_GUARDED, "cuda", {}),
            (G.CUDA_TEMP_DIR, "cuda", {}),
        ],
    )
    for res in (ok, tri, guarded, tmpdir):
        assert res.outcome == "correct", f"{res.message}\n{res.compile_log}\n{res.traceback}"
        assert res.device and res.device.startswith("cuda") and (res.hardware or "").startswith("NVIDIA")
        assert res.speedup is not None and res.speedup > 1.2, res.speedup  # 1 fused kernel vs 3
        assert res.timing_method and "CUDA events" in res.timing_method
    # built on the compile pool, loaded by the GPU worker's sides as it is: their arch flags are the pool's
    # (the guarded one too: its build, skipped by the compile worker's import, made in its run as the GPU;
    # and the one built in a temporary directory of its own, moved into the build cache): none builds in
    # its sides, in the build dir or anywhere else (a CUDA build takes tens of seconds)
    for res in (ok, guarded, tmpdir):
        assert res.phases is not None and res.phases.get("worker_build") == 0.0, res.phases
        assert res.phases["load"] < 10.0, res.phases
    assert wrong.outcome == "incorrect", wrong.message
    assert oob.outcome == "execution_failure", oob.message
    assert hang.outcome == "timeout", hang.message
    # The service goes on: the same good kernel again (cached build) is still correct.
    again = _submit_all(gpu_server.url, [(G.CUDA_OK, "cuda", {})])[0]
    assert again.outcome == "correct" and again.extension_cache_hit is True
    assert again.elapsed.compile_s < 15, again.elapsed


def test_reference_as_its_own_solution_on_gpu(gpu_server: RunningServer) -> None:
    res = _submit_all(
        gpu_server.url, [(G.REF_FUSED + "\nModelNew = Model\n", "torch", {"perf_trials": 100})]
    )[0]
    assert res.outcome == "correct"
    assert res.speedup is not None and 0.97 < res.speedup < 1.03, res.speedup
    # the judge's own threads (the gate's watchdog) are no leftovers: the worker serves the next job
    assert res.recycled is None, res.recycled


REF_LINEAR = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
    def forward(self, x):
        return self.fc(x)
def get_inputs():
    return [torch.randn(64, 256)]
def get_init_inputs():
    return [256]
"""
#: nn.Linear's weights made with ``torch.Tensor(n, m)``, out of the device context's reach (CUDA-L1's L3_2 does
#: this): upstream builds both models on the CPU, where they equal the reference's.
SOL_LEGACY_WEIGHTS = """
import math
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(n, n))
        self.bias = nn.Parameter(torch.Tensor(n))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -1 / math.sqrt(n), 1 / math.sqrt(n))
    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight.t())
"""


def test_weights_made_out_of_the_device_contexts_reach_equal_the_references(
    gpu_server: RunningServer,
) -> None:
    res = _evaluate(gpu_server.url, REF_LINEAR, SOL_LEGACY_WEIGHTS)
    assert res.outcome == "correct", res.message
    assert res.speedup is not None


def test_a_reference_that_keeps_state_is_judged_in_lock_step(gpu_server: RunningServer) -> None:
    """A vanilla RNN that carries its hidden state (KernelBench L3_33, L3_34): its honest rewrite is correct,
    though the GPU path replays the candidate's timed inputs on a reference whose calls before differ."""
    res = _evaluate(gpu_server.url, REF_RNN, SOL_RNN)
    assert res.outcome == "correct", res.message
    assert res.reference_stateful and res.speedup is not None


REF_MATMUL = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
    def forward(self, x):
        return x @ self.weight
def get_inputs():
    return [torch.randn(2048, 2048)]
def get_init_inputs():
    return [2048]
"""
CASES = Path(__file__).resolve().parents[2] / "bench" / "adversarial" / "cases"


def test_timing_cheats_against_the_judge_gain_nothing(gpu_server: RunningServer) -> None:
    """Work hidden on a side stream, and work started before the judge's go (the candidate runtime's
    wait patched out): incorrect, or correct with no gain; an honest copy of the reference reads ~1x."""
    subs = [(REF_MATMUL, (CASES / f"{c}.py").read_text()) for c in ("side_stream", "skip_go_wait")]
    subs.append((REF_MATMUL, REF_MATMUL + "\nModelNew = Model\n"))
    side, early, honest = (_evaluate(gpu_server.url, ref, sol) for ref, sol in subs)
    for res in (side, early):
        assert res.outcome != "correct" or (res.speedup or 0) <= 1.1, (res.outcome, res.speedup, res.message)
    assert honest.outcome == "correct", f"{honest.message}\n{honest.traceback}\n{honest.output}"
    assert honest.speedup is not None and 0.95 < honest.speedup < 1.05, honest.speedup


def test_a_steady_kernel_is_timed_until_its_median_is_precise(gpu_server: RunningServer) -> None:
    """A steady 4096^2 matmul (~2 ms: one call a reading) against itself: with the default precision each
    side stops after a few dozen readings, not perf_trials, and still reads ~1x; ``perf_precision=0``
    takes every trial."""
    ref = REF_MATMUL.replace("2048", "4096")
    honest = ref + "\nModelNew = Model\n"
    answers = [
        _evaluate(gpu_server.url, ref, honest, perf_trials=100, perf_precision=precision)
        for precision in (0.0025, 0.0)
    ]
    adaptive, full = answers
    for res in answers:
        assert res.outcome == "correct", res.message
        assert res.speedup is not None and 0.97 < res.speedup < 1.03, (res.speedup, res.timing_gate)
        assert res.timing_gate is not None
    assert full.timing_gate is not None and adaptive.timing_gate is not None
    n = full.timing_gate["calls_per_reading"]
    assert full.timing_gate["readings"] == max(-(-100 // n), 10), full.timing_gate
    assert 20 <= adaptive.timing_gate["readings"] < full.timing_gate["readings"], adaptive.timing_gate
    assert "standard error" in (adaptive.timing_method or "") and "standard error" not in (
        full.timing_method or ""
    )


BIG_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1 << 29)]  # 2 GiB: copying it into a side's arena takes milliseconds

def get_init_inputs():
    return []
"""


def test_large_inputs_reach_each_side_before_its_untimed_calls(gpu_server: RunningServer) -> None:
    """The judge's copy of a call's inputs into a side's arena is asynchronous on its stream; an untimed
    call (correctness trials) must wait for it, or a side computes on the previous trial's inputs (seen on
    the H100 at level 1: the reference against itself failed from the second trial on)."""
    solution = BIG_REF.replace("class Model(", "class ModelNew(")
    res = _evaluate(gpu_server.url, BIG_REF, solution, perf_trials=10)
    assert res.outcome == "correct", res.message
    assert res.correctness_trials_passed == OPTS["correctness_trials"]
    # Its timed outputs are sampled inside the gate: that must not wait for the stream (it did, and every
    # timed call then missed the gate and was measured up to four times). A side's first calls miss it too
    # (lazy CUDA set-up: 3 or 4 misses a job on a 2x H200 host), so fewer misses than timed calls.
    assert res.timing_gate is not None and res.timing_gate["misses"] < 10, res.timing_gate


def test_sampling_an_output_never_waits_for_the_stream() -> None:
    """The judge samples a large timed output while its gate holds the stream: a host sync there (a
    pageable copy to the GPU, an ``.item()``) makes every such call miss the gate."""
    from kernel_service.judging.compare import Sample

    out = torch.randn(1 << 12, 1 << 10, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        sample = Sample.take(out, 1 << 10)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(sample.values, out[sample.index])


def test_the_gate_holds_the_judges_stream_until_the_judge_or_its_watchdog_opens_it() -> None:
    from kernel_service.judging.timing import HostGate

    gate = HostGate(torch.device("cuda"))
    passed = torch.cuda.Event()
    gate.hold(10e6)  # a 10 s watchdog: only the judge opens this one
    passed.record()
    time.sleep(0.05)
    assert not passed.query()
    assert gate.release(None)
    passed.synchronize()
    gate.hold(20e3)  # a 20 ms watchdog, and a judge that never comes back in time
    passed.record()
    time.sleep(0.3)
    assert passed.query()
    assert not gate.release(None)  # too late: the call was not held


SHORT_REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1 << 16)]  # a few microseconds: far below the path's ~0.29 ms hop

def get_init_inputs():
    return []
"""
#: Honest on calls far apart (correctness trials), stale on calls back to back (a reading of several).
STALE_WITHIN_READING = """
import time
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    last, out = 0.0, None
    def forward(self, x):
        now = time.perf_counter()
        if self.out is None or now - ModelNew.last > 200e-6:
            ModelNew.out = torch.relu(x)
        ModelNew.last = now
        return ModelNew.out
"""


def test_short_calls_are_timed_several_per_reading_and_each_output_is_checked(
    gpu_server: RunningServer, gpu_service: KernelService
) -> None:
    """A call of a few microseconds is timed many to a reading (one hop's cost divided among them), the
    same for both sides: the reference against itself reads ~1x. A kernel that answers a reading's later
    calls with its first output is incorrect: every call of a reading is checked."""
    honest_sol = SHORT_REF + "\nModelNew = Model\n"
    honest, stale = (_evaluate(gpu_server.url, SHORT_REF, sol) for sol in (honest_sol, STALE_WITHIN_READING))
    assert honest.outcome == "correct", honest.message
    assert honest.timing_gate is not None
    if not gpu_service.mps_running:
        assert honest.timing_gate["calls_per_reading"] >= 16, honest.timing_gate
    else:  # under MPS (KS_MPS) a reading is one call, at each side's own level, in several process pairs
        assert honest.timing_gate["calls_per_reading"] == 1, honest.timing_gate
        assert honest.timing_gate["process_pairs"] == SHORT_PAIRS, honest.timing_gate
    # 1.054 and 1.080 in two of five H100 runs (a 3 us call): within 10%, where one call a reading read
    # anywhere from 0.25x to 1.56x
    assert honest.speedup is not None and 0.9 < honest.speedup < 1.1, (honest.speedup, honest.timing_gate)
    assert honest.new_timing is not None and honest.new_timing.median < 0.05, honest.new_timing
    if gpu_service.mps_running:  # one call a reading: calls >200 us apart, each computed
        assert stale.outcome == "correct" and (stale.speedup or 0) < 1.1, (stale.outcome, stale.speedup)
        return
    # Refused either way: its reused outputs are wrong, or (one H100 run in four) the judge's own
    # preparation of its readings read over 1.25x that of null calls and it ended execution_failure.
    assert stale.outcome in ("incorrect", "execution_failure"), (stale.outcome, stale.message)
    assert stale.message and ("timed call" in stale.message or "preparation" in stale.message)
