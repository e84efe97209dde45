"""CUDA memory shared between the judge and a side process, through the driver API.

The judge allocates each side's input arena as an allocation of its own (:class:`Shared`, sent by file
descriptor; ``cuMemAlloc`` and an IPC handle where the driver lacks the virtual memory API), never from
PyTorch's caching allocator, whose segments hold other tensors: a shared segment would hand the candidate
the judge's other memory. A side exports the allocation holding an output
tensor; the judge opens it, asks the driver how large the mapped allocation is, and refuses any view
that does not fit. Nothing here trusts a number the other process sent.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
HANDLE_BYTES = 64


class CudaDriverError(RuntimeError):
    pass


class _IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _MemLocation),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _MemLocation), ("flags", ctypes.c_int)]


CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1


@functools.cache
def _driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    for name in (
        "cuMemAlloc_v2", "cuMemFree_v2", "cuIpcOpenMemHandle_v2", "cuMemGetAddressRange_v2",
        "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease", "cuMemAddressReserve",
        "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemExportToShareableHandle",
        "cuMemImportFromShareableHandle",
    ):  # fmt: skip
        getattr(lib, name).restype = ctypes.c_int
    lib.cuIpcGetMemHandle.restype = lib.cuIpcCloseMemHandle.restype = ctypes.c_int
    lib.cuMemHostGetDevicePointer_v2.restype = ctypes.c_int
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise CudaDriverError(f"{what} failed: CUDA driver error {rc}")


def ensure_context() -> None:
    """Make PyTorch's primary context current on this thread (the driver calls below need one)."""
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the runtime binds the primary context to this thread on first use


def mem_alloc(nbytes: int) -> int:
    ptr = ctypes.c_uint64()
    _check(_driver().cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))), "cuMemAlloc")
    return int(ptr.value)


def mem_free(ptr: int) -> None:
    _driver().cuMemFree_v2(ctypes.c_uint64(ptr))


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


def granularity(device: int) -> int:
    """The recommended size unit of a shareable allocation (2 MiB on the H100)."""
    size = ctypes.c_size_t()
    _check(
        _driver().cuMemGetAllocationGranularity(
            ctypes.byref(size),
            ctypes.byref(_prop(device)),
            ctypes.c_int(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        ),
        "cuMemGetAllocationGranularity",
    )
    return int(size.value)


class _Mapping:
    """A physical allocation (``handle``, released with the mapping) mapped read-write at ``ptr`` here."""

    def __init__(self, handle: ctypes.c_uint64, size: int, device: int) -> None:
        self.handle, self.size = handle, size
        try:
            self.ptr = _map(handle, size, device)
        except CudaDriverError:
            _driver().cuMemRelease(handle)
            raise

    def close(self) -> None:
        if self.ptr:
            _unmap(self.ptr, self.size)
            _driver().cuMemRelease(self.handle)
            self.ptr = 0


class Shared(_Mapping):
    """Device memory made with the virtual memory API (``cuMemCreate``) and shared by a file descriptor.

    Why not ``cuMemAlloc`` and an IPC handle: on the H100 a kernel in another process read a legacy IPC
    mapping 28-44% slower than its own memory once a reading's inputs spanned 640 MB (76-85 against 59 us
    a call for a 64 MB broadcast multiply, ten calls back to back; bench/results/side_probe_h100.json),
    and as fast at one or two calls. A descriptor-shared allocation read 59 us at every count: the same
    physical pages, mapped at the allocation's own granularity in every process. The importer's mapping
    is its own: it can unmap it, not the owner's.
    """

    def __init__(self, nbytes: int, device: int) -> None:
        unit = granularity(device)
        size = max(unit, -(-nbytes // unit) * unit)
        handle = ctypes.c_uint64()
        _check(
            _driver().cuMemCreate(
                ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(_prop(device)), ctypes.c_uint64(0)
            ),
            "cuMemCreate",
        )
        super().__init__(handle, size, device)

    def export_fd(self) -> int:
        """A new file descriptor for this allocation (the caller sends and closes it)."""
        fd = ctypes.c_int(-1)
        _check(
            _driver().cuMemExportToShareableHandle(
                ctypes.byref(fd),
                self.handle,
                ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                ctypes.c_uint64(0),
            ),
            "cuMemExportToShareableHandle",
        )
        return int(fd.value)


def _map(handle: ctypes.c_uint64, size: int, device: int) -> int:
    lib = _driver()
    ptr = ctypes.c_uint64()
    _check(
        lib.cuMemAddressReserve(
            ctypes.byref(ptr),
            ctypes.c_size_t(size),
            ctypes.c_size_t(0),
            ctypes.c_uint64(0),
            ctypes.c_uint64(0),
        ),
        "cuMemAddressReserve",
    )
    try:
        _check(
            lib.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_uint64(0)),
            "cuMemMap",
        )
        access = _AccessDesc(
            _MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        )
        rc = lib.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
        if rc != 0:
            lib.cuMemUnmap(ptr, ctypes.c_size_t(size))
            _check(rc, "cuMemSetAccess")
    except CudaDriverError:
        lib.cuMemAddressFree(ptr, ctypes.c_size_t(size))
        raise
    return int(ptr.value)


def _unmap(ptr: int, size: int) -> None:
    lib = _driver()
    lib.cuMemUnmap(ctypes.c_uint64(ptr), ctypes.c_size_t(size))
    lib.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(size))


class Imported(_Mapping):
    """Another process's :class:`Shared` allocation, mapped here from the descriptor it sent."""

    def __init__(self, fd: int, size: int, device: int) -> None:
        handle = ctypes.c_uint64()
        _check(
            _driver().cuMemImportFromShareableHandle(
                ctypes.byref(handle),
                ctypes.c_void_p(fd),
                ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            ),
            "cuMemImportFromShareableHandle",
        )
        super().__init__(handle, size, device)


def address_range(ptr: int) -> tuple[int, int]:
    """(base, size) of the allocation that contains ``ptr``."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(
        _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
        "cuMemGetAddressRange",
    )
    return int(base.value), int(size.value)


def export(ptr: int) -> tuple[bytes, int]:
    """The IPC handle of the allocation holding ``ptr``, and ``ptr``'s offset in it."""
    base, _ = address_range(ptr)
    handle = _IpcMemHandle()
    _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base)), "cuIpcGetMemHandle")
    return ctypes.string_at(ctypes.addressof(handle), HANDLE_BYTES), ptr - base


def open_handle(handle: bytes) -> tuple[int, int]:
    """Map another process's allocation; returns (pointer, size of the allocation)."""
    if len(handle) != HANDLE_BYTES:
        raise CudaDriverError(f"an IPC handle has {HANDLE_BYTES} bytes, got {len(handle)}")
    h = _IpcMemHandle()
    ctypes.memmove(ctypes.addressof(h), handle, HANDLE_BYTES)
    ptr = ctypes.c_uint64()
    _check(
        _driver().cuIpcOpenMemHandle_v2(
            ctypes.byref(ptr), h, ctypes.c_uint(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        ),
        "cuIpcOpenMemHandle",
    )
    _, size = address_range(int(ptr.value))
    return int(ptr.value), size


def close_handle(ptr: int) -> None:
    _driver().cuIpcCloseMemHandle(ctypes.c_uint64(ptr))


class _Cai:
    """The minimal ``__cuda_array_interface__`` PyTorch needs to view raw device memory as bytes."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__: dict[str, Any] = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 2,
        }


def byte_view(ptr: int, nbytes: int) -> torch.Tensor:
    """A uint8 CUDA tensor over ``nbytes`` at ``ptr`` (it does not own the memory)."""
    return torch.as_tensor(_Cai(ptr, nbytes), device="cuda")


def host_device_pointer(host_ptr: int) -> int:
    """The device address of page-locked host memory (PyTorch's ``pin_memory`` allocations are mapped)."""
    dptr = ctypes.c_uint64()
    _check(
        _driver().cuMemHostGetDevicePointer_v2(
            ctypes.byref(dptr), ctypes.c_void_p(host_ptr), ctypes.c_uint(0)
        ),
        "cuMemHostGetDevicePointer",
    )
    return int(dptr.value)


def _stream_value32(name: str, stream: int, dptr: int, value: int) -> None:
    """``cuStreamWaitValue32`` / ``cuStreamWriteValue32`` (their ``_v2`` where the driver has it), flags 0."""
    lib = _driver()
    fn = getattr(lib, name + "_v2", None) or getattr(lib, name)
    fn.restype = ctypes.c_int
    _check(fn(ctypes.c_void_p(stream), ctypes.c_uint64(dptr), ctypes.c_uint32(value), ctypes.c_uint(0)), name)


def stream_wait_value(stream: int, dptr: int, value: int) -> None:
    """Enqueue on ``stream`` a wait until the 32-bit word at ``dptr`` is >= ``value`` (as a wrapping
    signed difference; ``cuStreamWaitValue32``, CU_STREAM_WAIT_VALUE_GEQ): the stream holds until the
    host writes that word, with nothing running on the GPU meanwhile."""
    _stream_value32("cuStreamWaitValue32", stream, dptr, value)


def stream_write_value(stream: int, dptr: int, value: int) -> None:
    """Enqueue on ``stream`` a write of ``value`` to the 32-bit word at ``dptr`` (``cuStreamWriteValue32``,
    after the stream's earlier work and its memory writes: the default barrier)."""
    _stream_value32("cuStreamWriteValue32", stream, dptr, value)


class Hop:
    """Two 32-bit counters in device memory the judge shares with one side (an IPC handle): *go* at byte 0,
    which the judge's stream writes and the side's waits on, and *done* at ``DONE_AT``, the other way.

    Under MPS an inter-process event's hop cost 16 or 23 us, at a level that held per side process (a
    ~60 us kernel then read 12-18% off); the same hop through stream memory operations cost 7.6 +- 0.6 us
    (bench/chained_calls_probe.py). Counters only grow within a side's life, so a wait enqueued early
    never passes on an earlier call's value."""

    DONE_AT = 128
    NBYTES = 256

    def __init__(self) -> None:
        self.ptr = mem_alloc(self.NBYTES)
        self.handle, _ = export(self.ptr)
        self.n = 0

    def reset(self) -> None:
        """Both counters to zero (a new side process: nothing of the last one's is still queued)."""
        byte_view(self.ptr, self.NBYTES).zero_()
        torch.cuda.synchronize()
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n
