"""The torchbench suite: aten calls recorded from real models, in BackendBench's trace format.

A trace is text: an ``Operator: aten.<op>.<overload>`` line, then one ``cnt: N, ((args...), {kwargs})``
line per distinct input (``N``: how often the models made that call; 0 for synthetic inputs). Tensors
are written ``T([2, 3], f16)`` or ``T([3, 2], f32, [1, 3])`` (with strides); other values are Python
literals, ``inf``, dtypes (``torch.float16``, ``f16``), layouts and memory formats (``torch.strided``,
``torch.channels_last``) and devices (``'cuda'``, ``torch.device('cuda')``). Lines of any other shape
are ignored, as upstream ignores them. The bundled ``data/torchbench_small.txt`` is a small trace of our
own in that format; ``--trace-file`` names another one, e.g. upstream's full trace, on the worker.

What follows upstream (meta-pytorch/BackendBench's ``data_loaders.py`` and ``suite/torchbench.py``,
re-implemented, never ``eval``-ed): ``aten.sum.SymInt`` is read as ``aten.sum.dim_IntList``; duplicate
input lines of an op count once; ops upstream marks unsupported are left out; an op's inputs are sorted
largest first (bytes of its tensors) and the largest serve both correctness and performance; float
tensors hold uniform values in [0, 1), integer ones small integers, on the evaluation device whatever
device the trace names. Our JSON form (``{"ops": {overload: [{"args", "kwargs", "cnt"}]}}``) is read too.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from .cases import Case, matches_op, resolve_overload
from .tensors import SpecError, build_arg, dtype_of, first_float_dtype

DATA_DIR = Path(__file__).parent / "data"
TORCHBENCH_TRACE = DATA_DIR / "torchbench_small.txt"

#: Overloads upstream's torchbench suite skips (it tests ``any(s in op for s in ...)`` on these).
UPSTREAM_UNSUPPORTED = (
    "embedding.default",
    "scatter.src",
    "scatter.reduce",
    "scatter.value",
    "scatter.value_reduce",
    "im2col_backward.default",
    "col2im_backward.default",
    "native_layer_norm_backward.default",
    "upsample_nearest2d_backward.default",
    "upsample_bilinear2d_backward.default",
    "_cudnn_rnn_backward.default",
    "_fft_c2c.default",
    "_cudnn_rnn.default",
)
#: Renamed on read, as upstream does (traces recorded before ``SymInt`` overloads were merged).
RENAMED = {"aten.sum.SymInt": "aten.sum.dim_IntList"}
#: Non-tensor torch values a trace may name: ``torch.<name>``.
LAYOUTS = ("strided", "sparse_coo", "sparse_csr")
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
MAX_LINE_CHARS = 200_000


def _torch_name(name: str) -> dict[str, Any]:
    """``float16`` / ``strided`` / ``channels_last`` (after ``torch.``) as a JSON arg spec."""
    if name in LAYOUTS:
        return {"layout": name}
    if name in MEMORY_FORMATS:
        return {"memory_format": name}
    dtype_of(name)  # raises SpecError for anything else
    return {"dtype": name}


def _literal(node: ast.AST) -> Any:
    """Safely turn one node of a trace line into a JSON arg spec (no ``eval``)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str) and re.fullmatch(
            r"(torch\.)?device\(.*\)|cuda(:\d+)?|cpu", node.value
        ):
            return {"device": "$"}  # upstream quotes devices: "torch.device('cuda')" or 'cuda'
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node.operand)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SpecError("unary minus on a non-number")
        return -value
    if isinstance(node, ast.Name):
        if node.id in ("inf", "nan"):
            return float(node.id)
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        return _torch_name(node.id)
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("torch", "th")
    ):
        return _torch_name(node.attr)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "T":
            parts = [_literal(a) for a in node.args]
            if not parts or not isinstance(parts[0], list):
                raise SpecError("T(...) needs a shape list first")
            dtype = parts[1].get("dtype", "f32") if len(parts) > 1 and isinstance(parts[1], dict) else "f32"
            spec: dict[str, Any] = {"T": parts[0], "dtype": dtype, "init": "rand"}
            if len(parts) > 2 and parts[2] is not None:
                spec["stride"] = parts[2]
            return spec
        is_device = (isinstance(func, ast.Name) and func.id == "device") or (
            isinstance(func, ast.Attribute) and func.attr == "device"
        )
        if is_device:  # torch.device('cuda'): the evaluation device, whatever the trace recorded
            return {"device": "$"}
    if isinstance(node, ast.Dict):
        return {
            _literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None
        }
    raise SpecError(f"unsupported syntax in trace: {ast.dump(node)[:80]}")


def parse_args_text(text: str) -> tuple[list[Any], dict[str, Any]]:
    """One input of a trace, ``((args...), {kwargs})``, as (arg specs, kwarg specs)."""
    if len(text) > MAX_LINE_CHARS:
        raise SpecError(f"an input line of {len(text)} characters (at most {MAX_LINE_CHARS})")
    try:
        parsed = _literal(ast.parse(text.strip(), mode="eval").body)
    except SyntaxError as exc:
        raise SpecError(exc.msg) from None
    if isinstance(parsed, list) and len(parsed) == 2 and isinstance(parsed[1], dict):
        args, kwargs = parsed
        return (args if isinstance(args, list) else [args]), kwargs
    return (parsed if isinstance(parsed, list) else [parsed]), {}


def parse_upstream_trace(text: str) -> dict[str, list[dict[str, Any]]]:
    """A trace's text into ``{overload: [{"cnt", "args", "kwargs"}]}``, duplicates dropped."""
    ops: dict[str, list[dict[str, Any]]] = {}
    seen: set[tuple[str, str]] = set()
    current: str | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if m := re.match(r"Operator: (\S+)", line):
            current = RENAMED.get(m.group(1), m.group(1))
            ops.setdefault(current, [])
        elif m := re.match(r"cnt: (\d+), (.*)", line):
            if current is None:
                raise SpecError(f"trace line {lineno}: inputs before any 'Operator:' line")
            body = m.group(2).strip()
            if (current, body) in seen:
                continue
            seen.add((current, body))
            try:
                args, kwargs = parse_args_text(body)
            except SpecError as exc:
                raise SpecError(f"trace line {lineno}: {exc}") from None
            ops[current].append({"cnt": int(m.group(1)), "args": args, "kwargs": kwargs})
    return ops


def load_trace(path: Path) -> dict[str, list[dict[str, Any]]]:
    """A trace file: upstream's text format, or our JSON (``{"ops": {overload: [entries]}}``)."""
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
            raise SpecError(f"{path}: expected a JSON object with an 'ops' mapping")
        return {RENAMED.get(k, k): v for k, v in data["ops"].items()}
    return parse_upstream_trace(text)


def write_trace(ops: dict[str, list[dict[str, Any]]], header: str = "") -> str:
    """The text form of ``{overload: [{"cnt", "args", "kwargs"}]}`` (JSON arg specs), as upstream writes it."""
    lines = [f"# {line}" for line in header.splitlines()]
    for overload, entries in ops.items():
        lines.append(f"Operator: {overload}")
        for entry in entries:
            args = ", ".join(_spec_text(a) for a in entry["args"])
            args = f"({args},)" if len(entry["args"]) == 1 else f"({args})"
            kwargs = ", ".join(f"{k!r}: {_spec_text(v)}" for k, v in entry.get("kwargs", {}).items())
            lines.append(f"cnt: {entry.get('cnt', 0)}, ({args}, {{{kwargs}}})")
    return "\n".join(lines) + "\n"


def _spec_text(spec: Any) -> str:
    if isinstance(spec, dict) and "T" in spec:
        dtype = spec.get("dtype", "f32")
        stride = f", {list(spec['stride'])}" if spec.get("stride") is not None else ""
        return f"T({list(spec['T'])}, {dtype}{stride})"
    if isinstance(spec, dict) and len(spec) == 1:
        ((key, value),) = spec.items()
        if key in ("dtype", "layout", "memory_format"):
            return f"torch.{dtype_name(value) if key == 'dtype' else value}"
        if key == "device":
            return "'cuda'"
    if isinstance(spec, list):
        return "[" + ", ".join(_spec_text(s) for s in spec) + "]"
    if isinstance(spec, float) and spec in (float("inf"), float("-inf")):
        return "inf" if spec > 0 else "-inf"
    return repr(spec)


def dtype_name(name: str) -> str:
    """``f16`` -> ``float16`` (the name after ``torch.``)."""
    return str(dtype_of(name)).removeprefix("torch.")


@lru_cache(maxsize=4)
def _cached_trace(path: str) -> dict[str, list[dict[str, Any]]]:
    return load_trace(Path(path))


def supported(overload: str) -> bool:
    """Whether upstream's torchbench suite runs this overload (``aten.add.Tensor``)."""
    return not any(s in overload for s in UPSTREAM_UNSUPPORTED)


def cached_trace(path: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """The parsed trace at ``path`` (the bundled one by default), parsed once per process."""
    return _cached_trace(str(path or TORCHBENCH_TRACE))


def trace_ops(path: Path | None = None) -> list[str]:
    """The op (packet) names a trace holds, e.g. ``add`` for ``aten.add.Tensor``, in trace order."""
    names = []
    for overload in _cached_trace(str(path or TORCHBENCH_TRACE)):
        if not supported(overload):
            continue
        name = overload.split(".")[1] if overload.startswith("aten.") else overload.split(".")[0]
        if name not in names:
            names.append(name)
    return names


def op_entries(trace: dict[str, list[dict[str, Any]]], op: str) -> dict[str, list[dict[str, Any]]]:
    """The part of a parsed trace that holds ``op``'s inputs (every overload of a packet name): what a
    runner sends with a request, so the worker needs no file of its own."""
    found = {}
    for overload_name, entries in trace.items():
        if supported(overload_name) and matches_op(op, resolve_overload(overload_name)):
            found[overload_name] = entries
    return found


def read_op_entries(path: Path, op: str) -> dict[str, list[dict[str, Any]]]:
    """:func:`op_entries` of the trace file at ``path`` (parsed once per process)."""
    return op_entries(_cached_trace(str(path)), op)


def torchbench_cases(
    op: str, trace: dict[str, list[dict[str, Any]]], device: str, seed: int, max_inputs: int
) -> list[Case]:
    """The inputs of ``trace`` (a parsed trace, or the part of one for ``op``) for ``op`` (every overload
    of a packet name), largest first, at most ``max_inputs``."""
    sized: list[tuple[int, int, Any, list[Any], dict[str, Any]]] = []
    for overload_name, entries in op_entries(trace, op).items():
        overload = resolve_overload(overload_name)
        for entry in entries:
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("args"), list)
                or not isinstance(entry.get("kwargs", {}), dict)
            ):
                raise SpecError(
                    f"{overload_name}: an input must be an object with an 'args' list and 'kwargs'"
                )
            try:
                size = _spec_bytes(entry["args"]) + _spec_bytes(list(entry.get("kwargs", {}).values()))
            except (TypeError, ValueError) as exc:
                raise SpecError(f"{overload_name}: a tensor's shape is not a list of ints ({exc})") from None
            sized.append((size, len(sized), overload, entry["args"], entry.get("kwargs", {})))
    sized.sort(key=lambda s: (-s[0], s[1]))  # the largest inputs matter most, as upstream
    cases = []
    for i, (_, _, overload, arg_specs, kwarg_specs) in enumerate(sized[:max_inputs]):
        gen = torch.Generator(device).manual_seed(seed * 1000 + i)  # values drawn where they are used
        args = tuple(build_arg(a, torch.float32, device, gen) for a in arg_specs)
        kwargs = {k: build_arg(v, torch.float32, device, gen) for k, v in kwarg_specs.items()}
        dt = first_float_dtype((args, kwargs))
        label = str(dt).removeprefix("torch.") if dt else None
        cases.append(Case(overload, args, kwargs, "correctness", label))
    return cases


def _spec_bytes(spec: Any) -> int:
    """Bytes of the tensors an arg spec describes (what upstream sorts inputs by)."""
    if isinstance(spec, dict) and "T" in spec:
        n = 1
        for s in spec["T"]:
            n *= int(s)
        return n * dtype_of(spec.get("dtype", "f32")).itemsize
    if isinstance(spec, list):
        return sum(_spec_bytes(s) for s in spec)
    return 0


__all__ = [
    "TORCHBENCH_TRACE",
    "load_trace",
    "op_entries",
    "read_op_entries",
    "parse_upstream_trace",
    "torchbench_cases",
    "trace_ops",
    "write_trace",
]
