"""Batch judging in-process (``evaluator.evaluate_batch``, real side processes): one reference process,
one candidate process the kernels share, and per kernel the verdict it gets alone, whatever the others do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernel_service.backendbench.evaluator import evaluate, evaluate_batch
from kernel_service.backendbench.references import reference_source
from kernel_service.backendbench_service import split_batch

FAST = {"perf_trials": 3, "warmup": 1}


def req(op: str, source: str, suite: str = "opinfo", **options: Any) -> dict[str, Any]:
    return {
        "dataset": f"backendbench-{suite}",
        "op": op,
        "suite": suite,
        "source": source,
        "options": {**FAST, **options},
    }


def ref(op: str, suite: str = "opinfo", **options: Any) -> dict[str, Any]:
    source = reference_source(op)
    assert source is not None
    return req(op, source, suite, **options)


def untimed(inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-input results without the timings (they differ from one measurement to the next)."""
    return [{k: v for k, v in i.items() if not k.endswith("_ms") and k != "speedup"} for i in inputs]


def verdicts(requests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = evaluate_batch(requests)["verdicts"]
    assert len(out) == len(requests)
    return {v["op"]: v for v in out}


def test_a_batch_gives_each_kernel_the_verdict_it_gets_alone() -> None:
    wrong_max = "import torch\ndef max__dim_kernel_impl(x, dim, keepdim=False):\n    return torch.amax(x, dim, keepdim), torch.argmin(x, dim, keepdim)\n"
    requests = [
        ref("abs.default"),
        ref("sort.default"),
        req("max.dim", wrong_max),  # the second output (the indices) is wrong
        ref("add.Tensor"),
        ref("relu", "smoke"),  # timed: its performance inputs run in a candidate process of their own
        req("neg.default", "x = 1\n"),  # missing function
        req("tanh.default", "def (\n"),  # does not import
        ref("abs.default", device="cuda"),  # no GPU here
    ]
    batch = evaluate_batch(requests)["verdicts"]
    alone = [evaluate(r) for r in requests]
    for b, a in zip(batch, alone, strict=True):
        assert (b["op"], b["outcome"], b["correctness"]) == (a["op"], a["outcome"], a["correctness"])
        assert (b["n_correctness_inputs"], b["n_perf_inputs"], b["n_correct"]) == (
            a["n_correctness_inputs"], a["n_perf_inputs"], a["n_correct"]
        )  # fmt: skip
        assert untimed(b["inputs"]) == untimed(a["inputs"])
    assert [v["outcome"] for v in batch] == [
        "correct",  # abs.default
        "correct",  # sort.default
        "incorrect",  # max.dim
        "correct",  # add.Tensor
        "correct",  # relu (smoke, timed)
        "missing_function",  # neg.default
        "load_error",  # tanh.default
        "requires_gpu",  # abs.default on cuda
    ]
    timed = [i for i in batch[4]["inputs"] if i["kind"] == "performance"]
    assert timed and all(i["speedup"] and i["kernel_ms"] > 0 for i in timed)
    assert "output[1]" in batch[2]["feedback"]  # the judge read the second output from its own offset


def test_only_the_first_kernel_of_a_batch_waits_for_side_processes_to_start() -> None:
    """``startup_s``: the seconds an op's judging spent starting side processes. The kernels of a batch
    share the candidate process (its answers kept, no reference process either after the first op)."""
    ops = ["abs.default", "neg.default", "relu.default", "add.Tensor"]
    evaluate_batch([ref(op) for op in ops])  # the reference's answers kept for the second batch
    out = evaluate_batch([ref(op) for op in ops])["verdicts"]
    assert [v["outcome"] for v in out] == ["correct"] * 4
    first, *rest = (v["startup_s"] for v in out)
    assert 0 < first <= out[0]["duration_s"] and rest == [0.0] * 3, [v["startup_s"] for v in out]
    assert split_batch(287, 1) == [range(287)]  # the opinfo suite on one worker: one job, one start


def test_a_kernel_that_sabotages_the_shared_process_cannot_fail_another(tmp_path: Path) -> None:
    """relu's kernel swaps torch.where's branches for every later kernel of its process; abs's kernel
    (which uses torch.where) fails there, so it is judged again in a process of its own, and passes."""
    marker = tmp_path / "abs_runs.txt"
    sabotage = (
        "import torch\n_where = torch.where\n"
        "torch.where = lambda c, a, b: _where(c, b, a)\n"
        "def relu__default_kernel_impl(x):\n    return torch.clamp(x, min=0)\n"
    )
    victim = reference_source("abs.default") + (
        "\n_abs = abs__default_kernel_impl\n\n\ndef abs__default_kernel_impl(x):\n"
        f"    with open({str(marker)!r}, 'a') as f:\n"
        "        f.write('clean\\n' if torch.where is torch._C._VariableFunctions.where else 'patched\\n')\n"
        "    return _abs(x)\n"
    )
    v = verdicts([req("relu.default", sabotage), req("abs.default", victim), ref("neg.default")])
    assert {op: x["outcome"] for op, x in v.items()} == {
        "relu.default": "correct",
        "abs.default": "correct",
        "neg.default": "correct",
    }
    runs = marker.read_text().split()
    assert "patched" in runs and "clean" in runs  # failed where it shared, passed where it did not


def test_a_hanging_or_crashing_kernel_costs_only_its_own_verdict() -> None:
    hang = "def relu__default_kernel_impl(x):\n    while True:\n        pass\n"
    crash = "import os, signal\ndef neg__default_kernel_impl(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    v = verdicts(
        [
            ref("add.Tensor"),
            req("relu.default", hang, timeout_s=3.0),
            ref("abs.default"),
            req("neg.default", crash),
            ref("sub.Tensor"),
        ]
    )
    assert v["relu.default"]["outcome"] == "timeout" and "timeout_s=3" in v["relu.default"]["feedback"]
    assert v["neg.default"]["outcome"] == "execution_failure" and "SIGSEGV" in v["neg.default"]["feedback"]
    assert all(v[op]["outcome"] == "correct" for op in ("add.Tensor", "abs.default", "sub.Tensor"))
    assert 3.0 <= v["relu.default"]["duration_s"] < 30.0  # its own deadline, not the batch's


def test_inputs_a_kernel_fails_on_are_reported_one_by_one() -> None:
    """Many inputs share one call while they pass; an input the kernel raised on, or whose output is not a
    tensor, is judged alone, with the kernel's own error and line."""
    bf16_raises = (
        "import torch\ndef abs__default_kernel_impl(x):\n    if x.dtype == torch.bfloat16:\n"
        "        raise ValueError('no bf16 here')\n    return torch.where(x < 0, -x, x)\n"
    )
    numpy_out = "import torch\ndef neg__default_kernel_impl(x):\n    return x.float().mul(-1).numpy()\n"
    v = verdicts([req("abs.default", bf16_raises), req("neg.default", numpy_out)])
    failing = [i for i in v["abs.default"]["inputs"] if not i["correct"]]
    assert v["abs.default"]["outcome"] == "incorrect" and {i["dtype"] for i in failing} == {"bfloat16"}
    assert all("ValueError: no bf16 here" in i["error"] and "line 4" in i["error"] for i in failing)
    assert any(i["correct"] for i in v["abs.default"]["inputs"])
    assert v["neg.default"]["outcome"] == "incorrect"
    assert all("return plain torch.Tensor values" in i["error"] for i in v["neg.default"]["inputs"])


def test_split_batch_gives_every_worker_a_job_and_bounds_the_job_size() -> None:
    assert split_batch(0, 4) == []
    assert [len(r) for r in split_batch(3, 8)] == [1, 1, 1]
    assert [len(r) for r in split_batch(10, 2)] == [5, 5]
    chunks = split_batch(300, 1, max_per_job=128)
    assert [len(r) for r in chunks] == [100, 100, 100]
    assert sorted(i for r in chunks for i in r) == list(range(300))  # every op once
    assert split_batch(300, 1, max_per_job=128) == chunks  # the same batch, the same chunks: ops stay warm


def test_split_batch_spreads_ops_that_sit_together() -> None:
    """Costly ops come together in a suite's name order; two workers' chunks must share them."""
    costs = [10.0] * 40 + [1.0] * 244  # the first 40 ops cost ten times the rest
    first, second = (sum(costs[i] for i in r) for r in split_batch(len(costs), 2))
    assert max(first, second) / min(first, second) < 1.05, (first, second)


def test_the_kernel_never_sees_an_input_the_op_rejects() -> None:
    """A trace may hold inputs the op itself rejects (they are not tests); grouped or alone, the kernel is
    not called on them, so a kernel that would crash there is still correct."""
    from kernel_service.backendbench.traces import parse_upstream_trace

    trace = parse_upstream_trace(
        "Operator: aten.mm.default\n"
        "cnt: 4, ((T([6, 3], f32), T([3, 5], f32)), {})\n"
        "cnt: 1, ((T([6, 4], f32), T([3, 5], f32)), {})\n"  # mismatched: the op raises
        "cnt: 2, ((T([2, 7], f32), T([7, 2], f32)), {})\n"
    )
    crashes_on_mismatch = reference_source("mm") + (
        "\nimport os, signal\n_mm = mm_kernel_impl\n\n\ndef mm_kernel_impl(a, b):\n"
        "    if a.shape[1] != b.shape[0]:\n        os.kill(os.getpid(), signal.SIGSEGV)\n    return _mm(a, b)\n"
    )
    request = req("mm", crashes_on_mismatch, "torchbench", trace=trace)
    for verdict in (evaluate_batch([request, ref("abs.default")])["verdicts"][0], evaluate(request)):
        assert verdict["outcome"] == "correct", verdict["feedback"]
        assert verdict["n_correctness_inputs"] == 2


def test_a_group_a_side_cannot_answer_is_checked_input_by_input() -> None:
    """Where one call of a group cannot come back (more outputs than the judge reads from one answer), or
    the function that runs a group cannot be loaded (the kernel removed its own module), the inputs go
    one call each, and each gets its own verdict."""
    from kernel_service.backendbench.traces import parse_upstream_trace

    many = "def relu__default_kernel_impl(x):\n    return [x.clamp(min=0)] * 5000\n"
    v = verdicts([req("relu.default", many), ref("abs.default")])
    failing = v["relu.default"]["inputs"]
    assert v["relu.default"]["outcome"] == "incorrect" and failing
    assert all("more than 4096 values" in i["error"] for i in failing)
    assert v["abs.default"]["outcome"] == "correct"

    vanishing = reference_source("neg.default") + "\nimport sys\ndel sys.modules[__name__]\n"
    v = verdicts([ref("abs.default"), req("neg.default", vanishing)])
    assert v["neg.default"]["outcome"] == "correct" and v["neg.default"]["n_correctness_inputs"] > 1

    # removed on its first call, from inside a group that cannot come back: imported anew to go one by one
    gone_later = (
        "import sys\ndef relu__default_kernel_impl(x):\n    sys.modules.pop(__name__, None)\n"
        "    return [x.clamp(min=0)] * 5000\n"
    )
    v = verdicts([ref("abs.default"), req("relu.default", gone_later)])
    assert v["relu.default"]["inputs"] and all(
        "more than 4096 values" in i["error"] for i in v["relu.default"]["inputs"]
    )  # each input reached the kernel itself, not the function that runs a group

    # the op's own answer for one input of the group is too big to read: that input is not a test
    trace = parse_upstream_trace(
        "Operator: aten.unbind.int\ncnt: 1, ((T([5000, 1], f32),), {})\ncnt: 1, ((T([3, 2], f32),), {})\n"
    )
    v = verdicts([ref("unbind", "torchbench", trace=trace)])
    assert v["unbind"]["outcome"] == "correct" and v["unbind"]["n_correctness_inputs"] == 1


def test_the_dispatch_recorder_keeps_no_tensor_alive() -> None:
    """The recorder around a kernel keeps each op it saw once, without arguments: a kernel's intermediates
    are freed as it goes (a blocked matmul on torchbench shapes once held 23 GB and was OOM-killed)."""
    import gc
    import weakref

    import torch
    from kernel_service.backendbench.cases import DispatchRecorder

    seen: list[weakref.ref[torch.Tensor]] = []
    x = torch.ones(64)
    with DispatchRecorder() as rec:
        for _ in range(50):
            y = x * 2
            seen.append(weakref.ref(y))
            x = y - 1
    del y
    gc.collect()
    assert sum(r() is not None for r in seen) <= 1  # only the last result, still held as x
    assert sorted(str(f) for f, _, _ in rec.calls) == ["aten.mul.Tensor", "aten.sub.Tensor"]
    with DispatchRecorder(keep_args=True) as traced:
        torch.ones(3).add(1)
    assert [str(f) for f, _, _ in traced.calls][-1] == "aten.add.Tensor" and traced.calls[-1][1]


def test_the_vectorised_reference_kernels_pass_their_opinfo_inputs() -> None:
    """mode, scatter_reduce and index_reduce once looped over elements (a GPU sync each); now they work
    on whole tensors, and must still match the ops on every opinfo input, NaNs and ties included."""
    ops = ("mode.default", "scatter_reduce.two", "index_reduce.default")
    got = verdicts([ref(op) for op in ops])
    for op in ops:
        assert got[op]["outcome"] == "correct", got[op]["feedback"]
        assert got[op]["n_correct"] == got[op]["n_correctness_inputs"] > 0
