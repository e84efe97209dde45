"""Pure pieces of the kernel service: schemas, comparison, rewards, datasets, the CLI as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ks_sources as S
import pytest
import torch
from kernel_service.judging.compare import compare_outputs, default_tolerance
from kernel_service.judging.schemas import Outcome, TimingStats, reward_for
from kernel_service.kernelbench.datasets import DatasetError, ProblemStore
from kernel_service.kernelbench.schemas import KernelEvalRequest, KernelEvalResponse
from pydantic import ValidationError

from benchmark_runner.schemas import EvalStatus


def test_request_needs_exactly_one_reference() -> None:
    with pytest.raises(ValidationError, match="exactly one of `reference`.*`task_id`.*neither"):
        KernelEvalRequest(solution="x")
    with pytest.raises(ValidationError, match="both"):
        KernelEvalRequest(solution="x", reference="r", task_id="t")
    req = KernelEvalRequest(solution="x", task_id="level1/19_ReLU")
    assert req.dataset == "kernelbench" and req.backend == "torch" and req.options.perf_trials == 100


def test_tolerance_shortcut_and_defaults() -> None:
    req = KernelEvalRequest(solution="x", reference="r", options={"tolerance": 1e-2, "rtol": 1e-3})
    assert (req.options.atol, req.options.rtol) == (1e-2, 1e-3)
    assert default_tolerance([torch.zeros(1)]) == 1e-4
    assert default_tolerance([torch.zeros(1, dtype=torch.bfloat16)]) == 1e-2


def test_rewards_and_generic_mapping() -> None:
    assert reward_for(Outcome.CORRECT, 1.5) == 0.5
    assert reward_for(Outcome.CORRECT, None) == 0.0
    expected = {
        "incorrect": -2,
        "execution_failure": -3,
        "initialization_failure": -4,
        "compilation_failure": -5,
        "unknown_error": -6,
        "timeout": -7,
        "sandbox_error": -7,
    }
    for outcome, reward in expected.items():
        assert reward_for(Outcome(outcome), None) == reward
    data = KernelEvalResponse(outcome=Outcome.TIMEOUT, reward=-7).to_eval_result_data()
    assert (data.status, data.score, data.outcome) == (EvalStatus.TIMEOUT, -7, "timeout")
    assert (
        KernelEvalResponse.failure(Outcome.SANDBOX_ERROR, "x").to_eval_result_data().status
        == EvalStatus.ERROR
    )


def test_timing_stats() -> None:
    s = TimingStats.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.n, s.mean) == (2.5, 1.0, 10.0, 4, 4.0)


def test_compare_handles_nan_inf_shape_dtype() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert compare_outputs(ref, ref.clone(), 1e-4, 1e-4).ok
    moved_nan = torch.tensor([float("nan"), 1.0, float("inf"), 2.0])
    assert "NaN" in compare_outputs(ref, moved_nan, 1e-4, 1e-4).message
    wrong_inf = torch.tensor([1.0, float("nan"), float("-inf"), 2.0])
    assert "Inf" in compare_outputs(ref, wrong_inf, 1e-4, 1e-4).message
    assert "shape" in compare_outputs(ref, ref[:3], 1, 1).message
    assert "dtype" in compare_outputs(ref, ref.double(), 1, 1).message
    near = compare_outputs(torch.ones(4), torch.ones(4) + 5e-5, 1e-4, 1e-4)
    assert near.ok and near.max_abs_error == pytest.approx(5e-5, rel=1e-2)
    far = compare_outputs(torch.ones(4), torch.ones(4) + 1e-2, 1e-4, 1e-4)
    assert not far.ok and "4 of 4" in far.message
    assert compare_outputs((torch.ones(2), 3), (torch.ones(2), 3), 0, 0).ok
    assert not compare_outputs((torch.ones(2), 3), (torch.ones(2),), 0, 0).ok


def test_datasets_from_checkout_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "KernelBench" / "level1").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level1" / "19_ReLU.py").write_text(S.fixture("kb_level1_19_ReLU.py"))
    (tmp_path / "KernelBench" / "level1" / "notes.txt").write_text("ignored")
    store = ProblemStore.from_sources([tmp_path, S.FIXTURES / "problems.jsonl"])
    assert [p.task_id for p in store.dataset("all")] == [
        "level1/19_ReLU",
        "level2/12_Gemm_Multiply_LeakyReLU",
    ]
    assert store.find("19_ReLU").level == 1
    with pytest.raises(KeyError):
        store.dataset("level9")
    with pytest.raises(KeyError):
        store.find("12_Gemm_Multiply_LeakyReLU", "level1")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"level": 1}\n')
    with pytest.raises(DatasetError, match="bad.jsonl:1"):
        ProblemStore.from_sources([bad])


def _cli(tmp_path: Path, solution: str, *extra: str) -> subprocess.CompletedProcess[str]:
    ref = tmp_path / "ref.py"
    sol = tmp_path / "sol.py"
    ref.write_text(S.REF_MATMUL)
    sol.write_text(solution)
    exe = Path(sys.executable).parent / "kernel-service"
    return subprocess.run(
        [
            str(exe),
            "eval",
            str(ref),
            str(sol),
            "--gpus",
            "none",
            "--perf-trials",
            "5",
            "--warmup",
            "1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_eval_subprocess(tmp_path: Path) -> None:
    ok = _cli(tmp_path, S.SOL_MATMUL_OK, "--json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["outcome"] == "correct" and data["new_timing"]["n"] == 5
    bad = _cli(tmp_path, S.SOL_ADD_WRONG)
    assert bad.returncode == 1
    assert "outcome: " in bad.stdout and "correct" not in bad.stdout.split("\n")[0].replace("incorrect", "")
    gpu = _cli(tmp_path, S.SOL_MATMUL_OK, "--backend", "cuda")
    assert gpu.returncode == 1 and "requires_gpu" in gpu.stdout


def test_fast_path_never_accepts_what_the_exact_path_rejects() -> None:
    """A correct output takes the fast path; anything with NaN/Inf or out of tolerance gets the exact one."""
    big = torch.finfo(torch.float32).max
    inf, nan = float("inf"), float("nan")
    cases = [
        ([inf, 1.0], [big, 1.0], False),  # Inf reference, huge finite candidate: tolerance must stay finite
        ([1.0, 2.0], [inf, 2.0], False),
        ([inf, -inf], [inf, -inf], True),  # same Inf positions and signs: right (exact path)
        ([nan, 1.0], [nan, 1.0], True),
        ([nan, 1.0], [0.0, 1.0], False),
        ([0.0, 1e30], [1e-4, 1e30 * (1 + 5e-5)], True),  # atol near zero, rtol on large values
        ([0.0, 1.0], [2e-4, 1.0], False),
    ]
    for ref, new, ok in cases:
        r, n = torch.tensor(ref), torch.tensor(new)
        assert compare_outputs(r, n, 1e-4, 1e-4).ok is ok, (ref, new)
    x = torch.randn(1000)
    res = compare_outputs(x, x + 1e-5, 1e-4, 1e-4)
    assert res.ok and res.max_abs_error is not None and 0 < res.max_abs_error < 2e-5


def test_sampled_snapshot_checks_shape_and_random_positions() -> None:
    """Large timed outputs are compared at random positions drawn after the call: a kernel that skips a
    slice of its output is still caught, a correct one passes, a wrong shape is named."""
    from kernel_service.judging.compare import Sample
    from kernel_service.judging.integrity import snapshot_outputs

    ref = torch.randn(64, 4096)
    snap = snapshot_outputs((ref.clone(), torch.ones(3)), sample_above=1000)
    assert isinstance(snap[0], Sample) and snap[0].values.numel() == 1000
    assert not isinstance(snap[1], Sample)  # small outputs are kept whole
    assert compare_outputs((ref, torch.ones(3)), snap, 1e-4, 1e-4).ok

    lazy = ref.clone()
    lazy[60:] = 0  # the last 1/16 of the rows never written
    caught = compare_outputs(ref, snapshot_outputs(lazy, sample_above=1000), 1e-4, 1e-4)
    assert not caught.ok and "outside atol" in caught.message
    assert (
        "shape (32, 8192) != reference (64, 4096)"
        in compare_outputs(
            ref, snapshot_outputs(ref.reshape(32, 8192).clone(), sample_above=1000), 1, 1
        ).message
    )
    # Non-contiguous outputs are sampled in place (no full copy) at the same logical positions.
    t = torch.randn(4096, 64).t()
    assert compare_outputs(t.contiguous(), snapshot_outputs(t, sample_above=100), 0, 0).ok
    # Positions differ from one snapshot to the next.
    a, b = (snapshot_outputs(ref, sample_above=1000).index[0] for _ in range(2))
    assert not torch.equal(a, b)


def test_fast_comparison_in_chunks_finds_an_error_in_the_last_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large outputs are compared a chunk at a time (bounded temporaries); every chunk still counts."""
    import kernel_service.judging.compare as cmp_mod

    monkeypatch.setattr(cmp_mod, "COMPARE_CHUNK", 1000)
    ref = torch.randn(10_500)
    close = ref + 1e-6
    close[9_000] += 5e-5  # the worst error, in the ninth chunk: within tolerance
    ok = cmp_mod.compare_outputs(ref, close, 1e-4, 1e-4)
    assert ok.ok and ok.max_abs_error is not None and abs(ok.max_abs_error - 5.1e-5) < 2e-6
    bad = close.clone()
    bad[10_499] += 1.0  # the last, partial chunk
    res = cmp_mod.compare_outputs(ref, bad, 1e-4, 1e-4)
    assert not res.ok and "1 of 10500 elements" in res.message
    strided = torch.randn(200, 300).t()  # not contiguous: compared as the same logical elements
    assert cmp_mod.compare_outputs(strided, strided.contiguous(), 1e-4, 1e-4).ok


def test_the_mps_setting_comes_from_ks_mps_where_the_config_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runners embed the service with a default config: ``KS_MPS`` is how their users set MPS (auto,
    where the host can run it, when unset)."""
    from kernel_service.service import KernelServiceConfig

    monkeypatch.delenv("KS_MPS", raising=False)
    assert KernelServiceConfig().mps == "auto"
    monkeypatch.setenv("KS_MPS", "on")
    assert KernelServiceConfig().mps == "on"
    assert KernelServiceConfig(mps="off").mps == "off"
    # both runners' embedded services follow it (the BackendBench one was pinned off)
    from backendbench_runner.service import make_service as backendbench_service
    from kernelbench_runner.service import make_service as kernelbench_service

    for embedded in (backendbench_service(gpus=[]), kernelbench_service(gpus=[])):
        assert embedded.config.mps == "on"  # type: ignore[attr-defined]
    monkeypatch.setenv("KS_MPS", "sometimes")
    with pytest.raises(ValueError, match="KS_MPS: expected auto, on or off; got 'sometimes'"):
        KernelServiceConfig()
    # ``kernel-service serve`` reads it too, and refuses a bad value before it serves anything
    from click.testing import CliRunner
    from kernel_service.cli import main

    got = CliRunner().invoke(main, ["serve", "--gpus", "none"], env={"KS_MPS": "sometimes"})
    assert got.exit_code == 2 and "Invalid value for '--mps'" in got.output, got.output


def test_the_own_baseline_setting_reaches_the_judge_as_the_service_resolved_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``KS_OWN_BASELINE`` (auto, on, off) is validated where the service is configured, and the judge's
    decision follows the setting and whether the worker times under MPS."""
    from click.testing import CliRunner
    from kernel_service.cli import main
    from kernel_service.config import OWN_BASELINE_ENV as SERVICE_ENV
    from kernel_service.judging.readings import OWN_BASELINE_ENV, own_baseline
    from kernel_service.service import KernelServiceConfig

    assert OWN_BASELINE_ENV == SERVICE_ENV
    monkeypatch.delenv(OWN_BASELINE_ENV, raising=False)
    assert KernelServiceConfig().own_baseline == "auto"
    assert own_baseline(True) and not own_baseline(False)  # auto: under MPS only
    monkeypatch.setenv(OWN_BASELINE_ENV, "off")
    assert KernelServiceConfig().own_baseline == "off"
    assert not own_baseline(True)
    monkeypatch.setenv(OWN_BASELINE_ENV, "on")
    assert own_baseline(False)
    monkeypatch.setenv(OWN_BASELINE_ENV, "1")
    with pytest.raises(ValueError, match="KS_OWN_BASELINE: expected auto, on or off; got '1'"):
        KernelServiceConfig()
    got = CliRunner().invoke(main, ["serve", "--gpus", "none"], env={OWN_BASELINE_ENV: "1"})
    assert got.exit_code == 2 and "Invalid value for '--own-baseline'" in got.output, got.output


def test_under_mps_a_failed_judge_context_is_charged_to_the_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under MPS a side's fatal GPU fault ends the judge's context too: the worker marks the judge's CUDA
    error a ``gpu_fault``, which the service charges as a crash in the job's phase (an out-of-bounds
    kernel is ``execution_failure``, not ``sandbox_error``); without MPS it stays the harness's error.
    (The GPU test ``test_gpu_kernels_outcomes_and_recovery`` under MPS causes it for real.)"""
    from kernel_service.kernelbench.schemas import KernelEvalRequest
    from kernel_service.replies import response_from
    from kernel_service.workers.pool import Reply
    from kernel_service.workers.worker import _shared_context_fault

    fault = RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    assert not _shared_context_fault(fault)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps-pipe")
    assert _shared_context_fault(fault)
    assert not _shared_context_fault(ValueError("a bad value"))

    request = KernelEvalRequest(reference=S.REF_ADD, solution=S.SOL_ADD_OK)
    base: dict[str, object] = {}
    reply = Reply(
        result=None, failure="gpu_fault", message="the GPU context failed under MPS", phase="correctness"
    )
    got = response_from(reply, base, request)
    assert got.outcome == Outcome.EXECUTION_FAILURE and "during correctness; worker replaced" in got.message
    protocol = Reply(result=None, failure="protocol", message="worker error: boom", phase="correctness")
    assert response_from(protocol, base, request).outcome == Outcome.SANDBOX_ERROR


def test_under_mps_a_failed_judge_context_is_the_backendbench_kernels_execution_failure() -> None:
    """BackendBench's answer for a job whose judge context a side's fatal fault ended under MPS: the
    kernel's ``execution_failure`` (the op's other side runs trusted aten); any other failure of the worker
    stays ``sandbox_error``, an overrun ``timeout``."""
    import anyio
    from kernel_service.backendbench.references import reference_source
    from kernel_service.backendbench.schemas import BackendBenchEvalRequest
    from kernel_service.backendbench_service import run_in_pool
    from kernel_service.workers.pool import Reply

    class OneReply:  # a worker pool whose one job ended with ``failure`` (an MPS fault cannot happen here)
        def __init__(self, failure: str) -> None:
            self.failure = failure

        async def run(self, job: dict[str, object], timeout: float) -> tuple[Reply, float]:
            return Reply(result=None, failure=self.failure, message=f"{self.failure} in the job"), 0.0

    source = reference_source("relu")
    assert source is not None
    request = BackendBenchEvalRequest(dataset="backendbench-smoke", op="relu", suite="smoke", source=source)
    verdicts = {
        failure: anyio.run(run_in_pool, OneReply(failure), request)  # type: ignore[arg-type]
        for failure in ("gpu_fault", "protocol", "crash", "timeout")
    }
    assert verdicts["gpu_fault"].outcome == "execution_failure"
    assert "gpu_fault in the job" in verdicts["gpu_fault"].feedback
    assert verdicts["protocol"].outcome == verdicts["crash"].outcome == "sandbox_error"
    assert verdicts["timeout"].outcome == "timeout"


def test_mps_on_with_the_ray_executor_is_refused_not_ignored() -> None:
    """Ray's GPU actors run no MPS daemon of the service's: asking for MPS there is a configuration error."""
    import anyio
    from kernel_service.service import KernelService, KernelServiceConfig

    service = KernelService(KernelServiceConfig(executor="ray", mps="on"))
    with pytest.raises(ValueError, match="mps: 'on' is not supported with executor 'ray'"):
        anyio.run(service.startup)
