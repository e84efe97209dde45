"""The evaluator in-process: each kind of kernel gets the verdict and feedback it deserves."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
from bb_sources import CORRECT_RELU, FAST, WRONG_RELU
from kernel_service.backendbench.evaluator import evaluate
from pydantic import ValidationError

CRASHING_RELU = """
def relu_kernel_impl(x):
    raise RuntimeError("boom from the kernel")
"""
ORIGINAL_RELU = """
import torch
def relu_kernel_impl(x):
    return torch.nn.functional.relu(x)
"""
ATEN_SOFTMAX = """
import torch
def softmax_kernel_impl(x, dim, dtype=None):
    return torch.ops.aten._softmax.default(x, dim, False)
"""
BF16_ONLY_WRONG_RELU = """
import torch
def relu_kernel_impl(x):
    if x.dtype == torch.bfloat16:
        return x.clone()
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
"""


def run(op: str, source: str, suite: str = "smoke", **options: Any) -> dict[str, Any]:
    body = {
        "dataset": f"backendbench-{suite}",
        "op": op,
        "suite": suite,
        "source": source,
        "options": {**FAST, **options},
    }
    return evaluate(body)


def test_correct_kernel_scores_correct_with_timed_speedup() -> None:
    r = run("relu", CORRECT_RELU)
    assert r["outcome"] == "correct" and r["correctness"] == 1.0
    perf = [i for i in r["inputs"] if i["kind"] == "performance"]
    assert perf and all(i["speedup"] and i["ref_ms"] > 0 and i["kernel_ms"] > 0 for i in perf)
    assert r["overall"] == pytest.approx(r["performance"])
    assert {"float32", "bfloat16"} <= {i["dtype"] for i in r["inputs"]}
    assert "perf_counter" in r["timing_method"]


def test_wrong_kernel_lists_failing_inputs_with_max_error() -> None:
    r = run("relu", WRONG_RELU)
    assert (r["outcome"], r["correctness"], r["performance"], r["overall"]) == ("incorrect", 0.0, 1.0, 0.0)
    assert all(i["speedup"] is None for i in r["inputs"])  # a failed kernel is not timed
    fb = r["feedback"]
    assert (
        "Failing inputs:" in fb and "T([16, 33], f32)" in fb and "max abs error" in fb and "atol 0.0001" in fb
    )


def test_crashing_kernel_reports_the_error_and_line() -> None:
    r = run("relu", CRASHING_RELU)
    assert r["outcome"] == "incorrect" and r["correctness"] == 0.0 and r["overall"] == 0.0
    assert "RuntimeError: boom from the kernel" in r["feedback"]
    assert "line 3" in r["feedback"]


@pytest.mark.parametrize(
    ("op", "source", "called"),
    [("relu", ORIGINAL_RELU, "aten.relu"), ("softmax", ATEN_SOFTMAX, "aten._softmax")],
)
def test_kernel_calling_the_original_op_is_flagged(op: str, source: str, called: str) -> None:
    r = run(op, source)
    assert r["outcome"] == "calls_original_op" and r["correctness"] == 0.0 and r["overall"] == 0.0
    assert called in r["aten_ops_called"]
    assert f"Your kernel calls {called}" in r["feedback"]


def test_kernel_wrong_on_one_dtype_only() -> None:
    r = run("relu", BF16_ONLY_WRONG_RELU)
    assert r["outcome"] == "incorrect" and r["correctness"] == 0.0
    failing = [i for i in r["inputs"] if not i["correct"]]
    assert failing and {i["dtype"] for i in failing} == {"bfloat16"}
    assert any(i["correct"] and i["dtype"] == "float32" for i in r["inputs"])
    assert "bf16" in r["feedback"] and "atol 0.01" in r["feedback"]
    # the dtype option narrows the test to float32: then the kernel passes
    assert run("relu", BF16_ONLY_WRONG_RELU, dtypes=["float32"])["correctness"] == 1.0


def test_tampering_with_dispatch_tracing_is_refused() -> None:
    src = "import torch\nfrom torch.utils._python_dispatch import _pop_mode\ndef relu_kernel_impl(x):\n    return torch.relu(x)\n"
    r = run("relu", src)
    assert r["outcome"] == "calls_original_op" and "dispatch-mode internal" in r["feedback"]


def test_mutating_an_input_or_returning_it_is_incorrect() -> None:
    mutating = "import torch\ndef add_kernel_impl(a, b, alpha=1):\n    return a.sub_(b, alpha=-alpha)\n"
    r = run("add", mutating)
    assert r["outcome"] == "incorrect"
    assert "in-place / out= semantics" in r["feedback"] or "aliasing differs" in r["feedback"]


@pytest.mark.parametrize(
    ("source", "outcome", "text"),
    [("def (", "load_error", "SyntaxError"), ("x = 1\n", "missing_function", "relu_kernel_impl")],
)
def test_broken_sources(source: str, outcome: str, text: str) -> None:
    r = run("relu", source)
    assert r["outcome"] == outcome and r["correctness"] == 0.0 and text in r["feedback"]


def test_unknown_op_and_bad_request() -> None:
    r = run("frobnicate", CORRECT_RELU)
    assert r["outcome"] == "no_inputs" and "add, mul, relu" in r["feedback"]
    with pytest.raises(ValidationError, match="dataset must be 'backendbench-smoke'"):
        evaluate({"dataset": "level1", "op": "relu", "suite": "smoke", "source": ""})
    with pytest.raises(ValidationError, match="dtypes"):
        evaluate(
            {"dataset": "backendbench-smoke", "op": "relu", "source": "", "options": {"dtypes": ["float8"]}}
        )


def test_facto_edge_cases_reference_passes_and_wrong_edge_handling_fails() -> None:
    from backendbench_runner.baselines import reference_source

    for op in ("add", "sum", "mm", "softmax"):
        r = run(op, reference_source(op), suite="facto")
        assert r["outcome"] == "correct", r["feedback"]
    labels = " ".join(i["args"] for i in run("relu", CORRECT_RELU, suite="facto")["inputs"])
    assert "T([0], f32)" in labels and "[1, 6]" in labels  # empty and non-contiguous inputs are there
    # a relu that breaks on NaN (extreme values) is caught only by facto's special-value input
    nan_blind = "import torch\ndef relu_kernel_impl(x):\n    return torch.where(x > 0, x, torch.zeros((), dtype=x.dtype))\n"
    assert run("relu", nan_blind)["correctness"] == 1.0
    r = run("relu", nan_blind, suite="facto")
    assert r["correctness"] == 0.0 and "NaN" in r["feedback"]


def test_torchbench_upstream_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text(
        "Operator: aten.relu.default\n"
        "cnt: 3, ((T([64, 32], f32),), {})\n"
        "cnt: 1, ((T([8, 16], bf16, [1, 8]),), {})\n"
        "Operator: aten.add.Tensor\n"
        "cnt: 2, ((T([4, 5], f32), T([5], f32)), {'alpha': 2})\n"
    )
    r = run("relu", CORRECT_RELU, suite="torchbench", trace_file=str(trace))
    assert r["outcome"] == "correct" and r["n_correctness_inputs"] == 2 and r["n_perf_inputs"] == 2
    assert any("[1, 8]" in i["args"] for i in r["inputs"])
    r = run("add", CORRECT_RELU, suite="torchbench", trace_file=str(trace))
    assert r["outcome"] == "missing_function"
    bad = tmp_path / "bad.txt"
    bad.write_text("Operator: aten.relu.default\ncnt: 1, ((__import__('os'),), {})\n")
    r = run("relu", CORRECT_RELU, suite="torchbench", trace_file=str(bad))
    assert r["outcome"] == "no_inputs" and "unsupported syntax" in r["feedback"]


def test_opinfo_inputs_come_from_op_db() -> None:
    from backendbench_runner.baselines import aten_source, reference_source

    r = run("abs.default", reference_source("abs.default"), suite="opinfo")
    assert r["outcome"] == "correct", r["feedback"]
    assert r["n_correctness_inputs"] >= 2 and {"float32", "bfloat16"} <= {i["dtype"] for i in r["inputs"]}
    assert run("abs.default", aten_source("abs.default"), suite="opinfo")["outcome"] == "calls_original_op"


def test_opinfo_suite_leaves_out_ops_this_torch_cannot_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is built on one torch; an op whose reference needs a decomposition the serving torch
    lacks is not listed (it could only be scored against nothing)."""
    import torch
    from kernel_service.backendbench.suites import opinfo_index, suite_ops
    from torch._decomp import decomposition_table

    ops = suite_ops("opinfo")
    assert ops == list(opinfo_index())  # this torch has every reference the index names
    victim = "addcdiv.default"  # its reference is PyTorch's decomposition
    assert victim in ops
    # another torch than the index's, one that lacks the decomposition (under the index's own torch its
    # listing is trusted without importing torch)
    from kernel_service.backendbench import catalog

    monkeypatch.setattr(catalog, "installed_torch", lambda: "0.0.0+another")
    monkeypatch.delitem(decomposition_table, torch.ops.aten.addcdiv.default)
    remaining = suite_ops("opinfo")
    assert victim not in remaining and len(remaining) == len(ops) - 1
    assert "add.Tensor" in remaining  # hand-written references do not depend on decompositions


#: Right in the first process that imports it, wrong in any later one (a marker in its working dir).
RIGHT_ONLY_IN_ITS_FIRST_PROCESS = """
import os
import torch
_later = os.path.exists("imported-before")
open("imported-before", "w").close()
def relu_kernel_impl(x):
    if _later:
        return x.abs()
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
"""


def test_performance_is_timed_in_fresh_pairs_of_processes_and_each_pairs_outputs_are_checked(
    forked: list[str],
) -> None:
    r = run("relu", CORRECT_RELU, perf_processes=2)
    assert r["outcome"] == "correct" and r["performance"] > 0
    assert sorted(forked) == ["candidate", "candidate", "reference", "reference"]  # a second, fresh pair
    forked.clear()
    r = run("relu", RIGHT_ONLY_IN_ITS_FIRST_PROCESS, perf_processes=2)
    assert r["outcome"] == "incorrect" and r["performance"] == 1.0
    assert "a timed call's output differs" in r["feedback"] or any(
        "a timed call's output differs" in (i["error"] or "") for i in r["inputs"]
    )
    assert forked.count("candidate") == 2
    with pytest.raises(ValidationError, match="perf_processes"):
        run("relu", CORRECT_RELU, perf_processes=0)


#: Correct, and 20 ms slower than the op on every call.
SLOW_RELU = """
import time
import torch
def relu_kernel_impl(x):
    time.sleep(0.02)
    return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
"""


@pytest.fixture
def own_baseline(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, float | None, tuple[float, ...]]]:
    """``OWN_BASELINE_ENV`` on; what the judge asked of each side, in order: a call of the op or of the
    side's callable (with its time where it was a timed reading, not a warm-up, and the sum of each
    call's first input), or the kernel's import."""
    from kernel_service.judging.judging import Run
    from kernel_service.judging.readings import OWN_BASELINE_ENV

    monkeypatch.setenv(OWN_BASELINE_ENV, "on")
    asked: list[tuple[str, str, float | None, tuple[float, ...]]] = []
    calls, ask = Run.calls, Run.ask

    def spy_calls(
        self: Run, role: str, sets: Any, timer: Any, extra: Any = None, patient: bool = True
    ) -> Any:
        call = calls(self, role, sets, timer, extra, patient)
        kind = "op" if extra and "overload" in extra else "callable"
        sums = tuple(float(args[0].sum()) for args, _ in sets) if patient else ()
        asked.append((role, kind, call.ms if patient else None, sums))
        return call

    def spy_ask(self: Run, role: str, msg: dict[str, Any], fd: int | None = None) -> Any:
        if msg.get("op") == "load_fn":
            asked.append((role, "load", None, ()))
        return ask(self, role, msg, fd)

    monkeypatch.setattr(Run, "calls", spy_calls)
    monkeypatch.setattr(Run, "ask", spy_ask)
    return asked


def test_an_own_baseline_times_the_op_in_the_candidates_process_before_its_kernel_is_imported(
    own_baseline: list[tuple[str, str, float | None, tuple[float, ...]]], forked: list[str]
) -> None:
    r = run("relu", SLOW_RELU, perf_processes=1)
    assert r["outcome"] == "correct"
    assert forked.count("candidate") == 2  # the checks' process, then a fresh one for the timing
    asked = [(role, kind) for role, kind, *_ in own_baseline]
    timing = asked[asked.index(("candidate", "load")) + 1 :]  # after the checks' import
    load = timing.index(("candidate", "load"))
    assert {c for c in timing[:load] if c[0] == "candidate"} == {("candidate", "op")}
    assert ("candidate", "callable") in timing[load:] and ("candidate", "op") not in timing[load:]
    assert ("reference", "op") in timing  # the reference process still checks every timed output
    perf = [i for i in r["inputs"] if i["kind"] == "performance"]
    # each input's op time is the median of its readings in the candidate's process (a reading each, in
    # turn), from the second of two sets: the first only settles the process (``SETTLE_KEY``)
    op_ms = [
        ms for role, kind, ms, _ in own_baseline if (role, kind) == ("candidate", "op") and ms is not None
    ]
    assert len(op_ms) % 2 == 0
    second = op_ms[len(op_ms) // 2 :]
    readings = [second[j :: len(perf)] for j in range(len(perf))]
    assert [i["ref_ms"] for i in perf] == pytest.approx([statistics.median(x) for x in readings])
    assert all(i["speedup"] < 0.5 for i in perf)  # the kernel sleeps 20 ms a call
    # the op's values in the candidate's process are its own: none of them is a value the kernel is timed
    # on, so nothing the op left behind answers the kernel's calls; the reference replays the kernel's
    values = {
        role_kind: set()
        for role_kind in (("candidate", "op"), ("candidate", "callable"), ("reference", "op"))
    }
    for role, kind, ms, sums in own_baseline:
        if ms is not None:
            values[(role, kind)].update(sums)
    assert values[("candidate", "op")] and values[("candidate", "callable")]
    assert not values[("candidate", "op")] & values[("candidate", "callable")]
    assert values[("candidate", "callable")] <= values[("reference", "op")]
    own_baseline.clear()
    r = run("relu", RIGHT_ONLY_IN_ITS_FIRST_PROCESS, perf_processes=1)
    assert r["outcome"] == "incorrect"  # imported again for the timing: its timed outputs are wrong


def test_the_timing_report_gives_every_pairs_own_baseline_against_the_reference() -> None:
    from kernel_service.backendbench.performance import OWN_KEY, Block, _spread

    def pair(own_pct: float | None) -> Block:
        gate = {"null_us": 6.7} if own_pct is None else {"null_us": 6.7, OWN_KEY: own_pct}
        return Block(kernel=[[1.0, 1.1, 0.9]], ref=[[2.0, 2.0, 2.2]], bad={}, gate=gate)

    spread = _spread([pair(1.0), pair(-9.0), pair(2.0)])
    assert spread[OWN_KEY] == pytest.approx(-2.0) and spread[f"{OWN_KEY}_widest"] == -9.0  # the mode's pair
    assert spread["pair_sd_kernel_pct"] == 0.0 and spread["reading_sd_pct"] > 0
    assert spread["pair_sd_speedup_pct"] == 0.0  # every pair read the same speedup
    odd = Block(kernel=[[2.0, 2.2, 1.8]], ref=[[2.0, 2.0, 2.2]], bad={}, gate={})
    assert _spread([pair(1.0), odd])["pair_sd_speedup_pct"] == pytest.approx(100 * 0.7071 / 1.5, abs=0.01)
    assert OWN_KEY not in _spread([pair(None), pair(None)])  # no own baseline: nothing said of it
    # the two levels' gap, pair by pair, in percent of the op's 8 us call: 1% and 2% of it
    levels = [{"own_level_us": 12.0 + gap, "candidate_level_us": 12.0} for gap in (0.08, 0.16)]
    blocks = [Block(kernel=[[0.008]], ref=[[0.008]], bad={}, gate=g) for g in levels]
    spread = _spread(blocks)
    assert spread["pair_sd_level_gap_pct"] == pytest.approx(0.707, abs=1e-3)
    # net of the op's own level (the higher), the kernel reads 1% and 2% faster (the op's readings kept); of
    # the lower of the two levels, as now (the kernel's is the lower in both pairs)
    assert spread["speedup_common_level"] == pytest.approx((1 / 0.99 + 1 / 0.98) / 2, abs=1e-4)
    assert spread["speedup_lowest_level"] == 1.0 and spread["pair_sd_speedup_lowest_level_pct"] == 0.0
    assert spread["pair_sd_speedup_common_level_pct"] > 0.5
    # a pair without the levels (none read) is left out of what the others say
    assert _spread([*blocks, pair(1.0)])["speedup_common_level"] == spread["speedup_common_level"]
    assert "pair_sd_level_gap_pct" not in _spread([pair(1.0), pair(2.0)])


def test_the_index_is_trusted_for_its_torch_release_whatever_the_build_label(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wheel's metadata may say ``2.11.0`` where ``torch.__version__`` says ``2.11.0+cu130`` (the H100
    image): the decompositions are the release's Python either way, so the index is this torch's."""
    from kernel_service.backendbench import catalog

    built = str(catalog.read_index()["torch"])
    for here, trusted in (
        (built.split("+")[0], True),
        (built.split("+")[0] + "+cu130", True),
        ("0.0.1", False),
    ):
        monkeypatch.setattr(catalog, "installed_torch", lambda here=here: here)
        assert catalog.built_for_this_torch() is trusted, here
        assert ("rebuilds the index" in catalog.index_provenance()) is not trusted
