"""Tensor helpers shared by the suites and the evaluator: JSON arg specs, stride-preserving clones, labels.

Arguments are described in JSON (never ``eval``): ``{"T": [2, 3], "dtype": "f32", "stride": [1, 2]}``
is a tensor, lists and scalars are themselves. ``"dtype": "$"`` stands for the dtype under test, so one
spec serves float32 and bfloat16 alike. ``"init"`` picks the values (randn, rand, randint, ones, zeros,
special: a mix of 0, -0, +-inf, nan, huge and tiny numbers). ``{"device": "$"}``, ``{"layout": "strided"}``
and ``{"memory_format": "channels_last"}`` are the evaluation device, a layout and a memory format.
"""

from __future__ import annotations

import math
from typing import Any

import torch

#: Elements one tensor of an arg spec may hold (a trace line cannot make the judge allocate more).
MAX_ELEMENTS = 1 << 31

DTYPE_NAMES: dict[str, torch.dtype] = {
    "f64": torch.float64,
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "b8": torch.bool,
    "c64": torch.complex64,
    "c128": torch.complex128,
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
    "bool": torch.bool,
}
#: Non-tensor torch values an arg spec may name (``{"layout": "strided"}``, ``{"memory_format": ...}``).
LAYOUTS: dict[str, torch.layout] = {
    "strided": torch.strided,
    "sparse_coo": torch.sparse_coo,
    "sparse_csr": torch.sparse_csr,
}
MEMORY_FORMATS: dict[str, torch.memory_format] = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
}
SHORT_NAMES: dict[torch.dtype, str] = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


class SpecError(ValueError):
    """An argument spec in a suite or trace file is malformed."""


def dtype_of(name: str) -> torch.dtype:
    try:
        return DTYPE_NAMES[name]
    except KeyError:
        raise SpecError(f"unknown dtype {name!r}; expected one of {sorted(DTYPE_NAMES)}") from None


def _extent(size: list[int], stride: list[int]) -> int:
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))


def _values(n: int, dtype: torch.dtype, init: str, gen: torch.Generator) -> torch.Tensor:
    """``n`` values on the generator's device (a CUDA generator draws a performance input's million
    values on the GPU: on the CPU they took ~5 ms, hundreds of times a timed reading)."""
    on = gen.device
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen, device=on).bool()
    if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        return torch.randint(0, 10, (n,), generator=gen, device=on).to(dtype)
    if not dtype.is_floating_point or init == "randint":
        return torch.randint(-8, 9, (n,), generator=gen, device=on).to(dtype)
    if init == "rand":
        return torch.rand(n, generator=gen, dtype=torch.float32, device=on).to(dtype)
    if init == "ones":
        return torch.ones(n, dtype=dtype, device=on)
    if init == "zeros":
        return torch.zeros(n, dtype=dtype, device=on)
    if init == "special":
        info = torch.finfo(dtype)
        pool = torch.tensor(
            [
                0.0,
                -0.0,
                float("inf"),
                float("-inf"),
                float("nan"),
                info.max / 4,
                -info.max / 4,
                info.tiny,
                1.0,
                -2.5,
            ],
            dtype=torch.float32,
            device=on,
        ).to(dtype)
        return pool[torch.arange(n, device=on) % len(pool)]
    if init != "randn":
        raise SpecError(f"unknown init {init!r}; expected randn, rand, randint, ones, zeros or special")
    return torch.randn(n, generator=gen, dtype=torch.float32, device=on).to(dtype)


def build_arg(spec: Any, dtype: torch.dtype, device: str, gen: torch.Generator) -> Any:
    """Turn one JSON arg spec into a value on ``device``; ``"$"`` dtypes become ``dtype``."""
    if isinstance(spec, dict):
        if "T" not in spec:
            if "dtype" in spec and len(spec) == 1:  # a dtype argument, e.g. sum(x, dtype=...)
                return dtype if spec["dtype"] == "$" else dtype_of(spec["dtype"])
            if "device" in spec and len(spec) == 1:  # a device argument: always the evaluation device
                return torch.device(device)
            if "layout" in spec and len(spec) == 1 and spec["layout"] in LAYOUTS:
                return LAYOUTS[spec["layout"]]
            if "memory_format" in spec and len(spec) == 1 and spec["memory_format"] in MEMORY_FORMATS:
                return MEMORY_FORMATS[spec["memory_format"]]
            raise SpecError(f"a dict arg must be a tensor spec with key 'T' (got keys {sorted(spec)})")
        try:
            size = [int(s) for s in spec["T"]]
        except (TypeError, ValueError):
            raise SpecError(f"a tensor's shape must be a list of ints, got {spec['T']!r}") from None
        if any(s < 0 for s in size) or math.prod(size) > MAX_ELEMENTS:
            raise SpecError(
                f"a tensor of shape {size}: sizes must be >= 0 and hold at most {MAX_ELEMENTS} elements"
            )
        dt = dtype if spec.get("dtype", "$") == "$" else dtype_of(spec["dtype"])
        stride = spec.get("stride")
        init = spec.get("init", "randn")
        if stride is None:
            n = 1
            for s in size:
                n *= s
            return _values(n, dt, init, gen).reshape(size).to(device)
        try:
            stride = [int(s) for s in stride]
        except (TypeError, ValueError):
            raise SpecError(f"a tensor's stride must be a list of ints, got {stride!r}") from None
        if len(stride) != len(size):
            raise SpecError(f"stride {stride} and size {size} differ in rank")
        if any(s < 0 for s in stride) or _extent(size, stride) > MAX_ELEMENTS:
            raise SpecError(f"stride {stride}: strides must be >= 0 and span at most {MAX_ELEMENTS} elements")
        data = _values(max(_extent(size, stride), 1), dt, init, gen).to(device)
        return data.as_strided(size, stride)
    if isinstance(spec, list):
        return [build_arg(s, dtype, device, gen) for s in spec]
    return spec


def clone_value(value: Any) -> Any:
    """A deep copy whose tensors keep their strides (even overlapping or expanded ones) and storage offset."""
    if isinstance(value, torch.Tensor):
        size, stride = list(value.size()), list(value.stride())
        extent = _extent(size, stride)
        if extent == 0:
            return value.detach().clone()
        flat = value.detach().as_strided((extent,), (1,), value.storage_offset()).clone()
        return flat.as_strided(size, stride, 0)
    if isinstance(value, list):
        return [clone_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(clone_value(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_value(v) for k, v in value.items()}
    return value


def describe(value: Any) -> str:
    """Upstream's compact notation: ``T([2, 3], f32)``, ``T([3, 2], f32, [1, 3])`` when non-contiguous."""
    if isinstance(value, torch.Tensor):
        dt = SHORT_NAMES.get(value.dtype, str(value.dtype))
        if value.dim() and not value.is_contiguous():
            return f"T({list(value.shape)}, {dt}, {list(value.stride())})"
        return f"T({list(value.shape)}, {dt})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, torch.dtype):
        return SHORT_NAMES.get(value, str(value))
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def first_float_dtype(value: Any) -> torch.dtype | None:
    """The dtype a sample is 'about': the first floating tensor among its arguments."""
    if isinstance(value, torch.Tensor):
        return value.dtype if value.dtype.is_floating_point else None
    if isinstance(value, (list, tuple)):
        for v in value:
            found = first_float_dtype(v)
            if found is not None:
                return found
    if isinstance(value, dict):
        return first_float_dtype(list(value.values()))
    return None


def nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    return 0
