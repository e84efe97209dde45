"""Issue 31 on the CPU: evaluations at fp16/bf16 (both sides cast alike) and the advisory profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import ks_sources as S
import pytest
import torch
from kernel_service.judging import profiling
from kernel_service.judging.harness import build_model, cast_inputs, precision_dtype
from kernel_service.judging.judging import Run
from kernel_service.judging.schemas import EvalOptions, Outcome
from kernel_service.result_cache import result_key
from ks_sources import evaluate

#: ``x @ W`` with W a parameter: correct only if the candidate's weights are the reference's, rounded
#: the same way, and its inputs too.
REF_LINEAR = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) / n)  # outputs ~0.1: bf16's rounding stays << 1e-2
        self.register_buffer("shift", torch.randn(n))
        self.scale = scale
    def forward(self, x):
        return (x @ self.weight + self.shift) * self.scale

N = 64

def get_inputs():
    return [torch.randn(N, N)]

def get_init_inputs():
    return [N, torch.tensor(0.5)]
"""

#: The arithmetic in fp32 on the inputs and weights it is given, the result in the inputs' dtype: correct
#: at every precision only because it gets the same cast inputs, init inputs and parameters as the
#: reference (it checks that it does).
SOL_LINEAR_FP32_MATH = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) / n)
        self.register_buffer("shift", torch.randn(n))
        self.scale = scale
    def forward(self, x):
        want = x.dtype
        for name, t in (("weight", self.weight), ("shift", self.shift), ("scale", self.scale)):
            if t.dtype != want:
                raise TypeError(f"{name} is {t.dtype}, the input {want}: the cast missed this side")
        y = torch.mm(x.float(), self.weight.float()) + self.shift.float()
        return (y * self.scale.float()).to(want)
"""

#: Ignores the cast: computes and answers in fp32 whatever it was given.
SOL_LINEAR_IGNORES_CAST = SOL_LINEAR_FP32_MATH.replace(
    "        return (y * self.scale.float()).to(want)", "        return y * self.scale.float()"
).replace("raise TypeError", "pass  #")

#: Ignores the cast the other way: keeps fp32 weights of its own and returns the input's dtype.
SOL_LINEAR_OWN_FP32_WEIGHTS = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) / n)
        self.register_buffer("shift", torch.randn(n))
        self.scale = scale
    def _apply(self, fn, recurse=True):  # refuses the service's .to(dtype): its weights stay fp32
        return self
    def forward(self, x):
        return ((x.float() @ self.weight + self.shift) * self.scale.float()).to(x.dtype)
"""

#: Integer inputs stay integers: an index input must reach both sides as int64.
REF_GATHER = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, idx):
        return torch.gather(x, 1, idx) * 2

def get_inputs():
    return [torch.randn(32, 16), torch.randint(0, 16, (32, 4))]

def get_init_inputs():
    return []
"""

SOL_GATHER = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x, idx):
        assert idx.dtype == torch.int64, idx.dtype
        return x.gather(1, idx) * 2
"""

#: A reference that cannot run at a half precision: it mixes a fp32 tensor of its own with its input.
REF_FP32_ONLY = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x @ torch.ones(x.shape[1], 8, dtype=torch.float32)

def get_inputs():
    return [torch.randn(16, 16)]

def get_init_inputs():
    return []
"""


def test_cast_helpers() -> None:
    assert precision_dtype("fp32") is None
    assert precision_dtype("bf16") == torch.bfloat16 and precision_dtype("fp16") == torch.float16
    with pytest.raises(ValueError, match="precision"):
        precision_dtype("fp8")
    values = [torch.randn(2), torch.arange(3), torch.ones(2, dtype=torch.complex64), 3, 0.5, [torch.randn(1)]]
    cast = cast_inputs(values, torch.bfloat16)
    assert [getattr(v, "dtype", None) for v in cast[:3]] == [torch.bfloat16, torch.int64, torch.complex64]
    assert cast[3:5] == [3, 0.5] and cast[5][0].dtype == torch.bfloat16
    assert cast_inputs(values, None) is values  # fp32: nothing cast, nothing copied
    model = build_model(torch.nn.Linear, [4, 4], 7, torch.device("cpu"), torch.float16)
    assert model.weight.dtype == torch.float16
    same = build_model(torch.nn.Linear, [4, 4], 7, torch.device("cpu"))
    assert torch.equal(model.weight, same.weight.half())  # the same draw, rounded


def test_options_default_to_fp32_and_no_profile() -> None:
    opts = EvalOptions()
    assert (opts.precision, opts.profile) == ("fp32", False)
    with pytest.raises(ValueError):
        EvalOptions(precision="fp8")  # type: ignore[arg-type]


def test_cli_eval_reference_against_itself_at_bf16(tmp_path: Path) -> None:
    ref = tmp_path / "ref.py"
    ref.write_text(REF_LINEAR)
    sol = tmp_path / "sol.py"
    sol.write_text(REF_LINEAR + "\n\nclass ModelNew(Model):\n    pass\n")
    exe = Path(sys.executable).parent / "kernel-service"
    args = [str(exe), "eval", str(ref), str(sol), "--gpus", "none", "--perf-trials", "5", "--warmup", "1"]
    done = subprocess.run(
        [*args, "--precision", "bf16", "--json"], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["outcome"] == "correct" and data["precision"] == "bf16"
    assert data["atol"] == data["rtol"] == 1e-2 and data["max_abs_error"] == 0.0
    assert data["profile"] is None and "profile" not in data["phases"]  # not asked: not run


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_fp32_math_on_cast_inputs_and_weights_stays_correct(client: httpx.Client, precision: str) -> None:
    res = evaluate(client, REF_LINEAR, SOL_LINEAR_FP32_MATH, precision=precision)
    assert res.outcome == "correct", res.message
    assert res.precision == precision and res.atol == res.rtol == 1e-2
    assert res.max_abs_error is not None and res.max_abs_error > 0  # fp32 math, not the reference's
    fp32 = evaluate(client, REF_LINEAR, SOL_LINEAR_FP32_MATH)
    assert fp32.outcome == "correct" and fp32.precision == "fp32" and fp32.atol == fp32.rtol == 1e-4
    # the plain fp32 kernel of the same weights: cast like the reference, it matches it exactly
    plain = evaluate(client, S.REF_MATMUL, S.SOL_MATMUL_OK, precision=precision)
    assert plain.outcome == "correct" and plain.max_abs_error == 0.0, plain.message


def test_a_kernel_that_ignores_the_cast_is_caught(client: httpx.Client) -> None:
    res = evaluate(client, REF_LINEAR, SOL_LINEAR_IGNORES_CAST, precision="bf16")
    assert res.outcome == "incorrect" and "dtype torch.float32 != reference torch.bfloat16" in res.message
    own = evaluate(client, REF_LINEAR, SOL_LINEAR_OWN_FP32_WEIGHTS, precision="bf16")
    assert own.outcome == "correct", own.message  # fp32 weights (more exact) are its own business...
    assert own.max_abs_error is not None and own.max_abs_error > 0  # ...and it shows in the error


def test_integer_inputs_are_kept(client: httpx.Client) -> None:
    res = evaluate(client, REF_GATHER, SOL_GATHER, precision="bf16")
    assert res.outcome == "correct" and res.max_abs_error == 0.0, res.message


def test_a_reference_that_cannot_run_at_the_precision_is_named(client: httpx.Client) -> None:
    own = REF_FP32_ONLY + "\n\nclass ModelNew(Model):\n    pass\n"
    res = evaluate(client, REF_FP32_ONLY, own, precision="fp16")
    assert (res.outcome, res.reward, res.precision) == ("unsupported_precision", 0.0, "fp16")
    assert "does not run at precision fp16" in res.message and "dtype" in res.message
    assert evaluate(client, REF_FP32_ONLY, own).outcome == "correct"  # fine at fp32


def test_explicit_tolerance_still_wins(client: httpx.Client) -> None:
    res = evaluate(client, REF_LINEAR, SOL_LINEAR_FP32_MATH, precision="bf16", tolerance=1e-6)
    assert res.outcome == "incorrect" and res.atol == res.rtol == 1e-6


def test_precision_and_profile_are_part_of_the_result_cache_key() -> None:
    def key(**options: Any) -> str:
        return result_key("ref", "sol", "torch", EvalOptions(**options).model_dump(mode="json"), {})

    assert len({key(), key(precision="fp16"), key(precision="bf16"), key(profile=True)}) == 4
    assert key() == key(precision="fp32")


def test_a_side_never_claims_an_unsupported_precision() -> None:
    run = Run.__new__(Run)
    run.precision = "bf16"
    err = run.side_error("candidate", {"outcome": Outcome.UNSUPPORTED_PRECISION.value, "message": "mine"})
    assert err.outcome == Outcome.EXECUTION_FAILURE
    ref = run.side_error("reference", {"outcome": "execution_failure", "message": "no half kernel"})
    assert ref.outcome == Outcome.UNSUPPORTED_PRECISION and "bf16" in ref.message
    run.precision = "fp32"
    assert run.side_error("reference", {"message": "broken"}).outcome == Outcome.UNKNOWN_ERROR


# ---- the profile -------------------------------------------------------------------------------------


def test_profile_names_each_sides_ops_with_times(client: httpx.Client) -> None:
    res = evaluate(client, REF_LINEAR, SOL_LINEAR_FP32_MATH, precision="bf16", profile=True)
    assert res.outcome == "correct", res.message
    prof = res.profile
    assert prof is not None and prof.device == "cpu" and "advisory" in (prof.note or "")
    assert prof.candidate is not None and prof.reference is not None
    names = {k.name for k in prof.candidate.kernels}
    assert "aten::mm" in names and all(k.time_us >= 0 and k.calls >= 1 for k in prof.candidate.kernels)
    times = [k.time_us for k in prof.candidate.kernels]
    assert times == sorted(times, reverse=True) and prof.candidate.kernel_count >= len(times)
    assert prof.candidate.call_us and prof.candidate.outside_share is not None
    assert 0.0 <= prof.candidate.outside_share <= 1.0
    assert {"aten::matmul", "aten::mm"} & {k.name for k in prof.reference.kernels}
    assert prof.ncu is not None and "no CUDA device" in (prof.ncu.error or "")
    assert res.phases and "profile" in res.phases
    assert res.output is None  # the output reported is the judged process's, not the profiled one's


def test_profile_of_an_incorrect_kernel_says_why_not(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_WRONG, profile=True)
    assert res.outcome == "incorrect"
    assert (
        res.profile is not None
        and res.profile.candidate is None
        and "not profiled" in (res.profile.note or "")
    )


def test_profile_without_timing_uses_the_judged_candidate(client: httpx.Client) -> None:
    res = evaluate(client, S.REF_ADD, S.SOL_ADD_OK, profile=True, measure_performance=False)
    assert res.outcome == "correct" and res.profile is not None and res.profile.candidate is not None
    assert "aten::add" in {k.name for k in res.profile.candidate.kernels}


def test_a_side_profile_is_checked_for_form() -> None:
    assert "malformed" in (profiling.side_profile({"kernels": [{"name": 3}]}).get("error") or "")
    assert "malformed" in (profiling.side_profile({"call_us": float("inf")}).get("error") or "")
    assert "no profile" in (profiling.side_profile("lies").get("error") or "")
    many = {"kernels": [{"name": "k" * 1000, "calls": 1, "time_us": 1.0}] * 100, "kernel_count": 100}
    clean = profiling.side_profile(many)
    assert len(clean["kernels"]) == profiling.TOP_KERNELS and len(clean["kernels"][0]["name"]) <= 200
    assert profiling.ncu_report_of(None) is None
    assert "malformed" in (profiling.ncu_report_of({"metrics": {"x": "y"}}) or {}).get("error", "")


def test_ncu_csv_is_read_for_the_heaviest_kernel() -> None:
    text = "\n".join(
        [
            "==PROF== Connected to process 12",
            '"ID","Process ID","Kernel Name","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed",'
            '"dram__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active",'
            '"launch__registers_per_thread"',
            '"","","","nsecond","%","%","%","register/thread"',
            '"0","12","small_kernel","1,200","10.5","20.25","30","16"',
            '"1","12","fused_kernel(float const*)","52,000","45.1","88","78.2","32"',
        ]
    )
    got = profiling.parse_ncu_csv(text)
    assert got["kernel"] == "fused_kernel(float const*)"
    assert got["metrics"] == {
        "gpu_time_us": pytest.approx(52.0),
        "sm_throughput_pct": 45.1,
        "dram_throughput_pct": 88.0,
        "achieved_occupancy_pct": 78.2,
        "registers_per_thread": 32.0,
    }
    denied = profiling.parse_ncu_csv(
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters",
        1,
    )
    assert "ERR_NVGPUCTRPERM" in denied["error"]
    failed = profiling.parse_ncu_csv(
        "==ERROR== The application returned an error code (1).",
        1,
        "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'kernel_service'\n",
    )
    assert "error code (1)" in failed["error"]
    assert "No module named 'kernel_service'" in failed["error"]
    sandboxed = profiling.parse_ncu_csv(
        "==ERROR== The application returned an error code (1).",
        1,
        "RuntimeError: Unexpected error from cudaGetDeviceCount()",
    )
    assert "Landlock" in sandboxed["error"]


def test_ncu_absent_or_on_cpu_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = profiling.ncu_report({}, [], {}, torch.device("cpu"), tmp_path, 5)
    assert "no CUDA device" in cpu["error"]
    monkeypatch.setenv("PATH", str(tmp_path))
    gpu = profiling.ncu_report({"cls": "ModelNew"}, [], {}, torch.device("cuda", 0), tmp_path, 5)
    assert "not on the service's PATH" in gpu["error"]
