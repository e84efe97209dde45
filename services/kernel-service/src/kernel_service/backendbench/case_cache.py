"""An op's prepared inputs, kept by an eval worker's judge between jobs.

Building a BackendBench op's inputs is the judge's largest own cost in a suite: OpInfo's samples, their
float64 conditioning and uniqueness checks and the dispatch tracing that tells which overload each one
calls took ~31 ms an op on the H100, about a third of an opinfo op's time, on a thread that shares the
GIL with the judge. The same op judged again (another model's kernels, an RL loop's next attempt, a
suite run twice) gets the same inputs, so they are built once per worker. They stay the judge's: each
side only ever gets its own copy, written into its arena, so no kernel can change what the next one sees.

The op's own answers for those inputs (:class:`Answer`: outputs, inputs after the call, aliasing) are
kept with them once the reference process gave them: they depend on nothing else (op, inputs, device and
torch are all in the key), so the op judged again asks the reference process only for inputs it has not
answered, and a warm suite's correctness pass runs the kernel alone. So are the inputs the op rejects
(:class:`Rejection`), once the reference process that rejected them answered a known-good call: an op
judged again (an RL loop's next attempt) starts no reference process for a trace that holds some.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from .schemas import BackendBenchEvalRequest
from .suites import Case

#: Tensor bytes kept at most (least recently used ops go first). The opinfo suite's inputs take ~135 MB,
#: 131 MB of them grid_sampler_3d's, and its answers as much again: at 256 MB most of that op's answers
#: were not kept, so each warm suite started a reference process for it (0.65 s of a 10 s suite on an
#: H200, 4.7 s of it on the CPU).
MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class Answer:
    """The op's answer for one input, in the judge's own memory: its outputs, its inputs as the call left
    them (in-place and ``out=`` variants) and, per output tensor, the input it aliases (None: new memory)."""

    out: Any
    inputs_after: tuple[list[Any], dict[str, Any]]
    aliases: list[int | None]


@dataclass(frozen=True)
class Rejection:
    """The op raised on this input, and would again (not out of memory, not a broken device): the input
    is not a test of any kernel."""


#: What is kept of one input: the op's answer, or that it rejects the input.
Kept = Answer | Rejection


@dataclass
class Entry:
    correctness: list[Case]
    perf: list[Case]
    forbidden: set[str]
    nbytes: int
    device_nbytes: int
    #: the op's answers (and rejections), by the input's position in ``correctness + perf``
    answers: dict[int, Kept] = field(default_factory=dict)


def key_of(req: BackendBenchEvalRequest, device: str, dtypes: list[str]) -> tuple[Any, ...]:
    """What an op's inputs depend on (the torch version is the worker's own, fixed)."""
    opts = req.options
    trace = None
    if opts.trace is not None:
        trace = hashlib.sha256(json.dumps(opts.trace, sort_keys=True, default=str).encode()).hexdigest()
    return (
        req.op, req.suite, device, tuple(dtypes), opts.seed, opts.max_inputs, opts.trace_file, trace,
        opts.detect_original_op,
    )  # fmt: skip


def _tensor_bytes(values: Any) -> tuple[int, int]:
    """(all, on a GPU) bytes of the tensors in ``values`` (cases, answers), each storage counted once."""
    seen: dict[int, tuple[int, bool]] = {}

    def visit(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            seen[storage.data_ptr()] = (storage.nbytes(), v.device.type == "cuda")
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, Case):
            visit((v.args, v.kwargs))
        elif isinstance(v, Answer):
            visit((v.out, v.inputs_after))

    visit(values)
    return sum(n for n, _ in seen.values()), sum(n for n, gpu in seen.values() if gpu)


class CaseCache:
    """Least-recently-used prepared inputs, by :func:`key_of`; safe to use from the judge's prepare thread."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[Any, ...], Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Entry | None:
        with self._lock:
            entry = self._items.get(key)
            if entry is not None:
                self._items.move_to_end(key)
            return entry

    def put(
        self, key: tuple[Any, ...], correctness: list[Case], perf: list[Case], forbidden: set[str]
    ) -> None:
        nbytes, device_nbytes = _tensor_bytes(correctness + perf)
        if nbytes > self.max_bytes:
            return
        with self._lock:
            self._items[key] = Entry(correctness, perf, set(forbidden), nbytes, device_nbytes)
            self._items.move_to_end(key)
            self._evict(keep=key)

    def answers(self, key: tuple[Any, ...]) -> dict[int, Kept] | None:
        """The op's kept answers for the inputs under ``key`` (None: those inputs are not kept)."""
        with self._lock:
            entry = self._items.get(key)
            return dict(entry.answers) if entry is not None else None

    def keep_answers(self, key: tuple[Any, ...], answers: dict[int, Kept]) -> None:
        """Keep ``answers`` (by input position) with the inputs under ``key``, within the byte budget."""
        nbytes, device_nbytes = _tensor_bytes(list(answers.values()))
        with self._lock:
            entry = self._items.get(key)
            if entry is None or entry.nbytes + nbytes > self.max_bytes:
                return
            entry.answers.update(answers)
            entry.nbytes += nbytes
            entry.device_nbytes += device_nbytes
            self._evict(keep=key)

    def _evict(self, keep: tuple[Any, ...]) -> None:
        while sum(e.nbytes for e in self._items.values()) > self.max_bytes:
            oldest = next(iter(self._items))
            if oldest == keep:
                self._items.move_to_end(keep)
                oldest = next(iter(self._items))
            self._items.pop(oldest)

    @property
    def device_nbytes(self) -> int:
        """GPU memory the kept inputs take (the judge's own, not a leak of a job's)."""
        with self._lock:
            return sum(e.device_nbytes for e in self._items.values())

    def __len__(self) -> int:
        return len(self._items)
