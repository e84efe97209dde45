"""Evaluate one BackendBench kernel: ``evaluate(request_dict) -> response_dict`` (JSON in, JSON out).

The kernel service's worker calls this inside its sandboxed subprocess; it is also a plain function, so
tests call it in-process. Per op: load the source, find ``<op>_kernel_impl``, run it on every sample
input of the suite next to the real aten op (each on its own stride-preserving copy of the inputs), and
check outputs, mutated inputs (in-place and ``out=`` variants) and aliasing (a view must stay a view, a
new tensor must not alias an input). The kernel runs under a dispatch recorder; calling the op itself
scores it incorrect. If every input passes, performance inputs are timed for both the op and the kernel
by the same method; performance is the geometric mean of the speedups, 1 when the kernel failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from .compare import compare, tolerance
from .detect import forbidden_packets, packet_name, tampering
from .schemas import BackendBenchEvalRequest, BackendBenchEvalResponse, InputResult
from .suites import Case, DispatchRecorder, UnknownOpError, build_cases, default_dtypes
from .tensors import SpecError, clone_value, describe_call, dtype_of
from .timing import time_call, timing_method

MAX_ERROR_CHARS = 600


class KernelLoadError(Exception):
    """The source did not import, or lacks the expected function."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def evaluate(request: dict[str, Any]) -> dict[str, Any]:
    """Validate ``request`` (raises pydantic.ValidationError if malformed) and return the verdict as JSON."""
    req = BackendBenchEvalRequest.model_validate(request)
    return evaluate_request(req).model_dump(mode="json")


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


def load_kernel(source: str, function_name: str, workdir: Path) -> tuple[Callable[..., Any], str]:
    """Import ``source`` from a real file (Triton's ``@jit`` needs one) and return the kernel function."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = workdir / f"kernel_{digest}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"backendbench_kernel_{digest}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # hostile or broken source: report, never crash the worker
        raise KernelLoadError(
            "load_error", f"the source failed to import: {_kernel_traceback(exc, str(path))}"
        ) from exc
    fn = getattr(module, function_name, None)
    if not callable(fn):
        defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("__"))
        raise KernelLoadError(
            "missing_function",
            f"the source defines no function `{function_name}` (it defines: {', '.join(defined[:12]) or 'nothing'})",
        )
    return fn, str(path)


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


def check_case(
    fn: Callable[..., Any], case: Case, req: BackendBenchEvalRequest, device: str, kernel_file: str
) -> tuple[InputResult | None, set[str]]:
    """Run op and kernel on copies of one input; the result (None: the op rejects the input) and the
    aten packets the kernel called."""
    opts = req.options
    dt = dtype_of(case.dtype) if case.dtype else torch.float32
    atol, rtol = tolerance(dt, opts.atol, opts.rtol)
    result = InputResult(
        index=0,
        kind=case.kind,  # type: ignore[arg-type]
        overload=case.overload_name,
        args=describe_call(case.args, case.kwargs),
        dtype=case.dtype,
        atol=atol,
        rtol=rtol,
    )
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
        result.error = _kernel_traceback(exc, kernel_file)
        return result, {packet_name(f) for f, _, _ in rec.calls}
    called = {packet_name(f) for f, _, _ in rec.calls}
    mismatch, errors = compare(ref, out, atol=opts.atol, rtol=opts.rtol)
    if mismatch is None:  # in-place and out= variants: the inputs must end up as the op leaves them
        mismatch, _ = compare(
            (ref_args, ref_kwargs),
            (ker_args, ker_kwargs),
            "inputs after the call",
            atol=opts.atol,
            rtol=opts.rtol,
        )
        if mismatch is not None:
            mismatch.message = (
                "an input differs after the call (in-place / out= semantics): " + mismatch.message
            )
    if mismatch is None:
        ref_alias = _aliases(ref, list(_tensors((ref_args, ref_kwargs))))
        ker_alias = _aliases(out, list(_tensors((ker_args, ker_kwargs))))
        if ref_alias != ker_alias:
            mismatch_msg = (
                f"aliasing differs: the op's outputs share memory with inputs {ref_alias}, the kernel's with "
                f"{ker_alias} (None = a new tensor); return a view/the written input exactly when the op does"
            )
            result.error = mismatch_msg
            return result, called
    result.max_abs_error, result.max_rel_error = errors.max_abs, errors.max_rel
    if mismatch is not None:
        result.error = _trim(mismatch.message)
        if mismatch.max_abs_error is not None:
            result.max_abs_error = mismatch.max_abs_error
            result.max_rel_error = mismatch.max_rel_error
        return result, called
    result.correct = True
    return result, called


def _time_case(
    fn: Callable[..., Any], case: Case, req: BackendBenchEvalRequest, device: str, result: InputResult
) -> None:
    opts = req.options
    args, kwargs = clone_value(case.args), clone_value(case.kwargs)
    result.ref_ms = time_call(
        lambda: case.overload(*args, **kwargs), device, warmup=opts.warmup, trials=opts.perf_trials
    )
    kargs, kkwargs = clone_value(case.args), clone_value(case.kwargs)
    result.kernel_ms = time_call(
        lambda: fn(*kargs, **kkwargs), device, warmup=opts.warmup, trials=opts.perf_trials
    )
    result.speedup = result.ref_ms / max(result.kernel_ms, 1e-9)


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


def evaluate_request(req: BackendBenchEvalRequest) -> BackendBenchEvalResponse:
    """The verdict for one kernel on one op of one suite."""
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
        with tempfile.TemporaryDirectory(prefix="backendbench-") as tmp:
            try:
                fn, kernel_file = load_kernel(req.source, req.function_name, Path(tmp))
            except KernelLoadError as exc:
                return done(
                    BackendBenchEvalResponse(**base, outcome=exc.outcome, correctness=0.0, feedback=str(exc))
                )
            forbidden = (
                forbidden_packets(req.op, correctness_cases + perf_cases)
                if opts.detect_original_op
                else set()
            )
            return done(_run(fn, kernel_file, req, device, correctness_cases, perf_cases, forbidden, base))


def _run(
    fn: Callable[..., Any],
    kernel_file: str,
    req: BackendBenchEvalRequest,
    device: str,
    correctness_cases: list[Case],
    perf_cases: list[Case],
    forbidden: set[str],
    base: dict[str, Any],
) -> BackendBenchEvalResponse:
    results: list[InputResult] = []
    called_all: set[str] = set()
    dead_context = False
    kept_correctness: list[Case] = []
    kept_perf: list[Case] = []
    for case in correctness_cases + perf_cases:
        if dead_context:
            break
        result, called = check_case(fn, case, req, device, kernel_file)
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
        for result, case in zip(results[n_corr:], perf_cases, strict=True):
            _time_case(fn, case, req, device, result)
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
