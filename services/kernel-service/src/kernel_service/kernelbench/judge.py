"""KernelBench's judge: evaluates one submission without ever running its code (the judge's state,
:class:`~kernel_service.judging.judging.Judge` and :class:`~kernel_service.judging.judging.Run`, is
``judging/judging.py``; how the two sides are timed and the speedup read, ``speedup.py``).

The judge (the eval worker's own process) loads the reference module only for ``get_inputs`` and
``get_init_inputs``, draws every seed, makes every input, decides which outputs are checked, compares,
times and gives the verdict. The submission runs in a *candidate* side process forked for this job, the
reference model in a *reference* side process built the same way (so both carry the same overheads);
neither can reach the judge's memory, and the candidate is killed before the reference is timed, so
nothing of the submission runs while the reference is measured.

Per call, the judge writes fresh inputs (a seed from ``os.urandom``) into that side's own arena, calls,
and reads the outputs through views it validates, copying (or, above ``TIMED_SAMPLE_ELEMENTS``, sampling at
positions drawn after the call) what it checks. Timing (``speedup.py``, on ``judging/timing.py``'s clocks):
on a GPU, judge-side CUDA events ordered around the side's work by inter-process events behind a short
GPU-side gate, so no host latency enters the reading; on the CPU, the judge's clock around the request.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..judging import profiling, transport
from ..judging.build_relocation import SOURCE_SUFFIXES
from ..judging.compare import compare_outputs, default_tolerance, fingerprint, flatten_outputs
from ..judging.harness import (
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
from ..judging.judging import Judge, Run
from ..judging.outputs import foreign, misplaced, snapshot, unwrap
from ..judging.readings import own_baseline
from ..judging.schemas import PRECISION_TOLERANCE, Outcome, excerpt, reward_for
from ..judging.timing import under_mps
from .speedup import Incorrect, output_differs, time_sides


def evaluate(
    judge: Judge,
    job: Job,
    workdir: Path,
    env: Environment,
    report: PhaseReporter,
    on_candidate: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run one evaluation; never raises for a bad submission. Returns a KernelEvalResponse dict.

    ``on_candidate`` is called when the submission's code is first sent to run. A failure while the sides
    were being set up, before that (a side's CUDA context refused, a side that died starting), is the
    host's, not the candidate's: the result names it (``environment_fault``) for the service to retry."""
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
        "module_mode": opts.module_mode,
    }
    started = time.perf_counter()
    phases: dict[str, float] = {}
    run = Run(judge, workdir, device, opts.timeout_s)
    run.precision = opts.precision
    run.on_candidate = on_candidate
    result: dict[str, Any] = {}
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
        try:
            run.close()
        except Exception:
            # Under MPS, killing a side whose kernel still ran (it overran the job's time) ends every
            # context of its GPU, the judge's too: the timeout stands, and the worker goes.
            if result.get("outcome") != Outcome.TIMEOUT.value or not under_mps():
                raise
            run.recycle = "the judge's CUDA context ended with the overrunning side's (MPS)"
    if result.get("outcome") != Outcome.CORRECT.value and run.phase == "load" and not run.candidate_started:
        result["environment_fault"] = str(result.get("message", ""))[:500]
        run.recycle = run.recycle or "the sides could not be set up: this worker may not get another chance"
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


class _WorkerBuilds:
    """Files written in the job's build dir while the eval worker judged it (a library, an object, the
    ninja file: a build that fails leaves no library, and took the GPU's time all the same), and the
    libraries, objects and ninja files of a build the candidate's sides made in their own dirs (one
    :mod:`~..judging.build_relocation` does not move: sources in several dirs): a build the compile pool
    did not make (one it did not reach: ``workers.lazy_builds``). Loading a built extension writes nothing
    of that (``load_inline`` writes its sources, under a name of this process's for a numbered one:
    ``build_relocation.stable_name``; they are not a build). Triton's and Inductor's caches (the sides'
    ``triton-cache``, ``inductor-cache``) are not looked at: torch.compile's first call is not counted.
    ``written_during`` gives the seconds of a phase in which one was written, 0 otherwise:
    ``phases["worker_build"]``, an upper bound on the eval worker's build time (a GPU judging nothing)."""

    PRODUCTS = frozenset({".so", ".o", ".ninja"})
    CACHES = frozenset({"triton-cache", "inductor-cache"})

    def __init__(self, build_dir: Path, sides_dir: Path) -> None:
        self.dir, self.sides_dir = build_dir, sides_dir
        self.seen: dict[Path, float] = {}
        self.seen = self._files()

    def _files(self) -> dict[Path, float]:
        try:
            files = {
                p: p.stat().st_mtime
                for p in self.dir.rglob("*")
                if p.is_file() and p.suffix not in SOURCE_SUFFIXES
            }
            for p in self.sides_dir.rglob("*"):
                if p.suffix in self.PRODUCTS and not self.CACHES.intersection(p.parts) and p.is_file():
                    files[p] = p.stat().st_mtime
            return files
        except OSError:  # a file removed while listed (torch's build lock, a side's dir cleared)
            return dict(self.seen)

    def written_during(self, seconds: float) -> float:
        now = self._files()
        written = any(self.seen.get(p) != m for p, m in now.items())
        self.seen = now
        return seconds if written else 0.0


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


def _keeps_state(
    run: Run,
    get_inputs: Callable[[int], list[Any]],
    seed: int,
    answer: Any,
    atol: float | None,
    rtol: float | None,
) -> bool:
    """Whether the reference answers ``seed``'s inputs again otherwise than ``answer`` (its answer in the
    last correctness trial): it keeps state from call to call (KernelBench's RNNs carry their hidden
    state), or draws randomness. A timed call's output cannot then be checked against the reference's
    answer to the same inputs in a process of its own, whose calls before differ."""
    assert atol is not None and rtol is not None
    again = unwrap(run.call("reference", get_inputs(seed)).out)
    differs = output_differs(answer, again, atol, rtol) is not None
    run.release()
    return differs


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
        builds = _WorkerBuilds(Path(build_dir), run.workdir / "candidate")
        # the compile pool's arch flags: the sides fork from a zygote started before the worker set them,
        # and other flags would rebuild every extension the compile pool built
        arch = (
            {"cuda_arch": os.environ["TORCH_CUDA_ARCH_LIST"]}
            if os.environ.get("TORCH_CUDA_ARCH_LIST")
            else {}
        )
        setup = {"op": "setup", "device": str(device), "tf32": opts.tf32, "build_dir": build_dir, **arch}
        models = {"reference": (job.reference, "Model", Outcome.UNKNOWN_ERROR),
                  "candidate": (job.solution, "ModelNew", Outcome.COMPILATION_FAILURE)}  # fmt: skip
        loads = {
            role: {
                "op": "load_model", "source": source, "name": "solution" if role == "candidate" else "reference",
                "cls": cls, "init": init_inputs, "seed": opts.seed, "load_outcome": load_outcome.value,
                "missing_outcome": load_outcome.value, "precision": opts.precision, "module_mode": opts.module_mode,
                "init_outcome": (Outcome.INITIALIZATION_FAILURE if role == "candidate" else Outcome.UNKNOWN_ERROR).value,
                **({"prebuilt": job.prebuilt} if role == "candidate" and job.prebuilt else {}),
                **({"failed_builds": job.failed_builds} if role == "candidate" and job.failed_builds else {}),
            } for role, (source, cls, load_outcome) in models.items()
        }  # fmt: skip
        run.spawn = {"build_dir": build_dir, "setup": setup, "load": loads}
        run.start_pair()
    phases["worker_build"] = builds.written_during(phases["load"])

    atol, rtol = opts.atol, opts.rtol
    passed = 0
    max_abs = max_rel = 0.0
    prints: set[Any] = set()  # the reference's outputs' fingerprints, one per trial's fresh inputs
    last: tuple[int, Any] | None = None  # the last trial's seed and the reference's answer to it
    common: dict[str, Any] = {**base}
    with phase("correctness"):
        for trial in range(opts.correctness_trials):
            where = f"correctness trial {trial + 1}/{opts.correctness_trials}"
            seed = fresh_seed()
            inputs = get_inputs(seed)
            try:
                new_call = run.call("candidate", inputs)
            except HarnessError:
                if trial == 0 and opts.precision != "fp32":  # a problem that cannot run cast is named so:
                    run.call("reference", inputs)  # raises ``unsupported_precision`` if the reference fails
                raise
            new_out = snapshot(new_call.out)
            if why := foreign(new_out) or misplaced(new_call, device):
                raise Incorrect(f"{where}: {why}")
            ref_call = run.call("reference", inputs)
            ref_out = unwrap(ref_call.out)
            if atol is None or rtol is None:  # upstream's by precision; 1e-2 for any fp16/bf16 output
                tol = max(PRECISION_TOLERANCE[opts.precision], default_tolerance(flatten_outputs(ref_out)))
                atol = tol if atol is None else atol
                rtol = tol if rtol is None else rtol
            del inputs  # each side has its copy; a problem's inputs may take gigabytes
            prints.add(fingerprint(ref_out))
            if trial == opts.correctness_trials - 1 and opts.measure_performance:
                last = (seed, snapshot(ref_call.out))
            cmp = compare_outputs(ref_out, new_out, atol, rtol)
            del ref_out, ref_call, new_out, new_call
            run.release()
            max_abs = max(max_abs, cmp.max_abs_error or 0.0)
            max_rel = max(max_rel, cmp.max_rel_error or 0.0)
            if not cmp.ok:
                return {**base, "outcome": Outcome.INCORRECT.value, "reward": reward_for(Outcome.INCORRECT, None),
                        "message": f"{where}: {cmp.message}", "correctness_trials_passed": passed,
                        "max_abs_error": cmp.max_abs_error, "max_rel_error": cmp.max_rel_error,
                        "atol": atol, "rtol": rtol}  # fmt: skip
            passed += 1
        stateful = last is not None and _keeps_state(run, get_inputs, *last, atol, rtol)
    phases["worker_build"] += builds.written_during(phases["correctness"])
    common.update({"correctness_trials_passed": passed, "max_abs_error": max_abs if passed else None,
                   "max_rel_error": max_rel if passed else None, "atol": atol, "rtol": rtol,
                   "reference_constant": passed > 1 and len(prints) == 1 and None not in prints,
                   "reference_stateful": stateful})  # fmt: skip
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
        mps = device.type == "cuda" and under_mps()
        own = mps and own_baseline(mps)
        differs = None if stateful else partial(output_differs, atol=atol, rtol=rtol)
        timing = time_sides(run, job, get_inputs, differs, started, own)
    # each fresh side imports the solution again: one that builds in every process builds here too
    phases["worker_build"] += builds.written_during(phases["timing"])
    if timing["mismatch"]:
        return {**common, "outcome": Outcome.INCORRECT.value, "reward": reward_for(Outcome.INCORRECT, None),
                "message": f"a timed call's output differs from the reference: {timing['mismatch']}"}  # fmt: skip
    speedup = timing.get("speedup") or (
        timing["ref"].median / timing["new"].median if timing["new"].median > 0 else None
    )
    degraded = timing.get("degraded")
    return {
        **common,
        "outcome": Outcome.CORRECT.value,
        # a speedup read with host time in it earns nothing either way (service README, "Busy hosts")
        "reward": reward_for(Outcome.CORRECT, None if degraded else speedup),
        "speedup": speedup,
        "timing_degraded": degraded is not None,
        "timing_degraded_reason": degraded,
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
