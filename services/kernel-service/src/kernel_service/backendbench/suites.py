"""The four BackendBench suites: which ops each holds and the sample inputs each op is checked on.

* ``smoke``: six everyday ops with a few hand-picked inputs plus larger performance inputs.
* ``opinfo``: inputs from PyTorch's OpInfo database (``op_db``), selected by BackendBench's rule
  (``opinfo.py``); the op list is the index ``data/opinfo_ops.json``, built for one torch by
  ``build_opinfo_index``.
* ``torchbench``: inputs recorded from real models, in BackendBench's trace format (``traces.py``): the
  bundled small trace, a trace file, or the part of one a request carries.
* ``facto``: edge cases. Upstream draws these with FACTO (pytorch-labs/FACTO): per-overload specs of the
  valid argument space, from which up to 10 random, constraint-satisfying argument tuples are drawn per
  overload. FACTO is not on PyPI (the PyPI ``facto`` is an unrelated 2012 factorial script), so this
  suite is ours: fixed, hand-written edge cases per op family for 12 ops (empty tensors, 0-d and size-1
  tensors, transposed, gapped and expanded (stride-0) views, broadcasting, extreme values: inf, nan,
  huge, tiny, -0), not random draws from specs over all Core ATen ops; the runner's README lists the
  differences.

Everything here runs inside the worker: it builds real tensors on the evaluation device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .cases import Case, DispatchRecorder, matches_op, resolve_overload
from .catalog import (
    FACTO_OPS,
    FAMILIES,
    OPINFO_INDEX,
    SMOKE_CORRECTNESS,
    SMOKE_OPS,
    SMOKE_PERFORMANCE,
    SampleSpec,
    UnknownOpError,
    opinfo_index,
    t,
)
from .listing import suite_ops
from .opinfo import build_opinfo_index, checkable_here, opinfo_cases
from .tensors import build_arg, dtype_of
from .traces import (
    TORCHBENCH_TRACE,
    cached_trace,
    load_trace,
    parse_upstream_trace,
    torchbench_cases,
    trace_ops,
)

__all__ = [
    "OPINFO_INDEX",
    "TORCHBENCH_TRACE",
    "Case",
    "DispatchRecorder",
    "UnknownOpError",
    "build_cases",
    "build_opinfo_index",
    "checkable_here",
    "default_dtypes",
    "load_trace",
    "matches_op",
    "opinfo_index",
    "parse_upstream_trace",
    "resolve_overload",
    "suite_ops",
    "trace_ops",
]


def facto_samples(op: str) -> list[SampleSpec]:
    """Edge cases for an op's family: the inputs a hand-written kernel most often gets wrong."""
    family = FAMILIES[op][0]
    if family == "unary":
        return [
            (None, [t(0)], {}),
            (None, [t()], {}),
            (None, [t(1, 1, 1)], {}),
            (None, [t(6, 4, stride=[1, 6])], {}),  # transposed
            (None, [t(5, 3, stride=[6, 2])], {}),  # sliced with gaps
            (None, [t(4, 5, stride=[0, 1])], {}),  # expanded rows
            (None, [t(3, 10, init="special")], {}),
        ]
    if family == "binary":
        return [
            (None, [t(0, 3), t(0, 3)], {}),
            (None, [t(3, 1), t(1, 4)], {}),
            (None, [t(5), t(2, 3, 5)], {}),
            (None, [t(), t(4, 4)], {}),
            (None, [t(4, 6, stride=[1, 4]), t(4, 6)], {}),
            (None, [t(3, 5, stride=[0, 1]), t(3, 5, stride=[1, 3])], {}),
            (None, [t(1, 1), t(1, 1)], {}),
            (None, [t(2, 10, init="special"), t(2, 10, init="special")], {}),
            (None, [t(6), 0.0], {}),
        ]
    if family == "reduction":
        return [
            (None, [t(0, 4), [0]], {}),
            (None, [t(3, 1, 4), [1]], {}),
            (None, [t(5, 6, stride=[1, 5]), [-1], True], {}),
            (None, [t(2, 3, 4), [0, 1, 2]], {}),
            (None, [t(4, 10, init="special"), [1]], {}),
            (None, [t(7, 1), [0], True], {}),
        ]
    if family == "matmul":
        return [
            (None, [t(0, 5), t(5, 3)], {}),
            (None, [t(4, 0), t(0, 3)], {}),
            (None, [t(1, 1), t(1, 1)], {}),
            (None, [t(6, 5, stride=[1, 6]), t(5, 7)], {}),
            (None, [t(3, 4), t(4, 5, stride=[1, 4])], {}),
            (None, [t(2, 10, init="special"), t(10, 2)], {}),
        ]
    if family == "softmax":
        return [
            (None, [t(5, 1), -1], {}),
            (None, [t(1, 9), 1], {}),
            (None, [t(0, 4), 1], {}),
            (None, [t(6, 4, stride=[1, 6]), 0], {}),
            (None, [t(3, 8, init="special"), 1], {}),
            (None, [t(2, 3, 4), 0], {}),
        ]
    raise AssertionError(f"no edge cases for family {family!r}")


def _from_specs(
    op: str, specs: list[SampleSpec], kind: str, dtypes: list[torch.dtype], device: str, seed: int
) -> list[Case]:
    default = FAMILIES[op][1]
    cases = []
    for i, (overload, args, kwargs) in enumerate(specs):
        ovl = resolve_overload(overload or default)
        for dt in dtypes:
            gen = torch.Generator(device).manual_seed(seed * 1000 + i)  # values drawn where they are used
            built = tuple(build_arg(a, dt, device, gen) for a in args)
            kw = {k: build_arg(v, dt, device, gen) for k, v in kwargs.items()}
            cases.append(Case(ovl, built, kw, kind, str(dt).removeprefix("torch.")))
    return cases


# ---- entry point ------------------------------------------------------------------------------


def default_dtypes(device: str) -> list[str]:
    return ["float32", "bfloat16", "float16"] if device.startswith("cuda") else ["float32", "bfloat16"]


def build_cases(
    op: str,
    suite: str,
    *,
    device: str,
    dtypes: list[str],
    seed: int = 0,
    max_inputs: int = 32,
    trace_file: str | None = None,
    trace: dict[str, list[dict[str, Any]]] | None = None,
    perf_only: bool = False,
) -> tuple[list[Case], list[Case]]:
    """(correctness cases, performance cases) for ``op`` in ``suite`` on ``device``. torchbench: the
    inputs are ``trace`` (the part of a trace for ``op``, sent with the request) when given, else those
    of the trace file at ``trace_file`` (the bundled one by default). ``perf_only``: the correctness
    cases may be left out (smoke builds none then): the judge draws the performance cases afresh for
    each of hundreds of timed calls."""
    torch_dtypes = [dtype_of(d) for d in dtypes]
    base = op.split(".")[0]
    if suite in ("smoke", "facto"):
        known = SMOKE_OPS if suite == "smoke" else FACTO_OPS
        if base not in known:
            raise UnknownOpError(f"op {op!r} is not in the {suite} suite; its ops are: {', '.join(known)}")
        specs = SMOKE_CORRECTNESS[base] if suite == "smoke" else facto_samples(base)
        correctness = []
        if not (perf_only and suite == "smoke"):
            correctness = _from_specs(base, specs, "correctness", torch_dtypes, device, seed)[:max_inputs]
        perf = []
        if suite == "smoke":
            perf = _from_specs(
                base, SMOKE_PERFORMANCE[base], "performance", [torch.float32], device, seed + 1
            )
    elif suite == "torchbench":
        if trace is None:
            path = Path(trace_file) if trace_file else TORCHBENCH_TRACE
            if base not in trace_ops(path):
                raise UnknownOpError(
                    f"op {op!r} is not in trace {path.name}; its ops are: {', '.join(trace_ops(path))}"
                )
            trace = cached_trace(path)
        correctness = torchbench_cases(op, trace, device, seed, max_inputs)
        perf = [Case(c.overload, c.args, c.kwargs, "performance", c.dtype) for c in correctness[:3]]
    elif suite == "opinfo":
        correctness, perf = opinfo_cases(op, device, torch_dtypes, max_inputs), []
    else:
        raise UnknownOpError(f"unknown suite {suite!r}; expected smoke, opinfo, torchbench or facto")
    correctness = [c for c in correctness if matches_op(op, c.overload)]
    perf = [c for c in perf if matches_op(op, c.overload)]
    return correctness, perf
