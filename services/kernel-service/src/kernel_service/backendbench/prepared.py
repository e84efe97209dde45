"""One BackendBench evaluation made ready to judge: the op's :class:`Prepared` inputs (built once, on the
device, kept between jobs with the op's answers) and the :class:`Sides` that judge them (a reference
process that serves every op of a run, a candidate process per kernel), shared by the correctness pass
(``evaluator.py``) and the performance timing (``performance.py``).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..judging.harness import usable_build_dir
from ..judging.judging import Run
from .case_cache import CaseCache, Kept
from .schemas import BackendBenchEvalRequest, BackendBenchEvalResponse
from .suites import Case

MAX_ERROR_CHARS = 600


def trim(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 20] + " ...[trimmed]"


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@dataclass
class Prepared:
    """One request made ready to judge: its inputs (built once, on the device), what it may not call."""

    req: BackendBenchEvalRequest
    device: str
    base: dict[str, Any]
    correctness: list[Case]
    perf: list[Case]
    forbidden: set[str]
    started: float
    #: seconds spent preparing (a batch prepares the next op while this one runs: its own time only)
    prep_s: float = 0.0
    #: where the inputs are kept (``cache`` under ``key``), and the op's answers kept with them so far
    cache: CaseCache | None = None
    key: tuple[Any, ...] | None = None
    answers: dict[int, Kept] | None = None
    #: answers heard beside rejections, kept once the reference process answers a known-good call
    held: dict[int, Kept] = field(default_factory=dict)

    def keep(self, answers: dict[int, Kept]) -> None:
        """Keep the op's ``answers`` (by input position; the judge's own copies) with its inputs."""
        if self.answers is not None and self.cache is not None and self.key is not None:
            self.answers.update(answers)
            self.cache.keep_answers(self.key, answers)

    def hold(self, answers: dict[int, Kept]) -> None:
        """Answers that include rejections: kept by :meth:`confirm` (a process whose CUDA context broke
        rejects every input, and must not have that kept)."""
        if self.answers is not None:
            self.held.update(answers)

    def confirm(self) -> None:
        """The reference process answered a known-good call after rejecting inputs: keep what it said."""
        held, self.held = self.held, {}
        self.keep(held)

    @property
    def answered(self) -> bool:
        """Whether the op's answer for every input is kept (no reference process needed to check)."""
        return self.answers is not None and len(self.answers) == len(self.correctness) + len(self.perf)


class Sides:
    """The side processes of one :class:`Run`: a reference process that serves every op of the run (it
    runs aten ops only), and a candidate process that is forked afresh per op unless ops share it (a
    batch). ``loaded`` counts the kernels the current candidate process has imported."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.loaded = 0
        #: whether the kernel being judged joined a candidate process that held other kernels
        self.shared = False
        #: why the reference process was replaced while judging the current op (None: it was not)
        self.reference_replaced: str | None = None
        #: seconds spent starting side processes since the current op's judging began
        self.startup_s = 0.0
        self.build_dir = usable_build_dir(run.workdir / "build", run.workdir)

    def alive(self, role: str) -> bool:
        side = self.run.sides.get(role)
        return side is not None and side.alive

    def start(self, *roles: str) -> None:
        """Fork each of ``roles`` afresh (killing the old one) with arenas of its own; several start at
        once (each side's set-up, its CUDA context above all, takes ~0.3 s on the H100)."""
        if "candidate" in roles:
            self.loaded = 0
        started = time.perf_counter()
        self.run.restart(roles, self.build_dir, self.setup)
        if roles:
            self.startup_s += time.perf_counter() - started

    @property
    def setup(self) -> dict[str, Any]:
        """The message that sets a new side process up."""
        return {"op": "setup", "device": str(self.run.device), "build_dir": self.build_dir}

    def deadline(self, timeout_s: float) -> None:
        """``timeout_s`` from now for every reply of either side (each op of a batch has its own)."""
        run = self.run
        run.timeout_s = timeout_s
        run.deadline = time.monotonic() + timeout_s
        for side in run.sides.values():
            side.deadline = run.deadline

    def candidate(self, shared: bool, reference: bool = True) -> bool:
        """Make the candidate process ready for the next kernel; True when it already holds others'.
        The reference process is started with it when ``reference`` (the op's answers are not all
        kept) and replaced when it died: a dead one at the end of an op died judging it."""
        self.shared = shared and self.alive("candidate") and self.loaded > 0
        roles = ["reference"] if (reference and not self.alive("reference")) or self.reference_died() else []
        self.start(*roles, *([] if self.shared else ["candidate"]))
        return self.shared

    def reference(self) -> None:
        """Start the reference process if it is not running (its answers were kept until now)."""
        if not self.alive("reference"):
            self.start("reference")

    def reference_died(self) -> bool:
        """Whether the reference process was started and is dead."""
        return "reference" in self.run.sides and not self.alive("reference")


def load_kernel(
    sides: Sides, req: BackendBenchEvalRequest, base: dict[str, Any]
) -> BackendBenchEvalResponse | None:
    """Import the kernel in the candidate process; the verdict when that fails."""
    loaded = sides.run.ask(
        "candidate", {"op": "load_fn", "source": req.source, "function": req.function_name}
    )
    sides.loaded += 1
    if loaded.get("ok"):
        return None
    outcome = (
        str(loaded.get("outcome"))
        if loaded.get("outcome") in ("load_error", "missing_function")
        else "load_error"
    )
    message = str(loaded.get("message", ""))[:MAX_ERROR_CHARS]
    if outcome == "load_error":
        message = (
            f"the source failed to import: {trim(str(loaded.get('traceback') or message)[-MAX_ERROR_CHARS:])}"
        )
    return BackendBenchEvalResponse(**base, outcome=outcome, correctness=0.0, feedback=message)
