"""Evaluate one BackendBench kernel: ``evaluate(request_dict) -> response_dict`` (JSON in, JSON out).

The judge (the eval worker's process, or a judge of the caller's own) never runs the submitted source:
it builds every sample input, then runs the real aten op in a reference side process and the kernel in a
candidate side process (``judge.Run``), each on its own stride-preserving copy of the inputs written
into its own arena, and checks outputs, mutated inputs (in-place and ``out=`` variants) and aliasing (a
view must stay a view of the same input, a new tensor must not alias one). The candidate reports which
aten ops the kernel dispatched (advisory: a submission can silence its own recorder); calling the op
itself scores it incorrect. If every input passes, each performance input is timed for the kernel, the
candidate is killed, and the op is timed by the same method; performance is the geometric mean of the
speedups, 1 when the kernel failed.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..harness import HarnessError, usable_build_dir
from ..judge import Judge, Run, calibrate, foreign, net, snapshot, unwrap
from ..schemas import Outcome
from ..timing import CpuTimer, GpuTimer, PrepError
from ..transport import extent
from .compare import compare, tolerance
from .detect import forbidden_packets, packet_name, tampering
from .schemas import BackendBenchEvalRequest, BackendBenchEvalResponse, InputResult
from .suites import Case, DispatchRecorder, UnknownOpError, build_cases, default_dtypes
from .tensors import SpecError, clone_value, describe_call, dtype_of
from .timing import timing_method

MAX_ERROR_CHARS = 600


def evaluate(request: dict[str, Any], judge: Judge | None = None) -> dict[str, Any]:
    """Validate ``request`` (raises pydantic.ValidationError if malformed) and return the verdict as JSON.

    ``judge``: the eval worker's (its zygote forks the side processes); None: a judge of this process's
    own, started on first use (tests and tools that evaluate in-process).
    """
    req = BackendBenchEvalRequest.model_validate(request)
    return evaluate_request(req, judge).model_dump(mode="json")


_default_judge: list[Judge] = []


def default_judge() -> Judge:
    if not _default_judge:
        from ..harness import probe_environment
        from ..sandbox import HardenPolicy

        tmp = Path(tempfile.mkdtemp(prefix="backendbench-judge-"))
        _default_judge.append(Judge(probe_environment(), HardenPolicy(writable=[tmp], landlock=False), tmp))
    return _default_judge[0]


def resolve_device(requested: str) -> str:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("options.device is 'cuda' but no CUDA device is visible")
        return "cuda"
    return "cpu"


def _trim(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 20] + " ...[trimmed]"


def _kernel_traceback(exc: BaseException, kernel_file: str) -> str:
    """The error plus the frames inside the kernel's file: what the author can act on."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == kernel_file]
    where = "".join(f" (line {f.lineno}: {(f.line or '').strip()[:80]})" for f in frames[-2:])
    return _trim(f"{type(exc).__name__}: {exc}{where}")


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _aliases(outputs: Any, inputs: list[torch.Tensor]) -> list[int | None]:
    """For each output tensor, the index of the input whose storage it shares (None: fresh memory)."""
    found: list[int | None] = []
    ptrs = [t.untyped_storage().data_ptr() if t.numel() else -1 for t in inputs]
    for out in _tensors(outputs):
        ptr = out.untyped_storage().data_ptr() if out.numel() else -2
        found.append(next((i for i, p in enumerate(ptrs) if p == ptr), None))
    return found


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def judge_case(
    case: Case,
    req: BackendBenchEvalRequest,
    ref: Any,
    ref_inputs: Any,
    ref_alias: list[int | None],
    out: Any,
    ker_inputs: Any,
    ker_alias: list[int | None],
) -> InputResult:
    """The verdict on one input: outputs, inputs after the call (in-place and ``out=`` variants) and
    aliasing (a view must stay a view of the same input, a new tensor must not alias one)."""
    opts = req.options
    result = _result(case, req)
    mismatch, errors = compare(ref, out, atol=opts.atol, rtol=opts.rtol)
    if mismatch is None:
        mismatch, _ = compare(ref_inputs, ker_inputs, "inputs after the call", atol=opts.atol, rtol=opts.rtol)
        if mismatch is not None:
            mismatch.message = (
                "an input differs after the call (in-place / out= semantics): " + mismatch.message
            )
    if mismatch is None and ref_alias != ker_alias:
        result.error = (
            f"aliasing differs: the op's outputs share memory with inputs {ref_alias}, the kernel's with "
            f"{ker_alias} (None = a new tensor); return a view/the written input exactly when the op does"
        )
        return result
    result.max_abs_error, result.max_rel_error = errors.max_abs, errors.max_rel
    if mismatch is not None:
        result.error = _trim(mismatch.message)
        if mismatch.max_abs_error is not None:
            result.max_abs_error = mismatch.max_abs_error
            result.max_rel_error = mismatch.max_rel_error
        return result
    result.correct = True
    return result


def _result(case: Case, req: BackendBenchEvalRequest) -> InputResult:
    dt = dtype_of(case.dtype) if case.dtype else torch.float32
    atol, rtol = tolerance(dt, req.options.atol, req.options.rtol)
    return InputResult(
        index=0,
        kind=case.kind,  # type: ignore[arg-type]
        overload=case.overload_name,
        args=describe_call(case.args, case.kwargs),
        dtype=case.dtype,
        atol=atol,
        rtol=rtol,
    )


def check_case(
    fn: Callable[..., Any], case: Case, req: BackendBenchEvalRequest, device: str, kernel_file: str
) -> tuple[InputResult | None, set[str]]:
    """In-process check of a TRUSTED callable (PyTorch's own decompositions, when the opinfo index is
    built); submissions are checked by :func:`evaluate_request` in a candidate process instead."""
    ref_args, ref_kwargs = clone_value(case.args), clone_value(case.kwargs)
    try:
        ref = case.overload(*ref_args, **ref_kwargs)
    except Exception:  # the op itself rejects this input (e.g. amax of an empty dim): not a test
        return None, set()
    ker_args, ker_kwargs = clone_value(case.args), clone_value(case.kwargs)
    rec = DispatchRecorder()
    try:
        with rec:
            out = fn(*ker_args, **ker_kwargs)
        _sync(device)
    except Exception as exc:
        result = _result(case, req)
        result.error = _kernel_traceback(exc, kernel_file)
        return result, {packet_name(f) for f, _, _ in rec.calls}
    called = {packet_name(f) for f, _, _ in rec.calls}
    ref_alias = _aliases(ref, list(_tensors((ref_args, ref_kwargs))))
    ker_alias = _aliases(out, list(_tensors((ker_args, ker_kwargs))))
    return judge_case(
        case, req, ref, (ref_args, ref_kwargs), ref_alias, out, (ker_args, ker_kwargs), ker_alias
    ), called


def _side_aliases(out: Any, packed: Any) -> list[int | None]:
    """For each output tensor of a side, the index of the input whose arena bytes it lies in."""
    spans = [
        (r.offset, r.offset + max(1, extent(r.shape, r.stride)) * dtype_of_name(r.dtype).itemsize)
        for r in _refs(packed)
    ]
    found: list[int | None] = []
    for o in _outputs(out):
        if o.loc != "in" or o.tensor.numel() == 0:
            found.append(None)
            continue
        found.append(next((i for i, (lo, hi) in enumerate(spans) if lo <= o.offset < hi), None))
    return found


def dtype_of_name(name: str) -> torch.dtype:
    from ..transport import DTYPES

    return DTYPES[name]


def _refs(packed: Any) -> list[Any]:
    from ..transport import Ref

    if isinstance(packed, Ref):
        return [packed]
    if isinstance(packed, (list, tuple)):
        return [r for v in packed for r in _refs(v)]
    if isinstance(packed, dict):
        return [r for v in packed.values() for r in _refs(v)]
    return []


def _outputs(out: Any) -> list[Any]:
    from ..transport import OutputTensor

    if isinstance(out, OutputTensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [o for v in out for o in _outputs(v)]
    return []


def _side_check(run: Run, case: Case, req: BackendBenchEvalRequest) -> tuple[InputResult | None, set[str]]:
    """One input through both sides: the op in the reference process, the kernel in the candidate's."""
    try:
        ref_call = run.call(
            "reference", list(case.args), kwargs=case.kwargs, extra={"overload": str(case.overload)}
        )
    except HarnessError as err:
        if err.outcome == Outcome.UNKNOWN_ERROR and run.sides["reference"].alive:
            return None, set()  # the op itself rejects this input (e.g. amax of an empty dim): not a test
        raise
    try:
        ker_call = run.call("candidate", list(case.args), kwargs=case.kwargs, extra={"record": True})
    except HarnessError as err:
        if err.outcome != Outcome.EXECUTION_FAILURE or not run.sides["candidate"].alive:
            raise
        result = _result(case, req)
        result.error = _trim(str(err.reply.get("exc") or err.message))
        return result, {str(c) for c in (err.reply.get("called") or [])[:1000]}
    called = {str(c) for c in (ker_call.reply.get("called") or [])[:1000]}
    out = snapshot(ker_call.out)
    ker_inputs = clone_value(ker_call.inputs_after())
    if why := foreign(out):
        result = _result(case, req)
        result.error = why
        return result, called
    ref = unwrap(ref_call.out)
    return (
        judge_case(
            case, req, ref, ref_call.inputs_after(), _side_aliases(ref_call.out, ref_call.packed),
            out, ker_inputs, _side_aliases(ker_call.out, ker_call.packed),
        ),
        called,
    )  # fmt: skip


def _feedback(resp: BackendBenchEvalResponse, cheat: str | None, limit: int) -> str:
    head = (
        f"op {resp.op} (suite {resp.suite}, device {resp.device}): "
        f"{resp.n_correct}/{resp.n_correctness_inputs + resp.n_perf_inputs} inputs correct; "
        f"correctness {resp.correctness:g}, performance {resp.performance:.3g}, overall {resp.overall:.3g}."
    )
    lines = [head]
    if cheat:
        lines.append(cheat)
    failing = [r for r in resp.inputs if not r.correct and r.error]
    if failing:
        lines.append("Failing inputs:")
    for r in failing:
        lines.append(f"- #{r.index} {r.overload}{r.args}: {r.error}")
    timed = [r for r in resp.inputs if r.speedup is not None]
    if timed:
        lines.append("Timed inputs (op ms / kernel ms = speedup):")
        lines += [
            f"- #{r.index} {r.args}: {r.ref_ms:.4g} / {r.kernel_ms:.4g} = {r.speedup:.3g}x" for r in timed
        ]
    text, out = "", []
    for i, line in enumerate(lines):
        if len(text) + len(line) + 60 > limit:
            out.append(f"... ({len(lines) - i} more lines trimmed)")
            break
        out.append(line)
        text += line + "\n"
    return "\n".join(out)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def evaluate_request(req: BackendBenchEvalRequest, judge: Judge | None = None) -> BackendBenchEvalResponse:
    """The verdict for one kernel on one op of one suite (``judge``: as for :func:`evaluate`)."""
    judge = judge or default_judge()
    started = time.perf_counter()
    opts = req.options
    try:
        device = resolve_device(opts.device)
    except RuntimeError as exc:
        return BackendBenchEvalResponse.failure(req, "requires_gpu", str(exc))
    dtypes = opts.dtypes or default_dtypes(device)
    torch.manual_seed(opts.seed)
    base: dict[str, Any] = {
        "op": req.op,
        "suite": req.suite,
        "device": device,
        "timing_method": timing_method(device),
        "torch_version": torch.__version__,
        "tolerances": {d: list(tolerance(dtype_of(d), opts.atol, opts.rtol)) for d in dtypes},
    }

    def done(resp: BackendBenchEvalResponse) -> BackendBenchEvalResponse:
        resp.duration_s = time.perf_counter() - started
        return resp

    with _quiet():
        try:
            correctness_cases, perf_cases = build_cases(
                req.op, req.suite, device=device, dtypes=dtypes, seed=opts.seed,
                max_inputs=opts.max_inputs, trace_file=opts.trace_file,
            )  # fmt: skip
        except (UnknownOpError, SpecError, OSError) as exc:
            return done(
                BackendBenchEvalResponse(**base, outcome="no_inputs", correctness=0.0, feedback=str(exc))
            )
        if not correctness_cases:
            msg = f"no sample inputs for op {req.op!r} in suite {req.suite} with dtypes {dtypes} on {device}"
            return done(BackendBenchEvalResponse(**base, outcome="no_inputs", correctness=0.0, feedback=msg))
        if opts.detect_original_op and (name := tampering(req.source)):
            msg = (
                f"The source uses `{name}`, a dispatch-mode internal that could hide calls to the op under "
                "test; kernels may not touch torch's dispatch machinery."
            )
            return done(
                BackendBenchEvalResponse(**base, outcome="calls_original_op", correctness=0.0, feedback=msg)
            )
        with tempfile.TemporaryDirectory(prefix="backendbench-", dir=judge.tmp) as tmp:
            forbidden = (
                forbidden_packets(req.op, correctness_cases + perf_cases)
                if opts.detect_original_op
                else set()
            )
            run = Run(judge, Path(tmp), torch.device(device), opts.timeout_s)
            try:
                return done(_run(run, req, correctness_cases, perf_cases, forbidden, base))
            except HarnessError as err:
                outcome = {Outcome.TIMEOUT: "timeout", Outcome.COMPILATION_FAILURE: "load_error"}.get(
                    err.outcome, err.outcome.value
                )
                return done(
                    BackendBenchEvalResponse(**base, outcome=outcome, correctness=0.0, feedback=err.message)
                )
            finally:
                run.close()


def _run(
    run: Run,
    req: BackendBenchEvalRequest,
    correctness_cases: list[Case],
    perf_cases: list[Case],
    forbidden: set[str],
    base: dict[str, Any],
) -> BackendBenchEvalResponse:
    build_dir = usable_build_dir(run.workdir / "build", run.workdir)
    setup = {"op": "setup", "device": str(run.device), "build_dir": build_dir}
    for role in ("reference", "candidate"):
        run.fork(role, build_dir)
        run.ask(role, setup)
    loaded = run.ask("candidate", {"op": "load_fn", "source": req.source, "function": req.function_name})
    if not loaded.get("ok"):
        outcome = (
            str(loaded.get("outcome"))
            if loaded.get("outcome") in ("load_error", "missing_function")
            else "load_error"
        )
        message = str(loaded.get("message", ""))[:MAX_ERROR_CHARS]
        if outcome == "load_error":
            message = f"the source failed to import: {_trim(str(loaded.get('traceback') or message)[-MAX_ERROR_CHARS:])}"
        return BackendBenchEvalResponse(**base, outcome=outcome, correctness=0.0, feedback=message)
    results: list[InputResult] = []
    called_all: set[str] = set()
    dead_context = False
    kept_correctness: list[Case] = []
    kept_perf: list[Case] = []
    run.phase = "correctness"
    for case in correctness_cases + perf_cases:
        if dead_context:
            break
        result, called = _side_check(run, case, req)
        if result is None:
            continue
        (kept_correctness if case.kind == "correctness" else kept_perf).append(case)
        result.index = len(results)
        results.append(result)
        called_all |= called
        dead_context = bool(result.error and "CUDA error" in result.error)  # the context is poisoned
    cheats = sorted(called_all & forbidden)
    cheat = None
    if cheats:
        cheat = (
            f"Your kernel calls {', '.join(cheats)}: that is the op under test (or an equivalent). "
            f"Implement {req.op} yourself (Triton, C++/CUDA or other torch ops) instead of calling it."
        )
    if dead_context:
        kept_correctness, kept_perf = correctness_cases, perf_cases  # the rest did not run: not all correct
    correctness_cases, perf_cases = kept_correctness, kept_perf
    n_corr = len(correctness_cases)
    all_ok = bool(results) and len(results) == n_corr + len(perf_cases) and all(r.correct for r in results)
    correctness = 1.0 if all_ok and not cheats else 0.0
    performance = 1.0
    if correctness and req.options.measure_performance and perf_cases:
        run.phase = "timing"
        _time_cases(run, req, perf_cases, results[n_corr:])
        speedups = [r.speedup for r in results[n_corr:] if r.speedup]
        performance = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else 1.0
    outcome = "correct" if correctness else ("calls_original_op" if cheats else "incorrect")
    resp = BackendBenchEvalResponse(
        **base,
        outcome=outcome,
        correctness=correctness,
        performance=performance,
        overall=correctness * performance,
        n_correctness_inputs=n_corr,
        n_perf_inputs=len(perf_cases),
        n_correct=sum(r.correct for r in results),
        inputs=results,
        aten_ops_called=sorted(called_all),
    )
    resp.feedback = _feedback(resp, cheat, req.options.feedback_chars)
    return resp


def _time_cases(
    run: Run, req: BackendBenchEvalRequest, cases: list[Case], results: list[InputResult]
) -> None:
    """Every performance input timed for the kernel, whose process is then killed, then for the op: no
    code of the submission runs while the op is timed. The last timed output of each input is checked."""
    opts = req.options
    base: GpuTimer | CpuTimer = run.judge.gpu_timer(run.device) if run.device.type == "cuda" else CpuTimer()
    timers = {role: base.bind(role, partial(run.ask, role)) for role in ("candidate", "reference")}
    last: list[Any] = []
    kernel_raw: list[list[float]] = []
    for case in cases:
        times = []
        for i in range(opts.warmup + opts.perf_trials):
            timed = run.call("candidate", list(case.args), timers["candidate"], kwargs=case.kwargs)
            if i >= opts.warmup:
                assert timed.ms is not None
                times.append(timed.ms)
        kernel_raw.append(times)
        last.append(timed.out)
    reply = run.ask("candidate", {"op": "sync"})
    if not reply.get("ok"):
        raise run.side_error("candidate", reply)
    run.kill("candidate")
    null_ms = calibrate(run, base, timers["reference"], list(cases[0].args))
    for case, result, snap, raw in zip(cases, results, last, kernel_raw, strict=True):
        times = []
        for i in range(opts.warmup + opts.perf_trials):
            timed = run.call(
                "reference", list(case.args), timers["reference"], kwargs=case.kwargs,
                extra={"overload": str(case.overload)},
            )  # fmt: skip
            if i >= opts.warmup:
                assert timed.ms is not None
                times.append(timed.ms)
        kernel_ms = result.kernel_ms = statistics.median(net(raw, null_ms))
        ref_ms = result.ref_ms = statistics.median(net(times, null_ms))
        mismatch, _ = compare(timed.out, snap, atol=opts.atol, rtol=opts.rtol)
        if mismatch is not None:
            result.correct = False
            result.error = _trim("a timed call's output differs from the op's: " + mismatch.message)
            continue
        result.speedup = ref_ms / max(kernel_ms, 1e-9)
    try:
        base.check("reference")
    except PrepError as exc:
        raise HarnessError(Outcome.EXECUTION_FAILURE, str(exc)) from exc
