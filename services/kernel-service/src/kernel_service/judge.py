"""The judge: evaluates one KernelBench submission without ever running its code.

The judge (the eval worker's own process) loads the reference module only for ``get_inputs`` and
``get_init_inputs``, draws every seed, makes every input, decides which outputs are checked, compares,
times and gives the verdict. The submission runs in a *candidate* side process forked for this job, the
reference model in a *reference* side process built the same way (so both carry the same overheads);
neither can reach the judge's memory, and the candidate is killed before the reference is timed, so
nothing of the submission runs while the reference is measured.

Per call, the judge writes fresh inputs (a seed from ``os.urandom``) into that side's own arena, calls,
and reads the outputs through views it validates, copying (or, above ``TIMED_SAMPLE_ELEMENTS``, sampling at
positions drawn after the call) what it checks. Timing (``timing.py``): on a GPU, judge-side CUDA events
ordered around the side's work by inter-process events behind a short GPU-side gate, so no host latency
enters the reading; on the CPU, the judge's clock around the request.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from . import integrity, profiling, transport
from .compare import compare_outputs, default_tolerance, flatten_outputs
from .harness import (
    Environment,
    HarnessError,
    Job,
    PhaseReporter,
    cast_inputs,
    excerpt_tb,
    fresh_seed,
    load_module,
    make_inputs,
    precision_dtype,
    resolve_device,
    usable_build_dir,
)
from .sandbox import HardenPolicy
from .schemas import PRECISION_TOLERANCE, Outcome, TimingStats, excerpt, reward_for
from .sides import SideFault, SideProcess, Zygote
from .timing import (
    GATE_TRIES,
    READING_TARGET_MS,
    CpuTimer,
    GatedSide,
    GpuTimer,
    HostGate,
    PrepError,
    Timer,
    calls_per_reading,
)

#: Timed outputs of more elements are checked at this many random positions (correctness trials compare
#: whole outputs).
TIMED_SAMPLE_ELEMENTS = 1 << 20
#: Stop timing early (keeping what was measured) once this share of the job's timeout is spent.
TIMING_BUDGET_SHARE = 0.6
MIN_TIMED_TRIALS = 5
#: Timed readings at least (up to ``perf_trials``) when each holds several calls.
MIN_READINGS = 10
#: Gated calls of the reference side that choose the calls per reading.
ESTIMATE_CALLS = 3
#: Timed readings of a side before their precision (``EvalOptions.perf_precision``) may end its timing.
PRECISE_MIN_READINGS = 20
#: GPU memory the judge may still hold after a job before its worker is replaced: one problem's
#: inputs take gigabytes, and what the judge keeps the next job's two sides cannot allocate.
JUDGE_LEAK_BYTES = 64 << 20
INTERLEAVED_METHOD = (
    "judge's time.perf_counter from writing the inputs to the side's answer (after it copied its outputs "
    "into the judge's shared memory); candidate and reference calls interleaved on the same inputs (each "
    "going first in turn), the candidate's processes stopped while the reference is timed; median"
)


class Incorrect(Exception):
    """An ``incorrect`` verdict found inside a phase."""


class Judge:
    """One per eval worker: the zygote that forks sides, and the GPU timer's calibration."""

    def __init__(
        self, env: Environment, policy: HardenPolicy, tmp: Path, zygote: Zygote | None = None
    ) -> None:
        self.env = env
        self.tmp = tmp
        # One CPU thread for the judge's own tensor work: spinning OpenMP workers of the judge would
        # compete with the side being timed on the same cores.
        torch.set_num_threads(1)
        self.policy = policy
        self._zygote: Zygote | None = zygote
        #: Set when the zygote had to be replaced: a new one carries this process's restrictions into its
        #: forks, so the worker should be replaced after this job.
        self.recycle: str | None = None
        self._gpu_timer: GpuTimer | None = None
        #: What a benchmark keeps between this judge's jobs, by name (BackendBench's prepared inputs);
        #: a value's ``device_nbytes`` is GPU memory of the judge's own, not a job's leak.
        self.memo: dict[str, Any] = {}

    @property
    def zygote(self) -> Zygote:
        if self._zygote is not None and self._zygote.proc.poll() is not None:
            self.recycle = "the zygote died and was restarted"
            self._zygote = None
        if self._zygote is None:
            self._zygote = Zygote(self.tmp / "zygote-log.txt")
        if not self._zygote.forks_can_use_cuda:  # an import touched CUDA: fork from a bare one
            self._zygote.close()
            self._zygote = Zygote(self.tmp / "zygote-log.txt", preimport=False)
            self.recycle = "the zygote restarted without preimports"
        return self._zygote

    def keep_pids(self) -> set[int]:
        """Processes of the judge's own that the leftover-process sweep must spare."""
        return {self._zygote.pid} if self._zygote is not None else set()

    def own_threads(self) -> frozenset[int]:
        """Threads of the judge's own that the leftover-thread check must spare (the gate's watchdog)."""
        gate = self._gpu_timer.gate if self._gpu_timer is not None else None
        return frozenset({gate.watchdog.ident or 0}) if isinstance(gate, HostGate) else frozenset()

    def resident_bytes(self) -> int:
        """GPU memory the judge keeps between jobs (the timer's L2-flush buffer, what ``memo`` holds)."""
        kept = sum(int(getattr(v, "device_nbytes", 0)) for v in self.memo.values())
        return kept + (self._gpu_timer.flush.nbytes if self._gpu_timer is not None else 0)

    def gpu_timer(self, device: torch.device) -> GpuTimer:
        if self._gpu_timer is None:
            self._gpu_timer = GpuTimer(device)
        return self._gpu_timer

    @property
    def kernel_cache(self) -> Path:
        """PyTorch's NVRTC kernel cache for this judge's sides (ops such as ``mul`` on complex values or
        ``digamma`` are compiled at first use, 0.3-11 s an op on the H100, in every new process): written
        only by the reference side, which runs trusted code, and read-only to the candidate, whose cubins
        would otherwise be loaded by the next reference."""
        path = self.tmp / "nvrtc-cache"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def side_request(self, tmp: Path, build_dir: str, role: str) -> dict[str, Any]:
        p = self.policy
        cache = str(self.kernel_cache)
        return {
            "tmp": str(tmp),
            "writable": [str(w) for w in p.writable[1:]]
            + [build_dir]
            + ([cache] if role == "reference" else []),
            "readable": [str(r) for r in p.readable] + ([cache] if role != "reference" else []),
            "kernel_cache": cache,
            "fsize": p.fsize_bytes,
            "nproc": p.nproc,
            "address_space": p.address_space,
            "landlock": p.landlock,
        }

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()


class Run:
    """The state of one evaluation: its two sides, their arenas, what was opened of theirs."""

    def __init__(self, judge: Judge, workdir: Path, device: torch.device, timeout_s: float) -> None:
        self.judge, self.workdir, self.device, self.timeout_s = judge, workdir, device, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.sides: dict[str, SideProcess] = {}
        self.arenas: dict[tuple[str, str], transport.Arena] = {}
        self.opened: dict[str, transport.Opened] = {}
        self.phase = "startup"
        self.candidate_output: str | None = None
        self.recycle: str | None = None
        #: The precision both sides run at: a reference that fails at fp16/bf16 is named for it.
        self.precision = "fp32"
        #: What forking a side again needs (``_profile``): the build dir and each role's setup and load.
        self.spawn: dict[str, Any] = {}

    def fork(self, role: str, build_dir: str) -> SideProcess:
        tmp = self.workdir / role
        side = SideProcess(
            self.judge.zygote, role, self.judge.side_request(tmp, build_dir, role), self.deadline
        )
        self.sides[role] = side
        self.opened[role] = transport.Opened()
        return side

    def refork(self, role: str) -> SideProcess:
        """A fresh process for ``role`` (the old one killed, its arenas dropped: the new one maps its
        own), set up and its model loaded as the first was (``spawn``)."""
        self.kill(role)
        for key in [k for k in self.arenas if k[0] == role]:
            self.arenas.pop(key).close()
        side = self.fork(role, self.spawn["build_dir"])
        for msg in (self.spawn["setup"], self.spawn["load"][role]):
            reply = self.ask(role, msg)
            if not reply.get("ok"):
                raise self.side_error(role, reply)
        return side

    def ask(self, role: str, msg: dict[str, Any], fd: int | None = None) -> dict[str, Any]:
        try:
            return self.sides[role].request(msg, self.phase, fd)
        except SideFault as fault:
            raise self._fault(role, fault) from None

    def ask_each(self, msgs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each side its own message, both at work at once (starting CUDA, importing a model); the
        replies by role. A fault raises as :meth:`ask` would, for the first side (in ``msgs``' order)."""
        for role, msg in msgs.items():
            try:
                self.sides[role].send(msg, self.phase)
            except SideFault as fault:
                raise self._fault(role, fault) from None
        replies = {}
        for role in msgs:
            try:
                replies[role] = self.sides[role].receive(self.phase)
            except SideFault as fault:
                raise self._fault(role, fault) from None
        return replies

    def _fault(self, role: str, fault: SideFault) -> HarnessError:
        if fault.kind == "timeout":
            return HarnessError(
                Outcome.TIMEOUT,
                f"evaluation exceeded timeout_s={self.timeout_s:g} (during {self.phase}); {role} process killed",
            )
        if role == "reference":
            return HarnessError(Outcome.UNKNOWN_ERROR, f"the reference process failed: {fault.message}")
        return HarnessError(Outcome.EXECUTION_FAILURE, fault.message)

    def arena(self, role: str, which: str, nbytes: int) -> transport.Arena:
        """The side's ``which`` ("in" | "out") arena, (re)made and shared when it is smaller than ``nbytes``."""
        key = (role, which)
        old = self.arenas.get(key)
        if old is not None and old.nbytes >= nbytes:
            return old
        arena = transport.Arena(max(nbytes, 2 * old.nbytes if old else 0), self.device)
        msg = {"op": "arena", "which": which, "nbytes": arena.nbytes, "kind": arena.kind}
        if arena.handle is not None:
            msg["handle"] = arena.handle.hex()
        reply = self.ask(role, msg, arena.fd)
        if not reply.get("ok"):  # the side still maps the old arena: it must not be written for it
            arena.close()
            raise self.side_error(role, reply)
        self.arenas[key] = arena
        if old is not None:
            old.close()
        return arena

    def call(
        self,
        role: str,
        args: list[Any],
        timer: Timer | None = None,
        kwargs: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Call:
        """One call of ``role``'s callable on copies of ``args``/``kwargs`` (written to its arena now).

        Timed candidate outputs come back already copied by the judge (sampled when large), inside the
        timer, right after the call's end is recorded; other outputs are views, to read before the side's
        next call.
        """
        return self._request(role, (list(args), dict(kwargs or {})), False, timer, extra)

    def calls(
        self,
        role: str,
        sets: list[tuple[list[Any], dict[str, Any]]],
        timer: Timer,
        extra: dict[str, Any] | None = None,
    ) -> Call:
        """One timed reading of ``len(sets)`` calls, one per ``(args, kwargs)`` set, run back to back by
        the side between one go and one done: ``ms`` is their total and ``out`` the list of their outputs.
        Every set has values of its own, and every output is the judge's to check."""
        return self._request(role, [(list(a), dict(k)) for a, k in sets], True, timer, extra)

    def tried(
        self, role: str, sets: list[tuple[list[Any], dict[str, Any]]], extra: dict[str, Any] | None = None
    ) -> Call:
        """Untimed, one call per ``(args, kwargs)`` set in one request: ``out`` holds, per set, ``(True,
        output)`` or ``(False, None)`` where the call raised (``extra``: ``overloads``, one aten overload
        name per set, for the reference side; ``record``)."""
        return self._request(
            role, [(list(a), dict(k)) for a, k in sets], True, None, {**(extra or {}), "tried": True}
        )

    def drawn(
        self,
        role: str,
        draw: Callable[[], list[tuple[list[Any], dict[str, Any]]]],
        count: int,
        nbytes: int,
        timer: Timer,
    ) -> Call:
        """As :meth:`calls`, the ``count`` sets made by ``draw`` inside the timer, after its start, straight
        into the side's arena (``transport.DrawInto``; ``nbytes``: what they take there) instead of
        being made before and copied in (a KernelBench problem's 6 GiB input took 4 ms to copy, as long
        as its kernel)."""
        return self._request(role, [None] * count, True, timer, None, (draw, nbytes))

    def _request(
        self,
        role: str,
        values: Any,
        many: bool,
        timer: Timer | None,
        extra: dict[str, Any] | None,
        drawing: tuple[Callable[[], Any], int] | None = None,
    ) -> Call:

        def read(reply: dict[str, Any]) -> Callable[[], Any]:
            out = self.decode(role, reply)
            if self.device.type != "cuda":  # the CPU timer's span ends with this copy: the same for both
                return lambda: snapshot(out)
            if role == "candidate":  # sampled (cloning multi-GB outputs costs more than the kernels)
                return lambda: snapshot(out, TIMED_SAMPLE_ELEMENTS)
            return lambda: unwrap(out)

        tries = 0
        while True:
            arena = self.arena(role, "in", drawing[1] if drawing else transport.layout_bytes(values))
            msg: dict[str, Any] = {"op": "call", **(extra or {})}
            if not drawing:
                packed, write = transport.pack(values, arena)
                msg.update({"calls": packed} if many else {"args": packed[0], "kwargs": packed[1]})
            else:
                write = partial(self.draw, drawing[0], arena, msg)
            msg["gated"] = timer is not None and self.device.type == "cuda"
            if timer is None:
                write()
                ms, reply = None, self.ask(role, msg)
                if reply.get("ok"):
                    call = Call(None, self.decode(role, reply), reply, packed, arena)
                    return self._answered(role, values, many, call)
            else:
                tries += 1
                try:
                    ms, reply = timer.time_call(
                        partial(self.ask, role, msg),
                        read,
                        write,
                        tries >= GATE_TRIES,
                        len(values) if many else 1,
                    )
                except TimeoutError as exc:
                    self.recycle = f"a timed call of the {role} never finished on the GPU"
                    raise self._fault(role, SideFault("timeout", str(exc))) from exc
                if reply.get("ok"):
                    if ms is None:
                        continue  # the gate expired before the side answered: measure again
                    packed = msg["calls"] if drawing else packed
                    return self._answered(role, values, many, Call(ms, reply["read"], reply, packed, arena))
            if isinstance(reply.get("need"), int) and 0 < reply["need"] < 1 << 40:
                self.arena(role, "out", reply["need"])
                continue
            raise self.side_error(role, reply)

    def draw(
        self, draw: Callable[[], Any], arena: transport.Arena, msg: dict[str, Any], blocking: bool = True
    ) -> None:
        """The ``write`` of a drawn reading: the sets made into ``arena``, what is not in place copied
        there, and ``msg`` given their descriptors."""
        with transport.DrawInto(arena):
            values = draw()
        if transport.layout_bytes(values) > arena.nbytes:
            raise HarnessError(
                Outcome.UNKNOWN_ERROR, "the reference's get_inputs made larger inputs for a new seed"
            )
        msg["calls"], write = transport.pack(values, arena)
        write(blocking)

    def _answered(self, role: str, values: Any, many: bool, call: Call) -> Call:
        """``call``, once a reading of several calls has exactly one output per call (a side describes its
        own answer: one that names a single tensor, or too few, is refused, never zipped short)."""
        if many and not (isinstance(call.out, (list, tuple)) and len(call.out) == len(values)):
            got = f"{len(call.out)} outputs" if isinstance(call.out, (list, tuple)) else "a single value"
            why = f"a reading of {len(values)} calls was answered with {got}"
            if role == "reference":
                raise HarnessError(Outcome.UNKNOWN_ERROR, f"reference outputs: {why}")
            raise HarnessError(Outcome.EXECUTION_FAILURE, f"the candidate's outputs were refused: {why}")
        return call

    def decode(self, role: str, reply: dict[str, Any]) -> Any:
        try:
            return transport.decode(
                reply.get("out"), self.arenas[(role, "in")], self.arenas.get((role, "out")), self.opened[role]
            )
        except (transport.TransportError, RuntimeError) as exc:
            raise (
                HarnessError(Outcome.UNKNOWN_ERROR, f"reference outputs: {exc}")
                if role == "reference"
                else HarnessError(Outcome.EXECUTION_FAILURE, f"the candidate's outputs were refused: {exc}")
            ) from exc

    def side_error(self, role: str, reply: dict[str, Any]) -> HarnessError:
        message = str(reply.get("message", "failed"))[:1500]
        if role == "reference":
            if self.precision != "fp32":  # the problem's own code does not run at this precision
                return HarnessError(
                    Outcome.UNSUPPORTED_PRECISION,
                    f"the reference does not run at precision {self.precision}: {message}",
                    tb=_text(reply, "traceback"),
                )
            return HarnessError(
                Outcome.UNKNOWN_ERROR, f"the reference failed: {message}", tb=_text(reply, "traceback")
            )
        try:
            outcome = Outcome(str(reply.get("outcome")))
        except ValueError:
            outcome = Outcome.EXECUTION_FAILURE
        if outcome in (
            Outcome.CORRECT,
            Outcome.COMPILED,
            Outcome.REQUIRES_GPU,
            Outcome.UNSUPPORTED_PRECISION,
        ):
            outcome = Outcome.EXECUTION_FAILURE  # a side never decides a favourable verdict
        err = HarnessError(
            outcome, message, tb=_text(reply, "traceback"), compile_log=_text(reply, "compile_log")
        )
        err.reply = reply
        return err

    def release(self) -> None:
        """Give the judge's cached free GPU memory back to the driver: blocks its caching allocator keeps
        are memory neither side can allocate (a problem's inputs may take gigabytes)."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @contextmanager
    def frozen(self, role: str) -> Iterator[None]:
        """``role``'s side and every process it started, stopped for the duration (see the zygote)."""
        side = self.sides[role]
        side.zygote.freeze(side.pid)
        try:
            yield
        finally:
            side.zygote.thaw(side.pid)

    def end_candidate(self) -> None:
        """Wait for the candidate's queued work (an asynchronous fault of its last calls is its own),
        then kill it: nothing of the submission runs after its timing."""
        reply = self.ask("candidate", {"op": "sync"})
        if not reply.get("ok"):
            raise self.side_error("candidate", reply)
        self.kill("candidate")

    def kill(self, role: str) -> None:
        side = self.sides.get(role)
        if side is None:
            return
        self.opened[role].close()
        side.kill()
        if role == "candidate":
            self.candidate_output = side.tail.text()

    def close(self) -> None:
        for role in list(self.sides):
            self.kill(role)
            self.sides[role].tail.text(wait=1.0)
        for arena in self.arenas.values():
            arena.close()
        self.arenas.clear()
        if self.device.type == "cuda":  # the judge's cached blocks would starve the next job's sides
            torch.cuda.empty_cache()
            kept = torch.cuda.memory_allocated(self.device) - self.judge.resident_bytes()
            if kept > JUDGE_LEAK_BYTES:  # e.g. tensors a caught exception's frames still hold
                gc.collect()
                torch.cuda.empty_cache()
                kept = torch.cuda.memory_allocated(self.device) - self.judge.resident_bytes()
                if kept > JUDGE_LEAK_BYTES:
                    self.recycle = f"the judge still held {kept >> 20} MiB of GPU memory after the job"
        if self.sides:  # daemons a side left behind were reparented to the zygote: they go now
            try:
                self.judge.zygote.sweep()
            except (OSError, ValueError):
                pass


@dataclass
class Call:
    """What one call gave: milliseconds when timed, outputs, the side's reply, the inputs as packed."""

    ms: float | None
    out: Any
    reply: dict[str, Any]
    packed: Any
    arena: transport.Arena

    def inputs_after(self) -> Any:
        """The judge's views of this call's inputs as the side left them (in-place and out= results)."""
        return transport.unpack(self.packed, self.arena.bytes)

    def inputs_kept(self) -> Any:
        """:meth:`inputs_after` copied now, in one copy of the arena's bytes they use (a side may write
        its arena again later; one copy, not one clone per tensor: a group of 64 inputs made hundreds of
        small GPU copies), each view keeping its strides and its offset in the copy."""
        region = self.arena.bytes[: transport.span(self.packed)].clone()
        return transport.unpack(self.packed, region)


def _text(reply: dict[str, Any], key: str) -> str | None:
    v = reply.get(key)
    return str(v)[:4000] if v else None


def snapshot(out: Any, sample_above: int | None = None) -> Any:
    """The judge's own copy of decoded outputs (tensors cloned, or sampled above ``sample_above``)."""
    if isinstance(out, transport.OutputTensor):
        return integrity.snapshot_outputs(out.tensor, sample_above)
    if isinstance(out, (list, tuple)):
        return type(out)(snapshot(x, sample_above) for x in out)
    return out


def unwrap(out: Any) -> Any:
    """Decoded outputs as plain tensors (views: read them before the side's next call)."""
    if isinstance(out, transport.OutputTensor):
        return out.tensor
    if isinstance(out, (list, tuple)):
        return type(out)(unwrap(x) for x in out)
    return out


def foreign(out: Any) -> str | None:
    for i, v in enumerate(flatten_outputs(out)):
        if isinstance(v, transport.Foreign):
            return f"output {i} is a {v.what}: return plain torch.Tensor values"
    return None


def misplaced(call: Call, device: torch.device) -> str | None:
    """A CUDA job's output the side returned from host memory (it crossed through the output arena, so
    the judge's view of it is on the GPU): refused, as comparing it with the reference's fails upstream."""
    if device.type != "cuda":
        return None
    stack, i = [call.reply.get("out")], 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and isinstance(node.get("items"), list):
            stack.extend(reversed(node["items"]))
        elif isinstance(node, dict) and node.get("k") == "tensor":
            if node.get("loc") == "out":
                return f"output {i} is on the CPU, the reference's on {device}: return tensors on the inputs' device"
            i += 1
    return None


def evaluate(
    judge: Judge, job: Job, workdir: Path, env: Environment, report: PhaseReporter
) -> dict[str, Any]:
    """Run one evaluation; never raises for a bad submission. Returns a KernelEvalResponse dict."""
    opts = job.options
    device = resolve_device(opts, env)
    base: dict[str, Any] = {
        "backend": job.backend,
        "device": str(device),
        "hardware": env.hardware,
        "torch_version": env.torch_version,
        "cuda_version": env.cuda_version,
        "correctness_trials": opts.correctness_trials,
        "tf32": _tf32_flags(opts.tf32),
        "precision": opts.precision,
    }
    started = time.perf_counter()
    phases: dict[str, float] = {}
    run = Run(judge, workdir, device, opts.timeout_s)
    run.precision = opts.precision
    try:
        result = _evaluate(run, job, base, phases, report, started)
    except HarnessError as err:
        result = {
            **base,
            "outcome": err.outcome.value,
            "reward": reward_for(err.outcome, None),
            "message": err.message,
            "traceback": excerpt(err.tb),
            "compile_log": excerpt(err.compile_log),
        }
    except Incorrect as bad:
        result = {**base, "outcome": Outcome.INCORRECT.value, "reward": reward_for(Outcome.INCORRECT, None),
                  "message": str(bad)}  # fmt: skip
    except Exception as exc:  # a judge bug: say so, never a favourable verdict
        result = {
            **base,
            "outcome": Outcome.UNKNOWN_ERROR.value,
            "reward": reward_for(Outcome.UNKNOWN_ERROR, None),
            "message": f"unexpected {type(exc).__name__}: {str(exc)[:500]}",
            "traceback": excerpt(excerpt_tb()),
        }
    finally:
        run.close()
    if opts.profile and result.get("profile") is None:
        result["profile"] = {
            "device": str(device),
            "source": profiling.CUDA_SOURCE if device.type == "cuda" else profiling.CPU_SOURCE,
            "note": f"not profiled: the outcome is {result.get('outcome')} (only a correct kernel is profiled)",
        }
    result["solution_output"] = run.candidate_output
    if run.recycle or judge.recycle:
        result["recycle"] = run.recycle or judge.recycle
    elapsed = result.setdefault("elapsed", {})
    for key, names in (
        ("init_s", ("load", "init")),
        ("correctness_s", ("correctness", "probe")),
        ("timing_s", ("timing",)),
    ):
        elapsed[key] = sum(v for k, v in phases.items() if k.startswith(names))
    elapsed["compile_s"] = phases.get("load", 0.0)
    elapsed["total_s"] = time.perf_counter() - started
    result["phases"] = {k: round(v, 6) for k, v in phases.items()}
    return result


def _tf32_flags(mode: str) -> dict[str, bool]:
    if mode == "default":
        return {
            "cudnn": bool(torch.backends.cudnn.allow_tf32),
            "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        }
    return {"cudnn": mode == "on", "matmul": mode == "on"}


class _Phases:
    def __init__(self, run: Run, phases: dict[str, float], report: PhaseReporter) -> None:
        self.run, self.phases, self.report = run, phases, report

    def __call__(self, name: str) -> _Phases:
        self.name = name
        self.run.phase = name
        self.report(name)
        return self

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.phases[self.name] = self.phases.get(self.name, 0.0) + time.perf_counter() - self.t0


def _evaluate(
    run: Run, job: Job, base: dict[str, Any], phases: dict[str, float], report: PhaseReporter, started: float
) -> dict[str, Any]:
    opts, device = job.options, run.device
    phase = _Phases(run, phases, report)
    if opts.device == "cuda" and device.type != "cuda":
        raise HarnessError(Outcome.REQUIRES_GPU, "device 'cuda' requested but this worker has no CUDA device")
    with phase("load_reference"):
        try:
            ref_mod = load_module(job.reference, "reference", run.workdir)
            for attr in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(ref_mod, attr):
                    raise HarnessError(Outcome.UNKNOWN_ERROR, f"the reference defines no `{attr}`")
            dtype = precision_dtype(opts.precision)
            # the judge casts what it makes, so both sides get the same values (integers stay integers)
            init_inputs = cast_inputs(
                make_inputs(ref_mod.get_init_inputs, opts.seed, torch.device("cpu")), dtype
            )
        except HarnessError:
            raise
        except Exception as exc:
            raise HarnessError(Outcome.UNKNOWN_ERROR, f"the reference failed (loading): {type(exc).__name__}: {exc}",
                               tb=excerpt_tb()) from exc  # fmt: skip

    def get_inputs(seed: int) -> list[Any]:
        try:
            values: list[Any] = cast_inputs(make_inputs(ref_mod.get_inputs, seed, device), dtype)
            return values
        except Exception as exc:
            raise HarnessError(Outcome.UNKNOWN_ERROR, f"the reference failed (get_inputs): {exc}") from exc

    with phase("load"):
        build_dir = usable_build_dir(Path(job.build_dir), run.workdir)
        setup = {"op": "setup", "device": str(device), "tf32": opts.tf32, "build_dir": build_dir}
        for role in ("reference", "candidate"):
            run.fork(role, build_dir)
        run.ask_each({"reference": setup, "candidate": setup})  # two CUDA contexts start at once
        models = {"reference": (job.reference, "Model", Outcome.UNKNOWN_ERROR),
                  "candidate": (job.solution, "ModelNew", Outcome.COMPILATION_FAILURE)}  # fmt: skip
        loads = {
            role: {
                "op": "load_model", "source": source, "name": "solution" if role == "candidate" else "reference",
                "cls": cls, "init": init_inputs, "seed": opts.seed, "load_outcome": load_outcome.value,
                "missing_outcome": load_outcome.value, "precision": opts.precision,
                "init_outcome": (Outcome.INITIALIZATION_FAILURE if role == "candidate" else Outcome.UNKNOWN_ERROR).value,
            } for role, (source, cls, load_outcome) in models.items()
        }  # fmt: skip
        run.spawn = {"build_dir": build_dir, "setup": setup, "load": loads}
        replies = run.ask_each(loads)
        for role, reply in replies.items():
            if not reply.get("ok"):
                raise run.side_error(role, reply)

    atol, rtol = opts.atol, opts.rtol
    passed = 0
    max_abs = max_rel = 0.0
    common: dict[str, Any] = {**base}
    with phase("correctness"):
        for trial in range(opts.correctness_trials):
            where = f"correctness trial {trial + 1}/{opts.correctness_trials}"
            inputs = get_inputs(fresh_seed())
            try:
                new_call = run.call("candidate", inputs)
            except HarnessError:
                if trial == 0 and opts.precision != "fp32":  # a problem that cannot run cast is named so:
                    run.call("reference", inputs)  # raises ``unsupported_precision`` if the reference fails
                raise
            new_out = snapshot(new_call.out)
            if why := foreign(new_out) or misplaced(new_call, device):
                raise Incorrect(f"{where}: {why}")
            ref_out = unwrap(run.call("reference", inputs).out)
            if atol is None or rtol is None:  # upstream's by precision; 1e-2 for any fp16/bf16 output
                tol = max(PRECISION_TOLERANCE[opts.precision], default_tolerance(flatten_outputs(ref_out)))
                atol = tol if atol is None else atol
                rtol = tol if rtol is None else rtol
            del inputs  # each side has its copy; a problem's inputs may take gigabytes
            cmp = compare_outputs(ref_out, new_out, atol, rtol)
            del ref_out, new_out, new_call
            run.release()
            max_abs = max(max_abs, cmp.max_abs_error or 0.0)
            max_rel = max(max_rel, cmp.max_rel_error or 0.0)
            if not cmp.ok:
                return {**base, "outcome": Outcome.INCORRECT.value, "reward": reward_for(Outcome.INCORRECT, None),
                        "message": f"{where}: {cmp.message}", "correctness_trials_passed": passed,
                        "max_abs_error": cmp.max_abs_error, "max_rel_error": cmp.max_rel_error,
                        "atol": atol, "rtol": rtol}  # fmt: skip
            passed += 1
    common.update({"correctness_trials_passed": passed, "max_abs_error": max_abs if passed else None,
                   "max_rel_error": max_rel if passed else None, "atol": atol, "rtol": rtol})  # fmt: skip
    if opts.correctness_trials == 0:
        return {
            **common,
            "outcome": Outcome.COMPILED.value,
            "reward": 0.0,
            "message": "correctness not checked",
            **_profiled(run, opts.profile, get_inputs, phase),
        }

    with phase("probe"):  # advisory: the candidate reports it about itself
        probe_inputs = get_inputs(fresh_seed())
        arena = run.arena("candidate", "in", transport.layout_bytes(probe_inputs))
        packed, write = transport.pack(probe_inputs, arena)
        write()
        reply = run.ask("candidate", {"op": "probe", "args": packed, "kwargs": {}})
        del probe_inputs, write  # a problem's inputs may take gigabytes
        if not reply.get("ok"):
            raise run.side_error("candidate", reply)
        common["uses_custom_kernel"] = bool(reply.get("uses_custom_kernel"))
        common["custom_kernels"] = sorted(str(k)[:200] for k in (reply.get("kernels") or [])[:50])

    if not opts.measure_performance:
        return {
            **common,
            "outcome": Outcome.CORRECT.value,
            "reward": 0.0,
            "message": "performance not measured",
            **_profiled(run, opts.profile, get_inputs, phase),
        }

    assert atol is not None and rtol is not None
    with phase("timing"):
        timing = _time(run, job, get_inputs, atol, rtol, started)
    if timing["mismatch"]:
        return {**common, "outcome": Outcome.INCORRECT.value, "reward": reward_for(Outcome.INCORRECT, None),
                "message": f"a timed call's output differs from the reference: {timing['mismatch']}"}  # fmt: skip
    speedup = timing.get("speedup") or (
        timing["ref"].median / timing["new"].median if timing["new"].median > 0 else None
    )
    return {
        **common,
        "outcome": Outcome.CORRECT.value,
        "reward": reward_for(Outcome.CORRECT, speedup),
        "speedup": speedup,
        "ref_timing": timing["ref"].model_dump(),
        "new_timing": timing["new"].model_dump(),
        "ref_timing_cached": timing["ref_cached"],
        "timing_method": timing["method"],
        "timing_gate": timing.get("gate"),
        **_profiled(run, opts.profile, get_inputs, phase),
    }


def _profiled(
    run: Run, wanted: bool, get_inputs: Callable[[int], list[Any]], phase: Callable[[str], Any]
) -> dict[str, Any]:
    """``{"profile": ...}`` when the request asked for one (the ``profile`` phase), else nothing: an
    evaluation that does not ask spends no time on it."""
    if not wanted:
        return {}
    with phase("profile"):
        return {"profile": _profile(run, get_inputs)}


def _profile(run: Run, get_inputs: Callable[[int], list[Any]]) -> dict[str, Any]:
    """One untimed call of each side under ``torch.profiler`` (``profiling.profile_call``), after the
    verdict and timing: the reference in its side, the candidate in a side forked again for it when its
    timed one was killed (a profiler attached before would have sat in the candidate's timed process).
    Advisory and never fatal: whatever fails is said in the profile, and the verdict stands."""
    device = run.device
    cuda = device.type == "cuda"
    out: dict[str, Any] = {
        "device": str(device),
        "source": profiling.CUDA_SOURCE if cuda else profiling.CPU_SOURCE,
        "note": profiling.NOTE,
    }
    inputs = get_inputs(fresh_seed())
    for role in ("candidate", "reference"):
        side = run.sides.get(role)
        reforked = side is None or not side.alive
        kept = run.candidate_output
        try:
            if reforked:
                run.refork(role)
            arena = run.arena(role, "in", transport.layout_bytes(inputs))
            packed, write = transport.pack(inputs, arena)
            write()
            left = run.deadline - time.monotonic()
            msg = {"op": "profile", "args": packed, "kwargs": {}, "ncu": cuda and role == "candidate",
                   "ncu_timeout_s": max(min(profiling.NCU_TIMEOUT_S, left - 10.0), 1.0)}  # fmt: skip
            reply = run.ask(role, msg)
            if not reply.get("ok"):
                out[role] = {"error": str(reply.get("message") or "the profiled call failed")[:500]}
                continue
            out[role] = profiling.side_profile(reply.get("profile"))
            if role == "candidate" and isinstance(reply.get("profile"), dict):
                out["ncu"] = profiling.ncu_report_of(reply["profile"].get("ncu"))
        except (HarnessError, Incorrect) as exc:
            out[role] = {"error": f"not profiled: {getattr(exc, 'message', None) or exc}"[:500]}
        except Exception as exc:  # a judge-side failure (an arena, the transport): the verdict stands
            out[role] = {"error": f"not profiled: {type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            if role == "candidate" and reforked:
                run.kill("candidate")
                # the output the answer reports is the judged process's, not the profiled one's
                run.candidate_output = kept
                if side is not None:
                    run.sides["candidate"] = side
    if not cuda:
        out["ncu"] = {"error": "no CUDA device: ncu measures GPU kernels only"}
    return out


def _time(
    run: Run, job: Job, get_inputs: Callable[[int], list[Any]], atol: float, rtol: float, started: float
) -> dict[str, Any]:
    """The candidate timed first, then killed; then the path's own cost calibrated and the reference
    timed on the seeds whose candidate outputs are checked: no code of the submission runs while the
    reference or the calibration is measured. (On the CPU, :func:`_time_interleaved`.)

    A reading is one request of ``n`` calls run back to back, each on values of its own (``n`` > 1 for
    calls under ``READING_TARGET_MS``: :func:`reading_size`; the candidate's ``m`` >= ``n``:
    :func:`candidate_reading_size`), drawn into the side's arena after the reading's start, and every
    output of every call is checked against the reference's for the same seed."""
    opts, device = job.options, run.device
    if device.type != "cuda" and job.cached_ref_timing is None:
        return _time_interleaved(run, job, get_inputs, atol, rtol, started)
    base: GpuTimer | CpuTimer = run.judge.gpu_timer(device) if device.type == "cuda" else CpuTimer()
    if isinstance(base, GpuTimer):
        base.start_job()
    cached = job.cached_ref_timing
    budget = opts.timeout_s * TIMING_BUDGET_SHARE
    timers: dict[str, Timer] = {
        role: base.bind(role, partial(run.ask, role)) for role in ("candidate", "reference")
    }
    warm_seed = fresh_seed()  # inputs made again where used: a problem's inputs may take gigabytes
    n = cap = 1
    if isinstance(base, GpuTimer):
        n, cap = reading_size(run, base, timers, [(get_inputs(warm_seed), {})])

    def sets(seeds: list[int]) -> list[tuple[list[Any], dict[str, Any]]]:
        return [(get_inputs(seed), {}) for seed in seeds]

    def reading(role: str, seeds: list[int]) -> Call:
        """One timed reading, on a GPU its inputs drawn into the side's arena after the reading's start."""
        if not isinstance(base, GpuTimer):
            return run.calls(role, sets(seeds), timers[role])
        return run.drawn(role, partial(sets, seeds), len(seeds), nbytes * len(seeds), timers[role])

    def warm() -> list[tuple[list[Any], dict[str, Any]]]:
        """One set of inputs, ``n`` times (warm-up and null calls need no values of their own)."""
        return [(get_inputs(warm_seed), {})] * n

    warm_sets = warm()
    nbytes = transport.layout_bytes(warm_sets[0])
    warm_ms: list[float] = []
    for _ in range(math.ceil(opts.warmup / n)):
        warmed = run.calls("candidate", warm_sets, timers["candidate"])
        if why := misplaced(warmed, device):
            raise Incorrect(f"warm-up call: {why}")
        if warmed.ms is not None:
            warm_ms.append(warmed.ms)
    del warm_sets, warmed
    run.release()

    m = n  # the candidate's calls a reading
    if isinstance(base, GpuTimer) and warm_ms:
        m = candidate_reading_size(n, (min(warm_ms) - base.null_ms) / n, cap, opts.perf_trials)
    readings = reading_count(opts.perf_trials, m)
    # on a GPU a side's readings end once their median is precise enough (a 37 ms kernel's 100 readings
    # a side took 9 s of a level-1 sweep's 5 minutes; such kernels vary by well under 1%)
    rel = opts.perf_precision if isinstance(base, GpuTimer) else 0.0
    new_raw: list[float] = []
    checked: list[tuple[int, Any]] = []  # (seed, output) of every timed call, checked against the reference's
    for i in range(readings):
        seeds = [fresh_seed() for _ in range(m)]
        timed = reading("candidate", seeds)
        assert timed.ms is not None
        new_raw.append(timed.ms)
        if why := foreign(timed.out) or misplaced(timed, device):
            raise Incorrect(f"timed reading {i + 1}: {why}")
        checked.extend(zip(seeds, timed.out, strict=True))
        if time.perf_counter() - started > budget and len(new_raw) >= MIN_TIMED_TRIALS:
            break
        if precise(new_raw, base.null_ms, rel):
            break
    run.end_candidate()

    # the null calls draw a candidate's reading of inputs: their preparation is its baseline
    null_ms = calibrate(run, base, timers["reference"], [(get_inputs(warm_seed), {})] * m,
                        partial(sets, [warm_seed] * m))  # fmt: skip
    try:
        base.check("null")
    except PrepError as exc:
        raise HarnessError(Outcome.EXECUTION_FAILURE, str(exc)) from exc
    ref_raw: list[float] = []
    mismatch: str | None = None
    if cached is None:
        warm_sets = warm()
        for _ in range(math.ceil(opts.warmup / n)):
            run.calls("reference", warm_sets, timers["reference"])
        del warm_sets
        for k in range(0, len(checked), n):  # the same seeds, ``n`` a reading
            chunk = checked[k : k + n]
            timed = reading("reference", [seed for seed, _ in chunk])
            assert timed.ms is not None
            if len(chunk) == n:  # a shorter last reading is checked, not counted
                ref_raw.append(timed.ms)
            for out, (_, snap) in zip(timed.out, chunk, strict=True):
                mismatch = mismatch or _mismatch(out, snap, atol, rtol)
        # every seed the candidate ran is replayed; then, while the reference's median is less precise
        # than the candidate's was asked to be, readings on fresh seeds (no candidate output to check)
        while (
            rel > 0
            and not precise(ref_raw, null_ms, rel)
            and len(ref_raw) < reading_count(opts.perf_trials, n)
            and time.perf_counter() - started <= budget
        ):
            timed = reading("reference", [fresh_seed() for _ in range(n)])
            assert timed.ms is not None
            ref_raw.append(timed.ms)
    else:
        for seed, snap in checked:
            if mismatch is None:
                mismatch = _mismatch(unwrap(run.call("reference", get_inputs(seed)).out), snap, atol, rtol)
    gate = None
    if isinstance(base, GpuTimer):
        gate = {**base.report(), "calls_per_reading": n, "candidate_calls_per_reading": m,
                "readings": len(new_raw), "reference_readings": len(ref_raw)}  # fmt: skip
    return {
        "ref": cached if cached is not None else TimingStats.of(net(ref_raw, null_ms, n)),
        "new": TimingStats.of(net(new_raw, null_ms, m)),
        "ref_cached": cached is not None,
        "method": base.method
        + (
            f"; each side's readings end at perf_trials calls or, after at least {PRECISE_MIN_READINGS} "
            f"readings, once their median's standard error is within {rel:.2%} of it"
            if rel > 0
            else ""
        ),
        "mismatch": mismatch,
        "gate": gate,
    }


def precise(raw: list[float], null_ms: float, rel: float) -> bool:
    """Whether the median of ``raw`` (readings, each holding the path's cost ``null_ms``) is known to
    within ``rel`` of the time it measures: its standard error, taken from the readings' median absolute
    deviation (robust to the odd slow reading), against the median less the path's cost; never before
    ``PRECISE_MIN_READINGS`` readings. A side cannot gain by it: every reading it ran is counted, and
    one that varies only gets more readings."""
    k = len(raw)
    if rel <= 0 or k < PRECISE_MIN_READINGS:
        return False
    med = statistics.median(raw)
    spread = 1.4826 * statistics.median(abs(x - med) for x in raw)  # a standard deviation, robustly
    return math.sqrt(math.pi / 2) * spread / math.sqrt(k) <= rel * max(med - null_ms, 1e-9)


def candidate_reading_size(n: int, call_ms: float, cap: int, perf_trials: int) -> int:
    """Calls a timed reading of the candidate: the reference's count ``n``, or more where the candidate's
    calls (``call_ms`` each, from its warm-up) are so much faster that ``n`` of them would be mostly the
    path's cost, whose level moves ~8 us between side processes (a 60 us kernel at the 2 calls of its
    1.4 ms reference read 5-7% off an independent timer on the H100). Up to ``READING_TARGET_MS`` of
    work, within ``cap`` (bytes, values a reply names) and ``2 * perf_trials / MIN_READINGS`` calls (the
    reference replays every seed the candidate ran: that many calls of it at most twice ``perf_trials``).
    Chosen by the candidate's own speed, it gains nothing by it: a slower warm-up only keeps ``n``."""
    want = cap if call_ms <= 0 else math.ceil(READING_TARGET_MS / call_ms)
    return max(n, min(want, cap, 2 * perf_trials // MIN_READINGS))


def reading_count(perf_trials: int, calls: int) -> int:
    """Timed readings of ``calls`` calls each: ``perf_trials`` calls in all, and at least
    ``MIN_READINGS`` readings (up to ``perf_trials``) so that a median of readings stays one."""
    return max(math.ceil(perf_trials / calls), min(MIN_READINGS, perf_trials))


def reading_size(
    run: Run,
    base: GpuTimer,
    timers: dict[str, Timer],
    sets: list[tuple[list[Any], dict[str, Any]]],
    extra: dict[str, Any] | None = None,
) -> tuple[int, int]:
    """Calls per timed reading of the reference, from a few gated calls of the trusted reference side (the
    candidate stopped meanwhile) less a first estimate of the path's cost, and the most calls a reading
    may hold (bytes, values a reply names). The candidate's count is this one or, where its calls are far
    faster, more: :func:`candidate_reading_size`. ``extra``: the reference side's request fields."""
    with run.frozen("candidate"):
        null_ms = calibrate(run, base, timers["reference"], sets)
        ms = []
        for _ in range(ESTIMATE_CALLS):
            call = run.calls("reference", sets, timers["reference"], extra)
            assert call.ms is not None
            ms.append(call.ms)
    outs = flatten_outputs(call.out)
    nbytes = transport.layout_bytes(sets) + 2 * sum(t.nbytes for t in outs if isinstance(t, torch.Tensor))
    leaves = transport.tensor_count(sets) + len(outs)
    cap = calls_per_reading(0.0, nbytes, leaves, transport.MAX_NODES)
    return calls_per_reading(min(ms) - null_ms, nbytes, leaves, transport.MAX_NODES), cap


def _time_interleaved(
    run: Run, job: Job, get_inputs: Callable[[int], list[Any]], atol: float, rtol: float, started: float
) -> dict[str, Any]:
    """CPU timing: each timed call of the candidate is followed by one of the reference on the same inputs,
    with the candidate and everything it started stopped meanwhile (SIGSTOP, by the zygote). A shared
    CPU's slow and fast spells (another tenant, a cold cache, a host that deschedules the VM) then fall
    on both sides alike instead of on whichever was timed during them; nothing of the submission runs
    while the reference is timed; and every timed output is checked against the reference's."""
    opts = job.options
    timer = CpuTimer()
    budget = opts.timeout_s * TIMING_BUDGET_SHARE

    def timed(role: str, inputs: list[Any]) -> Call:
        # The other side (and all it started) is stopped for either side's call: the judge's steps
        # before a call (the zygote's scan of /proc, the signals) are then the same for both, where
        # freezing only for the reference once read an honest kernel 1.11-1.17x on this 2-core box.
        with run.frozen("reference" if role == "candidate" else "candidate"):
            return run.call(role, inputs, timer)

    def reference(inputs: list[Any]) -> Call:
        return timed("reference", inputs)

    def candidate(inputs: list[Any]) -> Call:
        return timed("candidate", inputs)

    warm = get_inputs(fresh_seed())
    for _ in range(opts.warmup):
        candidate(warm)
        reference(warm)
    del warm
    new_raw: list[float] = []
    ref_raw: list[float] = []
    mismatch: str | None = None
    for i in range(opts.perf_trials):
        inputs = get_inputs(fresh_seed())
        if i % 2:  # alternate which side goes first: neither always follows the judge's own work
            ref = reference(inputs)
            new = candidate(inputs)
        else:
            new = candidate(inputs)
            ref = reference(inputs)
        if why := foreign(new.out):
            raise Incorrect(f"timed call {i + 1}: {why}")
        assert new.ms is not None and ref.ms is not None
        new_raw.append(new.ms)
        ref_raw.append(ref.ms)
        if mismatch := _mismatch(ref.out, new.out, atol, rtol):
            break
        if time.perf_counter() - started > budget and len(new_raw) >= MIN_TIMED_TRIALS:
            break
    run.end_candidate()
    return {
        "ref": TimingStats.of(ref_raw),
        "new": TimingStats.of(new_raw),
        # the median of the pairs' ratios: a spell that slows both calls of a pair cancels out
        "speedup": statistics.median(r / n for r, n in zip(ref_raw, new_raw, strict=True)),
        "ref_cached": False,
        "method": INTERLEAVED_METHOD,
        "mismatch": mismatch,
    }


def net(raw: list[float], null_ms: float, calls: int = 1) -> list[float]:
    """Per call: readings of ``calls`` calls each, less the path's own cost (never below a nanosecond:
    a ratio must stay defined)."""
    return [max(ms - null_ms, 1e-6) / calls for ms in raw]


def calibrate(
    run: Run,
    base: GpuTimer | CpuTimer,
    timer: Timer,
    sets: list[tuple[list[Any], dict[str, Any]]],
    draw: Callable[[], list[tuple[list[Any], dict[str, Any]]]] | None = None,
    role: str = "reference",
) -> float:
    """The path's own cost per reading, from null calls of the reference side with a reading's inputs
    (``sets``) written, as for a real reading (their preparation time is the baseline); ``draw``: drawn
    into the arena again for each null call, as readings made by :meth:`Run.drawn` are. With ``role``
    "candidate": the same through the candidate's process, for probes only (:meth:`GpuTimer.side_null`:
    a side may slow its own null calls, so a verdict never uses it)."""
    if isinstance(base, CpuTimer):
        return 0.0
    values = [(list(a), dict(k)) for a, k in sets]
    arena = run.arena(role, "in", transport.layout_bytes(values))
    msg = {"op": "call", "null": True, "gated": True}
    packed, write = transport.pack(values, arena)
    msg["calls"] = packed
    if draw is not None:
        write = partial(run.draw, draw, arena, msg)
    assert isinstance(timer, GatedSide)
    if role != "reference":
        return base.side_null(timer, partial(run.ask, role, msg), write)
    return base.calibrate_null(timer, partial(run.ask, role, msg), write)


def _mismatch(ref: Any, snap: Any, atol: float, rtol: float) -> str | None:
    cmp = compare_outputs(ref, snap, atol, rtol)
    return None if cmp.ok else cmp.message
