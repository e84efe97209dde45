"""Values across the judge/side boundary: the judge writes, the side computes, the judge reads.

Inputs: the judge writes each call's tensors into that side's *arena* (memory the judge owns: a sealed
memfd on the CPU, a device allocation shared by file descriptor on a GPU) just before the call, keeping
every tensor's strides, and sends the side :class:`Ref` descriptors (pickled: only the side unpickles).
Each side has its own arena, so what one side does to its inputs never reaches the other.

Outputs come back as JSON (the judge never unpickles what a side sends). A tensor is named by where it
lives: ``in`` (a view of the side's own input arena, e.g. an in-place result), ``out`` (CPU: the side
copied it into an output arena the judge owns) or ``ipc`` (GPU: an allocation of the side's, by IPC
handle). :func:`decode` checks every dtype, shape, stride and offset against the real size of the memory
before it builds a view; the caller copies what it needs at once.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import cuda_ipc

#: Tensor dtypes that may cross (by name, as ``str(dtype)`` without ``torch.``).
DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
        torch.uint16, torch.uint32, torch.uint64,
    )
}  # fmt: skip
MAX_DIMS = 16
#: ``ipc``: GPU arenas as ``cuMemAlloc`` blocks shared by IPC handle, not by file descriptor (experiments).
ARENA_ENV = "KS_ARENA"
MAX_NODES = 4096
ALIGN = 256


class TransportError(Exception):
    """A side described a value the judge cannot accept (the message names the field)."""


@dataclass(frozen=True)
class Ref:
    """A tensor the judge placed in a side's arena: byte offset, dtype name, shape, strides (elements)."""

    offset: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def extent(shape: tuple[int, ...] | list[int], stride: tuple[int, ...] | list[int]) -> int:
    """Elements spanned by a strided view (0 for an empty one)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride, strict=True))


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Arena:
    """Judge-owned memory one side maps: a sealed memfd (CPU) or a device allocation of its own (GPU:
    ``cuda_ipc.Shared``, sent as a file descriptor; a ``cuMemAlloc`` block and its IPC handle where the
    driver lacks the virtual memory API).

    Sealed against shrinking, a side cannot truncate the file under the judge's mapping (a SIGBUS in the
    judge); a dedicated device allocation exposes nothing else of the judge's, and a side's mapping of it
    is the side's own (unmapping it leaves the judge's).
    """

    def __init__(self, nbytes: int, device: torch.device) -> None:
        self.nbytes = max(_aligned(nbytes), ALIGN)
        self.device = device
        self.fd: int | None = None
        self.handle: bytes | None = None
        self._mm: mmap.mmap | None = None
        self._ptr: int | None = None
        self._shared: cuda_ipc.Shared | None = None
        if device.type == "cuda":
            try:  # shared by a file descriptor: a side reads it as fast as its own memory
                if os.environ.get(ARENA_ENV) == "ipc":  # an experiment's choice (timing under MPS)
                    raise cuda_ipc.CudaDriverError(f"{ARENA_ENV}=ipc")
                self._shared = cuda_ipc.Shared(self.nbytes, device.index or 0)
                self.nbytes = self._shared.size
                self.fd = self._shared.export_fd()
                self.bytes = cuda_ipc.byte_view(self._shared.ptr, self.nbytes)
            except cuda_ipc.CudaDriverError:  # no virtual memory API: an IPC handle
                if self._shared is not None:
                    self._shared.close()
                    self._shared = None
                self._ptr = cuda_ipc.mem_alloc(self.nbytes)
                self.bytes = cuda_ipc.byte_view(self._ptr, self.nbytes)
                self.handle, _ = cuda_ipc.export(self._ptr)
        else:
            self.fd = os.memfd_create("ks-arena", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            os.ftruncate(self.fd, self.nbytes)
            fcntl.fcntl(
                self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            )
            self._mm = mmap.mmap(self.fd, self.nbytes)
            self.bytes = torch.frombuffer(self._mm, dtype=torch.uint8)

    @property
    def kind(self) -> str:
        """How a side maps it: ``memfd`` (CPU), ``shared`` (a GPU allocation's descriptor) or ``ipc``."""
        return "ipc" if self.handle is not None else "shared" if self._shared is not None else "memfd"

    def view(
        self, offset: int, dtype: torch.dtype, shape: tuple[int, ...], stride: tuple[int, ...]
    ) -> torch.Tensor:
        return strided_view(self.bytes, offset, dtype, shape, stride)

    def close(self) -> None:
        del self.bytes
        if self._ptr is not None:
            cuda_ipc.mem_free(self._ptr)
            self._ptr = None
        if self._shared is not None:
            torch.cuda.synchronize(self.device)  # unmapping memory a queued copy still uses faults the GPU
            self._shared.close()
            self._shared = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def strided_view(
    region: torch.Tensor, offset: int, dtype: torch.dtype, shape: tuple[int, ...], stride: tuple[int, ...]
) -> torch.Tensor:
    """A ``dtype`` view of ``region`` (uint8) at byte ``offset``; raises unless it fits entirely."""
    item = dtype.itemsize
    n = extent(shape, stride)
    if offset < 0 or offset % item or offset + n * item > region.numel():
        raise TransportError(
            f"a tensor of {n} {dtype} elements at byte {offset} does not fit a region of {region.numel()} bytes"
        )
    if n == 0:
        return torch.empty(shape, dtype=dtype, device=region.device)
    flat = region.narrow(0, offset, n * item).view(dtype)
    return flat.as_strided(shape, stride, flat.storage_offset())  # the offset is absolute: keep the narrow's


# ---- judge -> side ------------------------------------------------------------------------------


def layout_bytes(value: Any) -> int:
    """Arena bytes :func:`pack` needs for ``value``."""
    return sum(_aligned(extent(t.shape, t.stride()) * t.element_size()) for t in _tensors(value))


def tensor_count(value: Any) -> int:
    """Tensors in ``value`` (its lists, tuples and dicts)."""
    return len(_tensors(value))


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _map_leaves(v: Any, kind: type, leaf: Callable[[Any], Any]) -> Any:
    """``v`` with every ``kind`` value in its lists, tuples and dicts replaced by ``leaf(value)``.

    Module-level on purpose (as :func:`_describe` and :func:`_decode_tree`): a nested function that calls
    itself refers to itself through its closure cell, a reference cycle that only Python's cyclic
    collector frees, and with it everything the closure shares (views of a call's inputs, a side's
    outputs). That collector runs rarely in a loop of few, huge tensors: on the H100 the judge still held
    seven freed 6 GiB inputs of a KernelBench problem when the eighth did not fit.
    """
    if isinstance(v, kind):
        return leaf(v)
    if isinstance(v, list):
        return [_map_leaves(x, kind, leaf) for x in v]
    if isinstance(v, tuple):
        return tuple(_map_leaves(x, kind, leaf) for x in v)
    if isinstance(v, dict):
        return {k: _map_leaves(x, kind, leaf) for k, x in v.items()}
    return v


def pack(value: Any, arena: Arena) -> tuple[Any, Callable[..., None]]:
    """``value`` with every tensor replaced by a :class:`Ref` into ``arena`` (from byte 0, strides
    kept), and the function that writes them there: a timed call writes its inputs only after its
    timing has started, so a side cannot compute on them before that."""
    cursor = [0]
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []

    def place(v: torch.Tensor) -> Ref:
        if str(v.dtype).removeprefix("torch.") not in DTYPES:
            raise TransportError(f"inputs of dtype {v.dtype} cannot be passed to a side")
        shape, stride = tuple(v.shape), tuple(v.stride())
        n = extent(shape, stride)
        view = arena.view(cursor[0], v.dtype, shape, stride)
        if n and not (v.device == view.device and v.data_ptr() == view.data_ptr() and v.stride() == stride):
            src = v.detach().as_strided((n,), (1,), v.storage_offset())
            if v.device == arena.bytes.device and _overlaps(src, arena.bytes):  # drawn elsewhere in it
                src = src.clone()  # before any copy can overwrite it
            copies.append((view.as_strided((n,), (1,), view.storage_offset()), src))
        ref = Ref(cursor[0], str(v.dtype).removeprefix("torch."), shape, stride)
        cursor[0] += _aligned(n * v.element_size())
        return ref

    def write(blocking: bool = True) -> None:
        """Copy the inputs in. ``blocking``: return once they are there, for a side that starts on its
        own stream at once; a gated timed call passes False (the side's stream waits on the judge's)."""
        for dst, src in copies:
            dst.copy_(src, non_blocking=True)
        if blocking and arena.device.type == "cuda":
            torch.cuda.current_stream(arena.device).synchronize()

    return _map_leaves(value, torch.Tensor, place), write


def _overlaps(t: torch.Tensor, region: torch.Tensor) -> bool:
    lo, n = t.data_ptr(), t.numel() * t.element_size()
    return lo < region.data_ptr() + region.numel() and region.data_ptr() < lo + n


#: Factory functions :class:`DrawInto` places, with the dtype they make when none is named.
_FACTORIES: dict[Any, Callable[[], torch.dtype]] = {
    torch.rand: torch.get_default_dtype,
    torch.randn: torch.get_default_dtype,
    torch.zeros: torch.get_default_dtype,
    torch.ones: torch.get_default_dtype,
    torch.empty: torch.get_default_dtype,
    torch.randint: lambda: torch.int64,
}


def _factory_size(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...] | None:
    """The size a factory call asks for (``rand(2, 3)``, ``rand((2, 3))``, ``rand(size=...)``,
    ``randint(lo, hi, (2, 3))``), or None when it cannot be read."""
    if "size" in kwargs:
        size: Any = kwargs["size"]
    elif func is torch.randint:
        size = args[-1] if args else None
    elif len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        size = args[0]
    else:
        size = args
    if not isinstance(size, (tuple, list, torch.Size)) or not all(type(d) is int and d >= 0 for d in size):
        return None
    return tuple(size)


def _same_device(a: torch.device, b: torch.device) -> bool:
    here = torch.cuda.current_device() if "cuda" in (a.type, b.type) and torch.cuda.is_available() else 0
    return a.type == b.type and (a.index if a.index is not None else here) == (
        b.index if b.index is not None else here
    )


class DrawInto(TorchFunctionMode):
    """Inputs drawn straight into ``arena``: while active, ``torch.rand``/``randn``/``randint``/``zeros``/
    ``ones``/``empty`` calls on the arena's device write their result (``out=``) at the places
    :func:`pack` will give the tensors made in that order, so packing them copies nothing. The values are
    the ones the same calls make elsewhere. Anything else (other factories, results of arithmetic, a
    different order) is still packed correctly, by a copy; a call that does not fit is made elsewhere."""

    def __init__(self, arena: Arena) -> None:
        super().__init__()
        self.arena = arena
        self.cursor = 0

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        make = _FACTORIES.get(func)
        if make is None or "out" in kwargs or kwargs.get("requires_grad") or kwargs.get("pin_memory"):
            return func(*args, **kwargs)
        size = _factory_size(func, args, kwargs)
        device = kwargs.get("device") or torch.get_default_device()  # made elsewhere: elsewhere's values
        dtype = kwargs.get("dtype") or make()
        if (
            size is None
            or kwargs.get("layout", torch.strided) != torch.strided
            or kwargs.get("memory_format", torch.contiguous_format) != torch.contiguous_format
            or not _same_device(torch.device(device), self.arena.device)
            or str(dtype).removeprefix("torch.") not in DTYPES
        ):
            return func(*args, **kwargs)
        nbytes = math.prod(size) * dtype.itemsize
        if self.cursor + nbytes > self.arena.nbytes:
            return func(*args, **kwargs)
        strides = tuple(math.prod(size[i + 1 :]) for i in range(len(size)))
        out = self.arena.view(self.cursor, dtype, size, strides)
        self.cursor += _aligned(nbytes)
        rest = {k: v for k, v in kwargs.items() if k not in ("dtype", "device", "layout", "memory_format")}
        return func(*args, **rest, out=out)


def span(packed: Any) -> int:
    """Bytes of the arena the :class:`Ref` descriptors in ``packed`` reach into (from byte 0)."""
    end = [0]

    def reach(ref: Ref) -> Ref:
        end[0] = max(end[0], ref.offset + extent(ref.shape, ref.stride) * DTYPES[ref.dtype].itemsize)
        return ref

    _map_leaves(packed, Ref, reach)
    return end[0]


def unpack(packed: Any, region: torch.Tensor) -> Any:
    """Side: views of the mapped arena for every :class:`Ref`."""

    def view(ref: Ref) -> torch.Tensor:
        return strided_view(region, ref.offset, DTYPES[ref.dtype], ref.shape, ref.stride)

    return _map_leaves(packed, Ref, view)


# ---- side -> judge ------------------------------------------------------------------------------


class NeedSpace(Exception):
    """Side: the output arena is too small; the judge grows it and calls again."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(nbytes)
        self.nbytes = nbytes


def encode(out: Any, in_region: torch.Tensor, out_region: torch.Tensor | None) -> Any:
    """Side: describe ``out`` as JSON. CPU tensors not in the input arena are copied to ``out_region``."""
    in_lo = in_region.data_ptr()
    in_hi = in_lo + in_region.numel()
    cursor = [0]
    pending: list[tuple[int, torch.Tensor]] = []

    def tensor(t: torch.Tensor) -> dict[str, Any]:
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            return {"k": "other", "type": f"{type(t).__module__}.{type(t).__qualname__} (a Tensor subclass)"}
        if t.layout != torch.strided or t.is_meta:
            return {"k": "other", "type": f"tensor with layout {t.layout} on {t.device}"}
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            return {"k": "other", "type": f"tensor of dtype {t.dtype}"}
        meta = {"k": "tensor", "dtype": dtype, "shape": list(t.shape), "stride": list(t.stride())}
        ptr = t.data_ptr()
        n = extent(tuple(t.shape), tuple(t.stride()))
        if n == 0:
            return {**meta, "loc": "empty"}
        if in_lo <= ptr < in_hi and t.device == in_region.device:
            return {**meta, "loc": "in", "offset": ptr - in_lo}
        if t.device.type == "cuda":
            handle, offset = cuda_ipc.export(ptr)
            return {**meta, "loc": "ipc", "handle": handle.hex(), "offset": offset}
        nbytes = n * t.element_size()
        offset = cursor[0]
        cursor[0] += _aligned(nbytes)
        pending.append((offset, t))
        return {**meta, "loc": "out", "offset": offset}

    tree = _describe(out, tensor)
    if pending:
        if out_region is None or cursor[0] > out_region.numel():
            raise NeedSpace(cursor[0])
        for offset, t in pending:
            n = extent(tuple(t.shape), tuple(t.stride()))
            dst = strided_view(out_region, offset, t.dtype, (n,), (1,))
            dst.copy_(t.detach().as_strided((n,), (1,), t.storage_offset()))
    return tree


def _describe(v: Any, tensor: Callable[[torch.Tensor], dict[str, Any]], depth: int = 0) -> Any:
    """Side: the JSON description of ``v`` (tensors by ``tensor``); module-level, see :func:`_map_leaves`."""
    if depth > 8:
        return {"k": "other", "type": "structure nested deeper than 8"}
    if isinstance(v, torch.Tensor):
        return tensor(v)
    if isinstance(v, (tuple, list)):  # named tuples (torch.return_types.*) cross as tuples
        items = [_describe(x, tensor, depth + 1) for x in v]
        return {"k": "list" if isinstance(v, list) else "tuple", "items": items}
    if v is None or isinstance(v, (bool, int, float)):
        return {"k": "scalar", "v": v}
    return {"k": "other", "type": f"{type(v).__module__}.{type(v).__qualname__}"}


class Opened:
    """Judge: the side's CUDA allocations opened during one job (closed together at its end)."""

    def __init__(self) -> None:
        self._by_handle: dict[bytes, tuple[int, torch.Tensor]] = {}

    def region(self, handle: bytes) -> torch.Tensor:
        if handle not in self._by_handle:
            if len(self._by_handle) >= MAX_NODES:
                raise TransportError("a side exported too many allocations")
            ptr, size = cuda_ipc.open_handle(handle)
            self._by_handle[handle] = (ptr, cuda_ipc.byte_view(ptr, size))
        return self._by_handle[handle][1]

    def close(self) -> None:
        for ptr, _ in self._by_handle.values():
            cuda_ipc.close_handle(ptr)
        self._by_handle.clear()


@dataclass
class OutputTensor:
    """Judge: a decoded output tensor, and where it lives (``in``: the side's input arena)."""

    tensor: torch.Tensor
    loc: str
    offset: int


class Foreign:
    """An output value that is not a tensor, list, tuple or scalar (never equal to anything)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}>"


def decode(tree: Any, arena: Arena, out_arena: Arena | None, opened: Opened | None) -> Any:
    """Judge: views for a side's JSON description (tensors as :class:`OutputTensor`); validates all."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise TransportError(f"output description: {what}")

    def ints(v: Any, field: str) -> tuple[int, ...]:
        need(
            isinstance(v, list) and len(v) <= MAX_DIMS, f"`{field}` must be a list of at most {MAX_DIMS} ints"
        )
        need(all(type(x) is int and 0 <= x < 2**62 for x in v), f"`{field}` must hold non-negative ints")
        return tuple(v)

    def leaf(node: dict[str, Any]) -> Any:
        kind = node["k"]
        if kind == "scalar":
            v = node.get("v")
            need(v is None or type(v) in (bool, int, float), "`v` must be a number, a bool or null")
            return v
        if kind == "other":
            return Foreign(str(node.get("type", "?"))[:200])
        need(kind == "tensor", f"unknown kind {kind!r}")
        dtype = DTYPES.get(str(node.get("dtype")))
        need(dtype is not None, f"`dtype` must be one of {sorted(DTYPES)}")
        assert dtype is not None
        shape, stride = ints(node.get("shape"), "shape"), ints(node.get("stride"), "stride")
        need(len(shape) == len(stride), "`shape` and `stride` differ in length")
        need(math.prod(shape) < 2**40, "`shape` too large")
        loc, offset = node.get("loc"), node.get("offset", 0)
        need(type(offset) is int, "`offset` must be an int")
        if loc == "empty":
            need(extent(shape, stride) == 0, "`empty` tensor with elements")
            return OutputTensor(torch.empty(shape, dtype=dtype, device=arena.device), "empty", 0)
        if loc == "in":
            return OutputTensor(arena.view(offset, dtype, shape, stride), "in", offset)
        if loc == "out":
            need(out_arena is not None, "`out` tensor without an output arena")
            assert out_arena is not None
            return OutputTensor(out_arena.view(offset, dtype, shape, stride), "out", offset)
        need(loc == "ipc" and opened is not None, f"unknown `loc` {loc!r}")
        assert opened is not None
        handle = node.get("handle")
        need(
            isinstance(handle, str) and len(handle) == 2 * cuda_ipc.HANDLE_BYTES,
            "`handle` must be 128 hex digits",
        )
        assert isinstance(handle, str)
        try:
            raw = bytes.fromhex(handle)
        except ValueError as exc:
            raise TransportError("output description: `handle` is not hex") from exc
        if raw == arena.handle or (out_arena is not None and raw == out_arena.handle):
            raise TransportError("output description: `handle` names the judge's own arena")
        region = opened.region(raw)
        return OutputTensor(strided_view(region, offset, dtype, shape, stride), "ipc", offset)

    return _decode_tree(tree, leaf, [MAX_NODES])


def _decode_tree(node: Any, leaf: Callable[[dict[str, Any]], Any], budget: list[int]) -> Any:
    """Judge: lists and tuples of a side's description, each other value by ``leaf`` (module-level, see
    :func:`_map_leaves`); at most ``budget[0]`` values in all."""
    budget[0] -= 1
    if budget[0] < 0:
        raise TransportError(f"output description: more than {MAX_NODES} values")
    if not (isinstance(node, dict) and isinstance(node.get("k"), str)):
        raise TransportError("output description: each value must be an object with `k`")
    if node["k"] not in ("tuple", "list"):
        return leaf(node)
    items = node.get("items")
    if not isinstance(items, list):
        raise TransportError("output description: `items` must be a list")
    vals = [_decode_tree(x, leaf, budget) for x in items]
    return tuple(vals) if node["k"] == "tuple" else vals
