"""Evaluate one BackendBench kernel: ``evaluate(request_dict) -> response_dict`` (JSON in, JSON out).

The judge (the eval worker's process, or a judge of the caller's own) never runs the submitted source:
it builds every sample input, then runs the real aten op in a reference side process and the kernel in a
candidate side process (``judging.Run``), each on its own stride-preserving copy of the inputs written
into its own arena, and checks outputs, mutated inputs (in-place and ``out=`` variants) and aliasing (a
view must stay a view of the same input, a new tensor must not alias one). The candidate reports which
aten ops the kernel dispatched (advisory: a submission can silence its own recorder); calling the op
itself scores it incorrect. If every input passes, each performance input is timed for the kernel, the
candidate is killed, and the op is timed by the same method; performance is the geometric mean of the
speedups, 1 when the kernel failed. With ``options.profile``, a correct kernel's answer then carries a
profile of one untimed call of the kernel and of the op on one performance input, taken in a fresh pair
of side processes that nothing is timed in (:func:`_profile`; advisory).

This module is the flow and the verdict; the per-input checks are ``checks.py``, the timing
``performance.py``, and the prepared inputs and side processes they share ``prepared.py``.
"""

from __future__ import annotations

import math
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..judging import profiling, transport
from ..judging.harness import HarnessError, seed_all
from ..judging.judging import Judge, Run
from ..judging.outputs import unwrap
from ..judging.readings import degraded
from ..judging.schemas import Outcome
from ..judging.transport import layout_bytes
from .case_cache import CaseCache, key_of
from .checks import groupable, grouped_check, input_groups, side_check
from .compare import tolerance
from .detect import forbidden_packets, tampering
from .performance import time_cases
from .prepared import Prepared, Sides, load_kernel, quiet, trim
from .schemas import BackendBenchEvalRequest, BackendBenchEvalResponse, BackendBenchProfile, InputResult
from .suites import Case, UnknownOpError, build_cases, default_dtypes
from .tensors import SpecError, describe_call, dtype_of
from .timing import timing_method


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
        from ..judging.harness import probe_environment
        from ..judging.sandbox import HardenPolicy

        tmp = Path(tempfile.mkdtemp(prefix="backendbench-judge-"))
        _default_judge.append(Judge(probe_environment(), HardenPolicy(writable=[tmp], landlock=False), tmp))
    return _default_judge[0]


def resolve_device(requested: str) -> str:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("options.device is 'cuda' but no CUDA device is visible")
        return "cuda"
    return "cpu"


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


def case_cache(judge: Judge) -> CaseCache:
    """The judge's prepared inputs, kept between its jobs (``case_cache``)."""
    cache = judge.memo.get("backendbench_cases")
    if not isinstance(cache, CaseCache):
        cache = judge.memo["backendbench_cases"] = CaseCache()
    return cache


def prepare_in_batch(
    req: BackendBenchEvalRequest, cache: CaseCache | None = None
) -> Prepared | BackendBenchEvalResponse:
    """:func:`prepare` for one op of a batch: an unexpected failure to make its inputs is that op's own
    verdict (``sandbox_error``, naming the error), not the end of the job (which would send every op of
    it to be judged again alone). A CUDA error is the judge's own context failing: that ends the job."""
    started = time.perf_counter()
    try:
        return prepare(req, cache)
    except Exception as exc:  # noqa: BLE001 - any failure of the judge's own input building
        if "CUDA" in str(exc) or "cuda" in type(exc).__module__:
            raise
        message = f"the judge could not prepare this op's inputs: {type(exc).__name__}: {trim(str(exc))}"
        return _done(BackendBenchEvalResponse.failure(req, "sandbox_error", message), started)


def _done(resp: BackendBenchEvalResponse, started: float) -> BackendBenchEvalResponse:
    resp.duration_s = time.perf_counter() - started
    return resp


def prepare(
    req: BackendBenchEvalRequest, cache: CaseCache | None = None
) -> Prepared | BackendBenchEvalResponse:
    """Device, inputs and forbidden ops for ``req``, or the verdict when there is nothing to judge (no
    inputs, a tampering source, no GPU). The seed is set here, so an op's inputs are the same whether it
    is judged alone or in a batch, and the same when they come from ``cache``."""
    started = time.perf_counter()
    opts = req.options
    try:
        device = resolve_device(opts.device)
    except RuntimeError as exc:
        return _done(BackendBenchEvalResponse.failure(req, "requires_gpu", str(exc)), started)
    dtypes = opts.dtypes or default_dtypes(device)
    seed_all(opts.seed)
    base: dict[str, Any] = {
        "op": req.op,
        "suite": req.suite,
        "device": device,
        "timing_method": timing_method(device),
        "torch_version": torch.__version__,
        "tolerances": {d: list(tolerance(dtype_of(d), opts.atol, opts.rtol)) for d in dtypes},
    }
    key = key_of(req, device, dtypes)
    kept = cache.get(key) if cache is not None else None
    with quiet():
        try:
            correctness, perf = (kept.correctness, kept.perf) if kept else build_cases(
                req.op, req.suite, device=device, dtypes=dtypes, seed=opts.seed,
                max_inputs=opts.max_inputs, trace_file=opts.trace_file, trace=opts.trace,
            )  # fmt: skip
        except (UnknownOpError, SpecError, OSError) as exc:
            resp = BackendBenchEvalResponse(**base, outcome="no_inputs", correctness=0.0, feedback=str(exc))
            return _done(resp, started)
        if not correctness:
            msg = f"no sample inputs for op {req.op!r} in suite {req.suite} with dtypes {dtypes} on {device}"
            resp = BackendBenchEvalResponse(**base, outcome="no_inputs", correctness=0.0, feedback=msg)
            return _done(resp, started)
        if opts.detect_original_op and (name := tampering(req.source)):
            msg = (
                f"The source uses `{name}`, a dispatch-mode internal that could hide calls to the op under "
                "test; kernels may not touch torch's dispatch machinery."
            )
            resp = BackendBenchEvalResponse(
                **base, outcome="calls_original_op", correctness=0.0, feedback=msg
            )
            return _done(resp, started)
        if kept:
            forbidden = set(kept.forbidden)
        else:
            forbidden = forbidden_packets(req.op, correctness + perf) if opts.detect_original_op else set()
            if cache is not None:
                cache.put(key, correctness, perf, forbidden)
    answers = cache.answers(key) if cache is not None else None
    return Prepared(
        req, device, base, correctness, perf, forbidden, started, time.perf_counter() - started,
        cache if answers is not None else None, key, answers,
    )  # fmt: skip


def _harness_verdict(prep: Prepared, err: HarnessError) -> BackendBenchEvalResponse:
    outcome = {Outcome.TIMEOUT: "timeout", Outcome.COMPILATION_FAILURE: "load_error"}.get(
        err.outcome, err.outcome.value
    )
    return BackendBenchEvalResponse(**prep.base, outcome=outcome, correctness=0.0, feedback=err.message)


class Ahead:
    """The next request of a batch prepared on a thread while the sides run this op's correctness pass
    (the judge mostly waits on them then); never while an op is timed, so the judge's own work stays out
    of the timings and their random draws out of the next op's seeded inputs."""

    def __init__(
        self,
        pool: ThreadPoolExecutor | None,
        request: BackendBenchEvalRequest | None,
        cache: CaseCache | None = None,
    ) -> None:
        self.pool, self.request, self.cache = pool, request, cache
        self.future: Future[Prepared | BackendBenchEvalResponse] | None = None

    def start(self) -> None:
        if self.future is None and self.pool is not None and self.request is not None:
            self.future = self.pool.submit(prepare_in_batch, self.request, self.cache)

    def wait(self) -> None:
        if self.future is not None:
            futures_wait([self.future])


def judge_prepared(
    sides: Sides, prep: Prepared, shared: bool = False, ahead: Ahead | None = None
) -> BackendBenchEvalResponse:
    """The verdict for one prepared request. ``shared``: the kernel may join the kernels already loaded
    in the candidate process (a batch); a verdict other than correct reached there is reached again in a
    candidate process of its own, so one kernel cannot fail another (a correct one cannot be forged: the
    judge reads every output itself). ``ahead``: the next op's preparation, run during correctness."""
    ahead = ahead or Ahead(None, None)
    judging = time.perf_counter()
    sides.run.phase = "startup"
    sides.deadline(prep.req.options.timeout_s)
    sides.shared = False
    sides.reference_replaced = None
    sides.startup_s = 0.0
    try:
        resp = _attempt(sides, prep, shared, ahead)
    except HarnessError as err:
        resp = _harness_verdict(prep, err)
    # a verdict reached next to other kernels, or with a reference process that was found broken (and
    # replaced), is reached again: with a candidate process of its own and a fresh reference process
    fresh_reference = sides.reference_replaced or sides.reference_died()
    if (sides.shared or fresh_reference) and resp.outcome != "correct":
        sides.run.phase = "startup"
        sides.reference_replaced = None
        sides.deadline(prep.req.options.timeout_s)
        try:
            resp = _attempt(sides, prep, False, ahead)
        except HarnessError as err:
            resp = _harness_verdict(prep, err)
    if prep.req.options.profile and resp.profile is None:
        resp.profile = _profile_base(
            prep.device, f"not profiled: the outcome is {resp.outcome} (only a correct kernel is profiled)"
        )
    resp.duration_s = prep.prep_s + time.perf_counter() - judging
    resp.startup_s = sides.startup_s
    return resp


def _attempt(sides: Sides, prep: Prepared, shared: bool, ahead: Ahead) -> BackendBenchEvalResponse:
    """One go at the verdict (``sides.shared`` says whether the candidate process held other kernels)."""
    run, req = sides.run, prep.req
    ran_shared = sides.candidate(shared, reference=not prep.answered)
    loaded = load_kernel(sides, req, prep.base)
    if loaded is not None:
        return loaded
    ahead.start()
    checked = _check(sides, prep)
    if checked.dead_context:  # the candidate's CUDA context is poisoned: no later kernel may use it
        run.kill("candidate")
    if checked.rejected:
        _check_reference(sides, prep, checked)
    resp = _verdict(prep, checked)
    if resp.correctness and req.options.measure_performance and checked.perf:
        ahead.wait()
        sides.reference()
        if ran_shared:  # timed in a process of its own, as when judged alone
            sides.start("candidate")
            if (again := load_kernel(sides, req, prep.base)) is not None:
                return again
        run.phase = "timing"
        n = len(checked.correctness)
        resp.timing_gate = time_cases(sides, prep, checked.perf, resp.inputs[n:])  # kills the candidate
        speedups = [r.speedup for r in resp.inputs[n:] if r.speedup]
        resp.performance = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else 1.0
        gate = resp.timing_gate or {}
        host_timed = max(gate.get("host_timed_readings", 0.0), gate.get("host_timed_reference_readings", 0.0))
        if degraded(host_timed, gate.get("readings", 0.0) * max(1, len(checked.perf))):
            resp.timing_degraded, resp.performance = True, 1.0  # a speed read with host time is unknown
        if not all(r.correct for r in resp.inputs):  # a timed output differed from the op's
            resp.correctness, resp.performance, resp.outcome = 0.0, 1.0, "incorrect"
            resp.n_correct = sum(r.correct for r in resp.inputs)
        resp.overall = resp.correctness * resp.performance
        resp.feedback = _feedback(resp, checked.cheat(req, prep.forbidden), req.options.feedback_chars)
    if req.options.profile and resp.outcome == "correct":
        resp.profile = _profile(sides, prep, checked)
    return resp


def _profile_base(device: str, note: str) -> BackendBenchProfile:
    cuda = device.startswith("cuda")
    return BackendBenchProfile(
        device=device, source=profiling.CUDA_SOURCE if cuda else profiling.CPU_SOURCE, note=note
    )


def _profiled_case(checked: Checked) -> Case:
    """The input a profile is taken on: the largest performance input (the first of equals), else the
    largest correctness input."""
    cases = checked.perf or checked.correctness
    return max(cases, key=lambda c: layout_bytes((c.args, c.kwargs)))


def _profile(sides: Sides, prep: Prepared, checked: Checked) -> BackendBenchProfile:
    """``options.profile``, after the verdict and the timing: one untimed call of the kernel and of the op
    on one input (:func:`_profiled_case`) under ``torch.profiler`` (``profiling.profile_call``, each side
    in its own process), on a GPU with ncu's metrics of the kernel's heaviest GPU kernel. Both sides are
    forked afresh for it and killed after, so no process that is profiled is timed (the next op of a batch
    starts its own). Advisory and never fatal: whatever fails is said in the profile, the verdict stands."""
    run, req = sides.run, prep.req
    cuda = run.device.type == "cuda"
    case = _profiled_case(checked)
    out = _profile_base(prep.device, profiling.NOTE)
    out.input = trim(f"{case.overload_name}{describe_call(case.args, case.kwargs)}", 300)
    values = (list(case.args), dict(case.kwargs))
    found: dict[str, Any] = {}
    run.phase = "profile"
    try:
        sides.start("candidate", "reference")
        failed = load_kernel(sides, req, prep.base)
        if failed is not None:  # it loaded for the verdict: a kernel that fails to load again says why
            found["candidate"] = {"error": f"not profiled: {trim(failed.feedback, 400)}"}
        for role in ("candidate", "reference"):
            if role in found:
                continue
            try:
                arena = run.arena(role, "in", layout_bytes(values))
                packed, write = transport.pack(values, arena)
                write()
                left = run.deadline - time.monotonic()
                msg: dict[str, Any] = {
                    "op": "profile", "args": packed[0], "kwargs": packed[1], "ncu": cuda and role == "candidate",
                    "ncu_timeout_s": max(min(profiling.NCU_TIMEOUT_S, left - 10.0), 1.0),
                }  # fmt: skip
                if role == "reference":
                    msg["overload"] = str(case.overload)
                reply = run.ask(role, msg)
                if not reply.get("ok"):
                    found[role] = {
                        "error": trim(str(reply.get("message") or "the profiled call failed"), 500)
                    }
                    continue
                found[role] = profiling.side_profile(reply.get("profile"))
                if role == "candidate" and isinstance(reply.get("profile"), dict):
                    found["ncu"] = profiling.ncu_report_of(reply["profile"].get("ncu"))
            except HarnessError as err:
                found[role] = {"error": trim(f"not profiled: {err.message}", 500)}
    except HarnessError as err:  # the fresh pair did not start
        for role in ("candidate", "reference"):
            found.setdefault(role, {"error": trim(f"not profiled: {err.message}", 500)})
    except Exception as exc:  # a judge-side failure (an arena, the transport): the verdict stands
        for role in ("candidate", "reference"):
            found.setdefault(role, {"error": f"not profiled: {type(exc).__name__}: {trim(str(exc), 300)}"})
    finally:
        run.kill("candidate")
        run.kill("reference")
    if not cuda:
        found["ncu"] = {"error": "no CUDA device: ncu measures GPU kernels only"}
    return BackendBenchProfile.model_validate({**out.model_dump(), **found})


def evaluate_request(req: BackendBenchEvalRequest, judge: Judge | None = None) -> BackendBenchEvalResponse:
    """The verdict for one kernel on one op of one suite (``judge``: as for :func:`evaluate`)."""
    judge = judge or default_judge()
    prep = prepare(req, case_cache(judge))
    if isinstance(prep, BackendBenchEvalResponse):
        return prep
    with quiet(), tempfile.TemporaryDirectory(prefix="backendbench-", dir=judge.tmp) as tmp:
        run = Run(judge, Path(tmp), torch.device(prep.device), req.options.timeout_s)
        try:
            return judge_prepared(Sides(run), prep)
        finally:
            run.close()


def evaluate_batch(requests: list[dict[str, Any]], judge: Judge | None = None) -> dict[str, Any]:
    """Many kernels (one run's) in one job: ``{"verdicts": [...]}`` in the order of ``requests``.

    The ops of one device share one :class:`Run`: one reference process, and one candidate process into
    which each kernel is loaded in turn (a fresh one after a crash or a timeout, and for every timing);
    each op gets its own inputs (made once, on the device), its own deadline and its own verdict, equal
    to the verdict it gets alone (see :func:`judge_prepared`). Raises ``pydantic.ValidationError`` if a
    request is malformed.
    """
    judge = judge or default_judge()
    cache = case_cache(judge)
    reqs = [BackendBenchEvalRequest.model_validate(r) for r in requests]
    verdicts: list[BackendBenchEvalResponse | None] = [None] * len(reqs)
    groups: dict[str, list[int]] = {}
    for i, req in enumerate(reqs):
        try:
            groups.setdefault(resolve_device(req.options.device), []).append(i)
        except RuntimeError as exc:
            verdicts[i] = BackendBenchEvalResponse.failure(req, "requires_gpu", str(exc))
    for device, indices in groups.items():
        with quiet(), tempfile.TemporaryDirectory(prefix="backendbench-batch-", dir=judge.tmp) as tmp:
            run = Run(judge, Path(tmp), torch.device(device), reqs[indices[0]].options.timeout_s)
            sides = Sides(run)
            pending: Future[Prepared | BackendBenchEvalResponse] | None = None
            try:
                with ThreadPoolExecutor(1, thread_name_prefix="backendbench-prepare") as pool:
                    for pos, i in enumerate(indices):
                        prep = pending.result() if pending is not None else prepare_in_batch(reqs[i], cache)
                        nxt = reqs[indices[pos + 1]] if pos + 1 < len(indices) else None
                        ahead = Ahead(pool, nxt, cache)
                        if isinstance(prep, BackendBenchEvalResponse):
                            verdicts[i], pending = prep, None
                            continue
                        verdicts[i] = judge_prepared(sides, prep, shared=True, ahead=ahead)
                        pending = ahead.future
            finally:
                run.close()
    assert all(v is not None for v in verdicts)
    return {"verdicts": [v.model_dump(mode="json") for v in verdicts if v is not None]}


@dataclass
class Checked:
    """What the correctness pass found: one result per input that is a test, the ops the kernel called."""

    results: list[InputResult]
    called: set[str]
    correctness: list[Case]
    perf: list[Case]
    dead_context: bool
    #: inputs the reference process did not answer (the op rejects them, or the process is broken)
    rejected: int = 0

    def cheat(self, req: BackendBenchEvalRequest, forbidden: set[str]) -> str | None:
        cheats = sorted(self.called & forbidden)
        if not cheats:
            return None
        return (
            f"Your kernel calls {', '.join(cheats)}: that is the op under test (or an equivalent). "
            f"Implement {req.op} yourself (Triton, C++/CUDA or other torch ops) instead of calling it."
        )


def _check(sides: Sides, prep: Prepared) -> Checked:
    """Every input through both sides, a group of inputs a call where the group passes (inputs the op
    itself rejects are not tests)."""
    run = sides.run
    correctness_cases, perf_cases = prep.correctness, prep.perf
    results: list[InputResult] = []
    called_all: set[str] = set()
    dead_context = False
    kept_correctness: list[Case] = []
    kept_perf: list[Case] = []
    rejected = 0
    run.phase = "correctness"
    at = 0
    for group in input_groups(correctness_cases + perf_cases):
        found = grouped_check(sides, prep, group, at) if groupable(group) else None
        at += len(group)
        if found is None:
            found = []
            for k, case in enumerate(group):
                result, called = side_check(sides, prep, case, at - len(group) + k)
                found.append((case, result, called))
                if result is not None and result.error and "CUDA error" in result.error:
                    break  # the context is poisoned
        for case, result, called in found:
            if result is None:
                rejected += 1
                continue
            (kept_correctness if case.kind == "correctness" else kept_perf).append(case)
            result.index = len(results)
            results.append(result)
            called_all |= called
            dead_context = bool(result.error and "CUDA error" in result.error)
            if dead_context:
                break
        if dead_context:
            break
    if dead_context:
        kept_correctness, kept_perf = correctness_cases, perf_cases  # the rest did not run: not all correct
    return Checked(results, called_all, kept_correctness, kept_perf, dead_context, rejected)


#: The reference process's health check: a call whose answer the judge knows (``aten.add.Tensor``).
PROBE_OVERLOAD = "aten.add.Tensor"


def _reference_fault(sides: Sides, device: str) -> str | None:
    """Why the reference process cannot be trusted to say that the op rejects an input (None: it answers
    a known-good call correctly). A process whose CUDA context died (a sticky error: every later call
    raises), or that cannot use its arena any more, would otherwise pass every later op's inputs off as
    inputs the op rejects, and every later op of a batch would be judged on none of them."""
    a = torch.arange(8, dtype=torch.float32, device=device)
    b = torch.full((8,), 0.5, dtype=torch.float32, device=device)
    try:
        call = sides.run.call("reference", [a, b], extra={"overload": PROBE_OVERLOAD})
        out = unwrap(call.out)
    except HarnessError as err:
        return err.message
    if not isinstance(out, torch.Tensor) or not torch.equal(out.to(a.device), a + b):
        return f"{PROBE_OVERLOAD} on 8 known values gave a wrong answer"
    return None


def _check_reference(sides: Sides, prep: Prepared, checked: Checked) -> None:
    """After inputs the reference did not answer: raise (and replace the reference process) unless it
    still answers a known-good call."""
    if not sides.alive("reference"):
        return
    why = _reference_fault(sides, prep.device)
    if why is None:
        prep.confirm()  # its rejections are the op's own: kept, no reference process needed for them again
        return
    sides.run.kill("reference")
    n = checked.rejected + len(checked.results)
    sides.reference_replaced = (
        f"the reference process rejected {checked.rejected} of {n} inputs of {prep.req.op} and then failed "
        f"a known-good call ({trim(why, 300)}); it was replaced"
    )
    raise HarnessError(Outcome.UNKNOWN_ERROR, sides.reference_replaced)


def _verdict(prep: Prepared, checked: Checked) -> BackendBenchEvalResponse:
    """The verdict from the correctness pass (performance 1 until the inputs are timed)."""
    req, results = prep.req, checked.results
    if not results and not checked.dead_context:
        n = len(prep.correctness) + len(prep.perf)
        msg = (
            f"op {req.op} (suite {req.suite}, device {prep.device}): the op itself rejected all {n} of its "
            "inputs in the reference process (which answers a known-good call correctly): nothing was "
            "judged. Not a verdict on the kernel."
        )
        return BackendBenchEvalResponse(**prep.base, outcome="no_inputs", correctness=0.0, feedback=msg)
    cheat = checked.cheat(req, prep.forbidden)
    n_corr = len(checked.correctness)
    all_ok = bool(results) and len(results) == n_corr + len(checked.perf) and all(r.correct for r in results)
    correctness = 1.0 if all_ok and cheat is None else 0.0
    outcome = "correct" if correctness else ("calls_original_op" if cheat else "incorrect")
    resp = BackendBenchEvalResponse(
        **prep.base,
        outcome=outcome,
        correctness=correctness,
        performance=1.0,
        overall=correctness,
        n_correctness_inputs=n_corr,
        n_perf_inputs=len(checked.perf),
        n_correct=sum(r.correct for r in results),
        inputs=results,
        aten_ops_called=sorted(checked.called),
    )
    resp.feedback = _feedback(resp, cheat, req.options.feedback_chars)
    return resp
