"""Parity with upstream BackendBench: the opinfo suite selected by its rule (the index rebuilt here agrees
with the bundled one; at least 95% of the 298 overloads BackendBench tested on an H100 are listed, every
other one with its reason), and torchbench read from its trace format."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from backendbench_runner.cli import cli
from click.testing import CliRunner
from kernel_service.backendbench.opinfo import (
    BACKENDBENCH_OPS,
    REASON_RANDOM,
    REASON_SPARSE,
    REASON_UNINITIALISED,
    REASON_UPSTREAM,
    build_opinfo_index,
    coverage,
    read_index,
)
from kernel_service.backendbench.suites import build_cases, suite_ops
from kernel_service.backendbench.tensors import SpecError
from kernel_service.backendbench.traces import load_trace, parse_upstream_trace, trace_ops, write_trace


def backendbench_ops() -> list[str]:
    lines = BACKENDBENCH_OPS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_opinfo_suite_lists_at_least_95_percent_of_backendbench_s_ops_and_says_why_not_the_rest() -> None:
    wanted = backendbench_ops()
    assert len(wanted) == 298
    listed, missing = coverage(wanted, read_index())
    assert len(listed) >= math.ceil(0.95 * len(wanted))
    known = (REASON_RANDOM, REASON_SPARSE, REASON_UNINITIALISED, REASON_UPSTREAM)
    assert missing and all(why.startswith(known) for why in missing.values()), missing
    assert set(listed) <= set(suite_ops("opinfo"))

    result = CliRunner().invoke(cli, ["list-tasks", "--suite", "opinfo"])
    assert result.exit_code == 0, result.output
    assert f"opinfo index built with torch {torch.__version__} on cpu" in result.output  # on stderr
    assert sum(line.startswith("opinfo/") for line in result.output.splitlines()) == len(suite_ops("opinfo"))


def test_the_index_rebuilt_here_agrees_with_the_bundled_one() -> None:
    entries = ["acos", "addcdiv", "max.reduction_with_dim", "nn.functional.avg_pool2d", "softmax"]
    entries += ["bernoulli", "uniform", "empty_like", "to_sparse"]
    built = build_opinfo_index("cpu", entries=entries)
    bundled = read_index()
    assert built["torch"] == torch.__version__ and built["device"] == "cpu"
    assert set(built["ops"]) == {
        "acos.default",
        "addcdiv.default",
        "max.dim",
        "avg_pool2d.default",
    }  # softmax's samples reach aten._softmax, which does not take softmax's own arguments: not selected
    for op, names in built["ops"].items():
        assert set(names) <= set(bundled["ops"][op])
    assert built["excluded"] == {
        "bernoulli.default": REASON_UPSTREAM,
        "uniform_.default": bundled["excluded"]["uniform_.default"],
        "empty_like.default": REASON_UNINITIALISED,
        "_to_sparse.default": REASON_SPARSE,
        "_to_sparse.sparse_dim": REASON_SPARSE,
    }
    assert bundled["excluded"]["uniform_.default"].startswith(REASON_RANDOM)


UPSTREAM_TRACE = """\
# a comment line: upstream's reader skips what is neither an Operator: nor a cnt: line
Operator: aten.sum.SymInt
cnt: 3, ((T([8, 16], f32), [1]), {})
cnt: 3, ((T([8, 16], f32), [1]), {})
cnt: 1, ((T([2, 3, 4], bf16, [1, 2, 6]), [-1, 0], True), {})
Operator: aten._to_copy.default
cnt: 5, ((T([4, 6], f32),), {'dtype': torch.float16, 'layout': torch.strided, 'device': 'cuda', 'pin_memory': False})
cnt: 0, ((T([2, 3, 4, 5], f16),), {'dtype': torch.float32, 'memory_format': torch.channels_last, 'device': "torch.device('cuda:0')"})
Operator: aten.clamp.default
cnt: 2, ((T([64], f32), -inf, 0.5), {})
Operator: aten.embedding.default
cnt: 9, ((T([100, 8], f32), T([4, 7], i64)), {})
"""


def test_upstream_trace_format() -> None:
    ops = parse_upstream_trace(UPSTREAM_TRACE)
    assert list(ops) == [
        "aten.sum.dim_IntList",
        "aten._to_copy.default",
        "aten.clamp.default",
        "aten.embedding.default",
    ]
    assert [e["cnt"] for e in ops["aten.sum.dim_IntList"]] == [3, 1]  # the duplicate line counts once
    kwargs = ops["aten._to_copy.default"][1]["kwargs"]
    assert kwargs == {
        "dtype": {"dtype": "float32"},
        "memory_format": {"memory_format": "channels_last"},
        "device": {"device": "$"},
    }
    assert ops["aten.clamp.default"][0]["args"][1] == -math.inf
    assert parse_upstream_trace(write_trace(ops)) == ops  # written back in the same format
    for bad in (
        "((__import__('os'),), {})",
        "((T([2], f32).numpy(),), {})",
        "((lambda: 0,), {})",
        "((os.system,), {})",
    ):
        with pytest.raises(SpecError):
            parse_upstream_trace(f"Operator: aten.relu.default\ncnt: 1, {bad}\n")


def test_trace_inputs_follow_upstream(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text(UPSTREAM_TRACE)
    assert trace_ops(trace) == ["sum", "_to_copy", "clamp"]  # embedding: upstream leaves it out
    assert load_trace(trace) == parse_upstream_trace(UPSTREAM_TRACE)
    cases, perf = build_cases("sum", "torchbench", device="cpu", dtypes=["float32"], trace_file=str(trace))
    assert [c.overload_name for c in cases] == ["aten.sum.dim_IntList"] * 2
    assert [tuple(c.args[0].shape) for c in cases] == [(8, 16), (2, 3, 4)]  # largest first
    assert cases[1].args[0].stride() == (1, 2, 6) and cases[1].args[0].dtype == torch.bfloat16
    x = cases[0].args[0]
    assert float(x.min()) >= 0.0 and float(x.max()) < 1.0  # floats uniform in [0, 1), as upstream's T()
    assert len(perf) == 2 and all(p.kind == "performance" for p in perf)
    copies, _ = build_cases("_to_copy", "torchbench", device="cpu", dtypes=["float32"], trace_file=str(trace))
    big, small = copies  # largest first: 120 f16 elements, then 24 f32 ones
    assert big.kwargs["memory_format"] is torch.channels_last and big.kwargs["dtype"] is torch.float32
    assert big.kwargs["device"] == torch.device("cpu") and big.args[0].dtype == torch.float16
    device = torch.device("cpu")  # the trace says cuda: inputs go to the evaluation device
    assert small.kwargs == {
        "dtype": torch.float16,
        "layout": torch.strided,
        "device": device,
        "pin_memory": False,
    }
    capped, _ = build_cases(
        "sum", "torchbench", device="cpu", dtypes=["float32"], trace_file=str(trace), max_inputs=1
    )
    assert [tuple(c.args[0].shape) for c in capped] == [(8, 16)]


def test_the_bundled_trace_is_in_upstream_s_format() -> None:
    from kernel_service.backendbench.traces import TORCHBENCH_TRACE

    text = TORCHBENCH_TRACE.read_text()
    assert TORCHBENCH_TRACE.suffix == ".txt" and text.count("Operator: aten.") == len(trace_ops())
    assert all(line.startswith(("#", "Operator: ", "cnt: ")) for line in text.splitlines() if line)


def test_a_request_carries_its_trace_inputs_and_bad_ones_are_refused() -> None:
    """The runner sends an op's trace inputs with the request (the sandboxed worker reads no file of the
    caller's); what is malformed or too large is a verdict of no inputs, not a crash of the judge."""
    from kernel_service.backendbench.evaluator import evaluate
    from kernel_service.backendbench.references import reference_source

    def run(trace: dict[str, object]) -> dict[str, object]:
        body = {"dataset": "backendbench-torchbench", "op": "relu", "suite": "torchbench"}
        options = {"trace": trace, "perf_trials": 2, "warmup": 0}
        return evaluate({**body, "source": reference_source("relu"), "options": options})

    good = parse_upstream_trace("Operator: aten.relu.default\ncnt: 2, ((T([7, 5], f32, [1, 7]),), {})\n")
    r = run(good)
    assert r["outcome"] == "correct" and r["n_correctness_inputs"] == 1 and "[1, 7]" in r["inputs"][0]["args"]
    for bad, why in [
        ({"aten.relu.default": [{"cnt": 1, "args": [{"T": [1 << 20, 1 << 20], "dtype": "f32"}]}]}, "at most"),
        ({"aten.relu.default": [{"cnt": 1, "args": [{"T": [4], "stride": [-1]}]}]}, "strides must be"),
        ({"aten.relu.default": [{"cnt": 1, "args": [{"T": ["x"]}]}]}, "list of ints"),
        ({"aten.relu.default": [{"cnt": 1, "args": {"T": [4]}}]}, "'args' list"),
    ]:
        r = run(bad)
        assert r["outcome"] == "no_inputs" and why in str(r["feedback"]), r["feedback"]


@pytest.mark.parametrize("suite", ["smoke", "torchbench"])
def test_performance_inputs_drawn_alone_equal_those_built_with_the_correctness_ones(suite: str) -> None:
    for op in suite_ops(suite)[:6]:
        for seed in (0, 5):
            _, perf = build_cases(op, suite, device="cpu", dtypes=["float32"], seed=seed)
            _, alone = build_cases(op, suite, device="cpu", dtypes=["float32"], seed=seed, perf_only=True)
            assert [c.overload for c in alone] == [c.overload for c in perf], op
            for a, b in zip(alone, perf, strict=True):
                flat_a = [x for x in (*a.args, *a.kwargs.values()) if isinstance(x, torch.Tensor)]
                flat_b = [x for x in (*b.args, *b.kwargs.values()) if isinstance(x, torch.Tensor)]
                assert all(torch.equal(x, y) for x, y in zip(flat_a, flat_b, strict=True)), op


#: A runner process: ``run`` through a service over HTTP, then which heavy modules it imported.
RUNNER_PROCESS = """
import json, sys
from backendbench_runner.cli import main
sys.argv = ["backendbench-runner", *sys.argv[1:]]
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "imported": sorted(m for m in ("torch", "fastapi", "numpy") if m in sys.modules)}))
"""


def test_a_runner_lists_names_and_submits_an_opinfo_suite_without_importing_torch(
    backendbench_service_url: str, tmp_path: Path
) -> None:
    """The runner talks to the service over HTTP: its process needs no torch to list the opinfo suite,
    write the reference kernels and send them (a torch import was 2.6 s of its start on the H100)."""
    import json
    import os
    import subprocess
    import sys

    from kernel_service.backendbench.catalog import built_for_this_torch

    assert built_for_this_torch()  # the bundled index is this torch's (else the runner checks with torch)
    args = ["run", "--model", "reference", "--suite", "opinfo", "--ops", "abs.default,addcdiv.default"]
    args += ["--run-id", "light", "--service-url", backendbench_service_url, "--output-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", RUNNER_PROCESS, *args],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=600,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "imported": []}, done.stdout[-2000:] + done.stderr[-2000:]
    score = json.loads((tmp_path / "light" / "score.json").read_text())
    assert score["n_tasks"] == 2 and score["metrics"]["correctness"] == 1.0, score
