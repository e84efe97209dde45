"""BackendBench's correctness pass, per input: the kernel's outputs, the inputs after its call and the
aliasing they keep, against the op's answers (kept with the inputs, or asked of the reference process),
input by input or in groups answered by one call of each side's own loop (``Run.tried``). The judge
compares; a side only answers with descriptions of tensors in its arena.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch

from ..judging.harness import HarnessError
from ..judging.outputs import foreign, snapshot, unwrap
from ..judging.schemas import Outcome
from ..judging.transport import extent, layout_bytes
from .case_cache import Answer, Kept, Rejection
from .compare import compare, tolerance
from .detect import packet_name
from .prepared import Prepared, Sides, tensors_in, trim
from .schemas import BackendBenchEvalRequest, InputResult
from .suites import Case, DispatchRecorder
from .tensors import clone_value, describe_call, dtype_of


def _kernel_traceback(exc: BaseException, kernel_file: str) -> str:
    """The error plus the frames inside the kernel's file: what the author can act on."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == kernel_file]
    where = "".join(f" (line {f.lineno}: {(f.line or '').strip()[:80]})" for f in frames[-2:])
    return trim(f"{type(exc).__name__}: {exc}{where}")


def _aliases(outputs: Any, inputs: list[torch.Tensor]) -> list[int | None]:
    """For each output tensor, the index of the input whose storage it shares (None: fresh memory)."""
    found: list[int | None] = []
    ptrs = [t.untyped_storage().data_ptr() if t.numel() else -1 for t in inputs]
    for out in tensors_in(outputs):
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
        result.error = trim(mismatch.message)
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
    ref_alias = _aliases(ref, list(tensors_in((ref_args, ref_kwargs))))
    ker_alias = _aliases(out, list(tensors_in((ker_args, ker_kwargs))))
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
    from ..judging.transport import DTYPES

    return DTYPES[name]


def _refs(packed: Any) -> list[Any]:
    from ..judging.transport import Ref

    if isinstance(packed, Ref):
        return [packed]
    if isinstance(packed, (list, tuple)):
        return [r for v in packed for r in _refs(v)]
    if isinstance(packed, dict):
        return [r for v in packed.values() for r in _refs(v)]
    return []


def _outputs(out: Any) -> list[Any]:
    from ..judging.transport import OutputTensor

    if isinstance(out, OutputTensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [o for v in out for o in _outputs(v)]
    return []


def _answer(sides: Sides, prep: Prepared, case: Case, pos: int) -> Answer | None:
    """The op's answer for one input (input ``pos`` of the request): the kept one, else the reference
    process's (then kept); None when the op rejects the input."""
    kept = prep.answers.get(pos) if prep.answers is not None else None
    if kept is not None:
        return kept if isinstance(kept, Answer) else None
    run = sides.run
    sides.reference()
    try:
        call = run.call(
            "reference", list(case.args), kwargs=case.kwargs, extra={"overload": str(case.overload)}
        )
    except HarnessError as err:
        if err.outcome == Outcome.UNKNOWN_ERROR and run.sides["reference"].alive:
            if err.reply.get("lasting") is True:
                prep.hold({pos: Rejection()})
            return None  # the op itself rejects this input (e.g. amax of an empty dim): not a test
        raise
    keep = prep.answers is not None
    after = call.inputs_kept() if keep else call.inputs_after()
    answer = Answer(
        snapshot(call.out) if keep else unwrap(call.out), (list(after[0]), after[1]),
        _side_aliases(call.out, call.packed),
    )  # fmt: skip
    if keep:
        prep.keep({pos: answer})
    return answer


def side_check(sides: Sides, prep: Prepared, case: Case, pos: int) -> tuple[InputResult | None, set[str]]:
    """One input (input ``pos`` of the request) through both sides: the op's answer (kept, or from the
    reference process), the kernel in the candidate's."""
    run, req = sides.run, prep.req
    answer = _answer(sides, prep, case, pos)
    if answer is None:
        return None, set()
    try:
        ker_call = run.call("candidate", list(case.args), kwargs=case.kwargs, extra={"record": True})
    except HarnessError as err:
        if err.outcome != Outcome.EXECUTION_FAILURE or not run.sides["candidate"].alive:
            raise
        result = _result(case, req)
        result.error = trim(str(err.reply.get("exc") or err.message))
        return result, {str(c) for c in (err.reply.get("called") or [])[:1000]}
    called = {str(c) for c in (ker_call.reply.get("called") or [])[:1000]}
    out = snapshot(ker_call.out)
    ker_inputs = ker_call.inputs_kept()
    if why := foreign(out):
        result = _result(case, req)
        result.error = why
        return result, called
    return (
        judge_case(
            case, req, answer.out, answer.inputs_after, answer.aliases,
            out, ker_inputs, _side_aliases(ker_call.out, ker_call.packed),
        ),
        called,
    )  # fmt: skip


#: Inputs of one op checked per side call (below both caps): a side answers one call with every output
#: (``Run.tried``), so an op costs two round trips, not two per input. Anything unusual (a kernel that
#: raised, refused outputs) is checked again one input at a time.
GROUP_CASES = 64
GROUP_BYTES = 64 << 20


def input_groups(cases: list[Case]) -> list[list[Case]]:
    """``cases`` in runs of at most GROUP_CASES inputs and GROUP_BYTES of tensors."""
    groups: list[list[Case]] = []
    size = 0
    for case in cases:
        n = layout_bytes((case.args, case.kwargs))
        if not groups or len(groups[-1]) >= GROUP_CASES or size + n > GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(case)
        size += n
    return groups


def _answers(sides: Sides, prep: Prepared, cases: list[Case], at: int) -> list[Answer | None] | None:
    """The op's answer for each of ``cases`` (inputs ``at``, ``at + 1``, ... of the request; None: the op
    rejects that input): kept ones where the group was answered before, else from the reference process
    in one call (then kept; held until the process is found sound where it rejected inputs, and not kept
    where a rejection may not last). None when its call failed or its answer has the wrong shape."""
    kept = [prep.answers.get(at + i) for i in range(len(cases))] if prep.answers is not None else []
    if kept and all(a is not None for a in kept):
        return [a if isinstance(a, Answer) else None for a in kept]
    run = sides.run
    sides.reference()
    sets = [(list(c.args), dict(c.kwargs)) for c in cases]
    try:
        ref_call = run.tried("reference", sets, {"overloads": [str(c.overload) for c in cases]})
    except HarnessError:
        if not sides.alive("reference"):
            raise
        return None
    ref_out = ref_call.out
    if not _pairs(ref_out, len(cases)):
        return None
    # a rejection lasts when the side says so (True: not out of memory, not a broken device)
    keep = prep.answers is not None and all(ok or out is True for ok, out in ref_out)
    after = ref_call.inputs_kept() if keep else ref_call.inputs_after()
    answers: list[Answer | None] = [
        Answer(snapshot(out) if keep else unwrap(out), (list(after[i][0]), after[i][1]),
               _side_aliases(out, ref_call.packed[i])) if ok else None
        for i, (ok, out) in enumerate(ref_out)
    ]  # fmt: skip
    if keep:
        found: dict[int, Kept] = {at + i: a if a is not None else Rejection() for i, a in enumerate(answers)}
        (prep.keep if all(ok for ok, _ in ref_out) else prep.hold)(found)
    return answers


def grouped_check(
    sides: Sides, prep: Prepared, cases: list[Case], at: int
) -> list[tuple[Case, InputResult | None, set[str]]] | None:
    """``cases`` (inputs ``at``, ``at + 1``, ... of the request) through both sides in one call each: per
    input, its result (None: the op rejects it, not a test) and the ops the kernel called. The kernel sees
    only the inputs the op accepts, as when each is checked alone. None when the group must be checked
    input by input: the kernel raised on some input (its own call gives the message), a side refused the
    group's outputs, or its answer had the wrong shape."""
    run, req = sides.run, prep.req
    answers = _answers(sides, prep, cases, at)
    if answers is None:
        return None
    accepted = [i for i, a in enumerate(answers) if a is not None]
    found: list[tuple[Case, InputResult | None, set[str]]] = [(c, None, set()) for c in cases]
    if not accepted:
        return found
    ker_calls = [(list(cases[i].args), dict(cases[i].kwargs)) for i in accepted]
    try:
        ker_call = run.tried("candidate", ker_calls, {"record": True})
    except HarnessError:
        if not sides.alive("candidate"):
            raise
        return None
    ker_out = ker_call.out
    if not _pairs(ker_out, len(accepted)) or not all(ok for ok, _ in ker_out):
        return None  # the kernel raised on some input: its own call reports the error
    called = {str(c) for c in (ker_call.reply.get("called") or [])[:1000]}
    ker_after = ker_call.inputs_kept()
    ker_packed = ker_call.packed
    for j, i in enumerate(accepted):
        case, answer = cases[i], answers[i]
        assert answer is not None
        out = snapshot(ker_out[j][1])
        if why := foreign(out):
            result = _result(case, req)
            result.error = why
            found[i] = (case, result, called)
            continue
        ker_inputs = (list(ker_after[j][0]), ker_after[j][1])
        result = judge_case(
            case, req, answer.out, answer.inputs_after, answer.aliases,
            out, ker_inputs, _side_aliases(ker_out[j][1], ker_packed[j]),
        )  # fmt: skip
        found[i] = (case, result, called)
    return found


def groupable(cases: list[Case]) -> bool:
    """Whether ``cases`` may share one call: more than one, and none of an op whose result depends on
    where its input lies in memory (``as_strided*`` take absolute storage offsets; grouped inputs do
    not start at offset 0 as a lone input does)."""
    return len(cases) > 1 and not any(
        c.overload.overloadpacket.__name__.startswith("as_strided") for c in cases
    )


def _pairs(out: Any, n: int) -> bool:
    """Whether a side's answer to :meth:`Run.tried` has the expected shape: ``n`` (flag, output) pairs."""
    return (
        isinstance(out, list)
        and len(out) == n
        and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], bool) for p in out)
    )
