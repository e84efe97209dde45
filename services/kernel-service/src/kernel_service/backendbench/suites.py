"""The four BackendBench suites: which ops each holds and the sample inputs each op is checked on.

* ``smoke``: six everyday ops with a few hand-picked inputs plus larger performance inputs.
* ``opinfo``: inputs from PyTorch's OpInfo database (``op_db``), kept only where a sample dispatches to
  exactly one aten op; the op list (``data/opinfo_ops.json``) is built by ``build_opinfo_index``.
* ``torchbench``: inputs recorded from real models: a small trace of our own in ``data/``, or a larger
  trace file (our JSON format, or upstream's text format, parsed without ``eval``).
* ``facto``: edge cases. The PyPI package named ``facto`` is an unrelated 2012 factorial script and
  Meta's FACTO is not on PyPI, so we generate edge cases ourselves: empty tensors, size-1 dims,
  non-contiguous and expanded (stride-0) views, broadcasting, 0-d tensors, extreme values (inf, nan,
  huge, tiny, -0).

Everything here runs inside the worker: it builds real tensors on the evaluation device.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from .tensors import SpecError, build_arg, dtype_of, first_float_dtype, nbytes

DATA_DIR = Path(__file__).parent / "data"
TORCHBENCH_TRACE = DATA_DIR / "torchbench_small.json"
OPINFO_INDEX = DATA_DIR / "opinfo_ops.json"


class UnknownOpError(ValueError):
    """The op is not part of the suite (the message lists the suite's ops)."""


@dataclass
class Case:
    """One call of the op under test: the aten overload, its arguments, and what the call is for."""

    overload: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    kind: str = "correctness"  # or "performance"
    dtype: str | None = None

    @property
    def overload_name(self) -> str:
        return str(self.overload)


def resolve_overload(name: str) -> torch._ops.OpOverload:
    """``aten.add.Tensor`` / ``add.Tensor`` -> the OpOverload; a clear error otherwise."""
    parts = name.split(".")
    if parts[0] == "aten":
        parts = parts[1:]
    if len(parts) == 1:
        parts.append("default")
    try:
        packet = getattr(torch.ops.aten, parts[0])
        return getattr(packet, parts[1])
    except (AttributeError, RuntimeError):
        raise SpecError(f"no aten overload named {name!r}") from None


def matches_op(op: str, overload: torch._ops.OpOverload) -> bool:
    """``add`` matches every overload of aten.add; ``add.Tensor`` matches only that one."""
    packet = overload.overloadpacket.__name__
    if "." in op:
        base, ovl = op.split(".", 1)
        return packet == base and overload._overloadname == ovl
    return packet == op


# ---- op families (shared by smoke and facto) --------------------------------------------------

T = dict[str, Any]


def t(*shape: int, init: str = "randn", dtype: str = "$", stride: list[int] | None = None) -> T:
    spec: T = {"T": list(shape), "dtype": dtype, "init": init}
    if stride is not None:
        spec["stride"] = stride
    return spec


#: op -> (family, default overload). The family decides which edge cases facto generates.
FAMILIES: dict[str, tuple[str, str]] = {
    "add": ("binary", "aten.add.Tensor"),
    "sub": ("binary", "aten.sub.Tensor"),
    "mul": ("binary", "aten.mul.Tensor"),
    "relu": ("unary", "aten.relu.default"),
    "neg": ("unary", "aten.neg.default"),
    "abs": ("unary", "aten.abs.default"),
    "sigmoid": ("unary", "aten.sigmoid.default"),
    "sum": ("reduction", "aten.sum.dim_IntList"),
    "mean": ("reduction", "aten.mean.dim"),
    "amax": ("reduction", "aten.amax.default"),
    "mm": ("matmul", "aten.mm.default"),
    "softmax": ("softmax", "aten.softmax.int"),
}

#: (overload or None for the family default, args, kwargs)
SampleSpec = tuple[str | None, list[Any], dict[str, Any]]

SMOKE_CORRECTNESS: dict[str, list[SampleSpec]] = {
    "add": [
        (None, [t(2, 3), t(2, 3)], {}),
        (None, [t(4, 1), t(1, 5)], {}),
        (None, [t(3, 4), t(3, 4)], {"alpha": 2}),
        (None, [t(8), 1.5], {}),
    ],
    "mul": [(None, [t(2, 3), t(2, 3)], {}), (None, [t(4, 1), t(1, 5)], {}), (None, [t(8), -0.5], {})],
    "relu": [(None, [t(2)], {}), (None, [t(16, 33)], {})],
    "sum": [
        ("aten.sum.default", [t(7, 5)], {}),
        (None, [t(4, 6), [1]], {}),
        (None, [t(3, 4, 5), [0, 2], True], {}),
    ],
    "mm": [(None, [t(8, 16), t(16, 4)], {}), (None, [t(1, 33), t(33, 7)], {})],
    "softmax": [(None, [t(4, 10), -1], {}), (None, [t(3, 5, 7), 1], {})],
}
SMOKE_PERFORMANCE: dict[str, list[SampleSpec]] = {
    "add": [(None, [t(1024, 1024), t(1024, 1024)], {})],
    "mul": [(None, [t(1024, 1024), t(1024, 1024)], {})],
    "relu": [(None, [t(1024, 1024)], {})],
    "sum": [(None, [t(1024, 1024), [1]], {})],
    "mm": [(None, [t(256, 256), t(256, 256)], {})],
    "softmax": [(None, [t(512, 1024), -1], {})],
}
SMOKE_OPS = tuple(SMOKE_CORRECTNESS)
FACTO_OPS = tuple(FAMILIES)


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
            gen = torch.Generator().manual_seed(seed * 1000 + i)
            built = tuple(build_arg(a, dt, device, gen) for a in args)
            kw = {k: build_arg(v, dt, device, gen) for k, v in kwargs.items()}
            cases.append(Case(ovl, built, kw, kind, str(dt).removeprefix("torch.")))
    return cases


# ---- torchbench traces ------------------------------------------------------------------------


def _literal(node: ast.AST) -> Any:
    """Safely turn one node of an upstream trace line into a JSON arg spec (no eval)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node.operand)
        if not isinstance(value, (int, float)):
            raise SpecError("unary minus on a non-number")
        return -value
    if isinstance(node, ast.Name):
        if node.id == "inf":
            return float("inf")
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        dtype_of(node.id)
        return {"dtype": node.id}
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("torch", "th")
    ):
        dtype_of(node.attr)
        return {"dtype": node.attr}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "T":
        parts = [_literal(a) for a in node.args]
        spec: T = {"T": parts[0], "dtype": parts[1]["dtype"] if len(parts) > 1 else "f32", "init": "randn"}
        if len(parts) > 2:
            spec["stride"] = parts[2]
        return spec
    if isinstance(node, ast.Dict):
        return {
            _literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None
        }
    raise SpecError(f"unsupported syntax in trace: {ast.dump(node)[:80]}")


def parse_upstream_trace(text: str) -> dict[str, list[dict[str, Any]]]:
    """Upstream's ``Operator: aten.x.y`` / ``cnt: N, ((args), {kwargs})`` text into our JSON shape."""
    ops: dict[str, list[dict[str, Any]]] = {}
    current: str | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if m := re.match(r"Operator: (\S+)", line):
            current = m.group(1)
            ops.setdefault(current, [])
        elif m := re.match(r"cnt: (\d+), (.*)", line):
            if current is None:
                raise SpecError(f"trace line {lineno}: inputs before any 'Operator:' line")
            try:
                parsed = _literal(ast.parse(m.group(2).strip(), mode="eval").body)
            except SyntaxError as exc:
                raise SpecError(f"trace line {lineno}: {exc.msg}") from None
            args, kwargs = parsed if isinstance(parsed, list) and len(parsed) == 2 else (parsed, {})
            ops[current].append({"cnt": int(m.group(1)), "args": args, "kwargs": kwargs})
    return ops


def load_trace(path: Path) -> dict[str, list[dict[str, Any]]]:
    """A trace file: our JSON (``{"ops": {overload: [{"args", "kwargs", "cnt"}]}}``) or upstream text."""
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
            raise SpecError(f"{path}: expected a JSON object with an 'ops' mapping")
        return data["ops"]
    return parse_upstream_trace(text)


@lru_cache(maxsize=4)
def _cached_trace(path: str) -> dict[str, list[dict[str, Any]]]:
    return load_trace(Path(path))


def trace_ops(path: Path | None = None) -> list[str]:
    """The op (packet) names a trace holds, e.g. ``add`` for ``aten.add.Tensor``."""
    names = []
    for overload in _cached_trace(str(path or TORCHBENCH_TRACE)):
        name = overload.split(".")[1] if overload.startswith("aten.") else overload.split(".")[0]
        if name not in names:
            names.append(name)
    return names


def _torchbench_cases(op: str, path: Path, device: str, seed: int, max_inputs: int) -> list[Case]:
    cases = []
    for overload_name, entries in _cached_trace(str(path)).items():
        overload = resolve_overload(overload_name)
        if not matches_op(op, overload):
            continue
        for i, entry in enumerate(entries):
            gen = torch.Generator().manual_seed(seed * 1000 + i)
            args = tuple(build_arg(a, torch.float32, device, gen) for a in entry["args"])
            kwargs = {k: build_arg(v, torch.float32, device, gen) for k, v in entry.get("kwargs", {}).items()}
            dt = first_float_dtype(args)
            cases.append(
                Case(overload, args, kwargs, "correctness", str(dt).removeprefix("torch.") if dt else None)
            )
    cases.sort(key=lambda c: nbytes(c.args), reverse=True)  # the largest inputs matter most, as upstream
    return cases[:max_inputs]


# ---- opinfo -----------------------------------------------------------------------------------


class DispatchRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Records every op that reaches the dispatcher (composite ops appear as what they decompose to)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


@lru_cache(maxsize=1)
def _op_db() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db  # ~5 s: numpy, expecttest

    return {info.full_name if hasattr(info, "full_name") else info.name: info for info in op_db}


def opinfo_index() -> dict[str, list[str]]:
    """op overload (``add.Tensor``) -> OpInfo names whose samples dispatch to it (``data/opinfo_ops.json``)."""
    return json.loads(OPINFO_INDEX.read_text())["ops"]


def _single_op_samples(info: Any, device: str, dtype: torch.dtype) -> list[Case]:
    """Samples of one OpInfo that dispatch to exactly one aten op, as calls of that op."""
    cases = []
    try:
        samples = list(info.sample_inputs(device, dtype))
    except Exception:
        return []
    for sample in samples:
        rec = DispatchRecorder()
        try:
            with rec:
                info.op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue
        if len(rec.calls) != 1 or not isinstance(rec.calls[0][0], torch._ops.OpOverload):
            continue
        func, args, kwargs = rec.calls[0]
        if func.namespace != "aten":
            continue
        cases.append(Case(func, tuple(args), dict(kwargs), "correctness", str(dtype).removeprefix("torch.")))
    return cases


def _opinfo_cases(op: str, device: str, dtypes: list[torch.dtype], max_inputs: int) -> list[Case]:
    index = opinfo_index()
    keys = [k for k in index if k == op or k.split(".")[0] == op]
    if not keys:
        raise UnknownOpError(f"op {op!r} is not in the opinfo suite; its ops are: {', '.join(sorted(index))}")
    names = list(dict.fromkeys(n for k in keys for n in index[k]))
    db = _op_db()
    per_dtype: list[list[Case]] = []
    for dtype in dtypes:
        found: list[Case] = []
        for name in names:
            info = db.get(name)
            if info is None or dtype not in info.supported_dtypes(device):
                continue
            found += [c for c in _single_op_samples(info, device, dtype) if matches_op(op, c.overload)]
        per_dtype.append(found)
    # Interleave dtypes so a cap keeps every dtype represented.
    merged: list[Case] = []
    for i in range(max(map(len, per_dtype), default=0)):
        merged += [cases[i] for cases in per_dtype if i < len(cases)]
    return merged[:max_inputs]


def _clean_decomposition(cases: list[Case], decomposition: Any) -> bool:
    """Whether PyTorch's decomposition passes the evaluator's own checks on ``cases`` without calling the op."""
    from .detect import forbidden_packets
    from .evaluator import check_case
    from .schemas import BackendBenchEvalRequest

    if decomposition is None or not cases:
        return False
    op = str(cases[0].overload).split(".", 1)[1]
    forbidden = forbidden_packets(op, cases)
    req = BackendBenchEvalRequest(dataset="backendbench-opinfo", op=op, suite="opinfo", source="")
    for case in cases:
        result, called = check_case(decomposition, case, req, "cpu", "")
        if called & forbidden or (result is not None and not result.correct):
            return False
    return True


SKIPPED_PACKETS = {
    "empty",
    "empty_like",
    "new_empty",
    "rand",
    "randn",
    "bernoulli",
    "normal",
    "uniform",
    "multinomial",
}


def build_opinfo_index(
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    check_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16,),
) -> dict[str, list[str]]:
    """Scan ``op_db`` once (about a minute on CPU) for ops whose samples each dispatch to one aten op.

    Kept: the smoke/facto ops (hand-written references exist) and ops whose Python decomposition
    (``torch._decomp``) passes the evaluator's checks (values in ``dtype`` and ``check_dtypes``, inputs
    left as the op leaves them, aliasing) without calling the op, so the ``reference`` baseline can
    pass them; random, creation and view ops are left out.
    """
    from torch._decomp import decomposition_table

    index: dict[str, list[str]] = {}
    verdicts: dict[tuple[str, str], bool] = {}
    for name, info in _op_db().items():
        samples = _single_op_samples(info, device, dtype)
        checked = list(samples)
        for d in check_dtypes:
            if d in info.supported_dtypes(device):
                checked += _single_op_samples(info, device, d)
        for case in samples:
            packet = case.overload.overloadpacket.__name__
            tags = case.overload.tags
            if (
                packet in SKIPPED_PACKETS
                or torch.Tag.nondeterministic_seeded in tags
                or torch.Tag.view_copy in tags
            ):
                continue
            if case.overload.is_view or packet.endswith("_") or "empty" in packet:
                continue
            if not any(isinstance(a, torch.Tensor) for a in case.args):  # creation ops (arange, full, eye...)
                continue
            key = f"{packet}.{case.overload._overloadname}"
            if packet not in FAMILIES:
                if (name, key) not in verdicts:
                    same = [c for c in checked if c.overload == case.overload]
                    verdicts[(name, key)] = _clean_decomposition(same, decomposition_table.get(case.overload))
                if not verdicts[(name, key)]:
                    continue
            names = index.setdefault(key, [])
            if name not in names:
                names.append(name)
    return dict(sorted(index.items()))


# ---- entry point ------------------------------------------------------------------------------


def default_dtypes(device: str) -> list[str]:
    return ["float32", "bfloat16", "float16"] if device.startswith("cuda") else ["float32", "bfloat16"]


def checkable_here(op: str) -> bool:
    """Whether this torch can hold ``op`` to the opinfo suite's bar: the index was built on one torch
    version, and an op whose Python decomposition this torch lacks (``max_pool2d_with_indices`` on 2.11)
    has no reference that avoids calling the op, so it is left out rather than scored against nothing."""
    from torch._decomp import decomposition_table

    packet, _, overload = op.partition(".")
    if packet in FAMILIES:
        return True
    overload_obj = getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)
    return overload_obj is not None and overload_obj in decomposition_table


def suite_ops(suite: str, trace_file: str | None = None) -> list[str]:
    """The ops a suite holds, in a stable order (what ``list_tasks`` serves)."""
    if suite == "smoke":
        return list(SMOKE_OPS)
    if suite == "facto":
        return list(FACTO_OPS)
    if suite == "torchbench":
        return trace_ops(Path(trace_file) if trace_file else None)
    if suite == "opinfo":
        return [op for op in opinfo_index() if checkable_here(op)]
    raise UnknownOpError(f"unknown suite {suite!r}; expected smoke, opinfo, torchbench or facto")


def build_cases(
    op: str,
    suite: str,
    *,
    device: str,
    dtypes: list[str],
    seed: int = 0,
    max_inputs: int = 32,
    trace_file: str | None = None,
) -> tuple[list[Case], list[Case]]:
    """(correctness cases, performance cases) for ``op`` in ``suite`` on ``device``."""
    torch_dtypes = [dtype_of(d) for d in dtypes]
    base = op.split(".")[0]
    if suite in ("smoke", "facto"):
        known = SMOKE_OPS if suite == "smoke" else FACTO_OPS
        if base not in known:
            raise UnknownOpError(f"op {op!r} is not in the {suite} suite; its ops are: {', '.join(known)}")
        specs = SMOKE_CORRECTNESS[base] if suite == "smoke" else facto_samples(base)
        correctness = _from_specs(base, specs, "correctness", torch_dtypes, device, seed)[:max_inputs]
        perf = []
        if suite == "smoke":
            perf = _from_specs(
                base, SMOKE_PERFORMANCE[base], "performance", [torch.float32], device, seed + 1
            )
    elif suite == "torchbench":
        path = Path(trace_file) if trace_file else TORCHBENCH_TRACE
        if base not in trace_ops(path):
            raise UnknownOpError(
                f"op {op!r} is not in trace {path.name}; its ops are: {', '.join(trace_ops(path))}"
            )
        correctness = _torchbench_cases(op, path, device, seed, max_inputs)
        perf = [Case(c.overload, c.args, c.kwargs, "performance", c.dtype) for c in correctness[:3]]
    elif suite == "opinfo":
        correctness, perf = _opinfo_cases(op, device, torch_dtypes, max_inputs), []
    else:
        raise UnknownOpError(f"unknown suite {suite!r}; expected smoke, opinfo, torchbench or facto")
    correctness = [c for c in correctness if matches_op(op, c.overload)]
    perf = [c for c in perf if matches_op(op, c.overload)]
    return correctness, perf
