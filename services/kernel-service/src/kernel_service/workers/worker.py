"""Worker subprocess: ``python -m kernel_service.workers.worker --result-fd N --worker-id ID --tmp DIR``.

Reads one JSON job per line on stdin; writes JSON messages, one per line, on the dedicated result
fd (never on stdout: the solution may print anything, so fds 1 and 2 point at a capture file that the
parent only ever reads a bounded tail of). Messages: ``standby`` (a held worker, torch imported, before
CUDA: see ``HOLD_ENV``), ``ready`` (once, CUDA started), ``phase`` (before each phase, so the parent can
name what a crash interrupted), ``candidate`` (the submission's code is sent to run: a crash before it is
not the submission's) and ``result``.

The worker hardens itself before it imports torch (``sandbox.harden_worker``): no core dumps, a
file-size cap (with SIGXFSZ ignored so an oversized write fails with EFBIG instead of killing the
worker), optionally a process-count cap, and Landlock (writes only to its temp dir and the build cache,
reads only system and Python dirs, no TCP); a compile worker imports each submission in a forked child
that may write only its job's dirs (``forked``). It is a child subreaper, so a daemon a solution leaves
behind is found and killed after the job. It asks to be recycled (``result["recycle"]``) after a fault,
after leftover processes, or when a job left a patch on torch or the harness: a warm worker must judge
the next submission with clean code. The parent puts it in its own session/process group and kills the
whole group on timeout.
"""

from __future__ import annotations

import argparse
import concurrent.futures.thread
import faulthandler
import json
import os
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..judging import sandbox

if TYPE_CHECKING:
    from ..judging.harness import Environment, Job, PhaseReporter

#: Name of the capture file (solution stdout/stderr) inside the worker's temp dir.
#: Where a fatal signal's Python traceback goes (faulthandler), inside the worker's temp dir; the
#: parent reads its tail when a worker dies.
FAULT_LOG_NAME = "fault.txt"
OUTPUT_TAIL_CHARS = 4000
#: The parent writes a job id here (in the worker's temp dir) to stop that job at its next phase boundary.
CANCEL_FILE = "cancel"
#: Set (to "1") in a standby worker's environment: it stops before CUDA until the pool writes ``go``.
HOLD_ENV = "KS_HOLD_CUDA"
#: The cores a standby imports torch on (the compile pool's): not the eval workers' own, where the
#: judges beside it are timing; it and its zygote move to ``KS_CPUS`` on ``go``.
HOLD_CPUS_ENV = "KS_HOLD_CPUS"


class JobCancelled(BaseException):
    """Raised at a phase boundary of a job the parent cancelled (its client went away). A BaseException,
    so no ``except Exception`` of the harness takes it for the submission's failure; cleanups still run."""


class Channel:
    """Line-delimited JSON on the result fd; writes are whole lines so the parent never sees halves."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg, allow_nan=False, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


class Capture:
    """Points fds 1 and 2 at a pipe for the duration of a job; a thread keeps only the output's tail.

    A pipe rather than a file: a solution that prints gigabytes costs CPU, never disk, and cannot hit
    the file-size limit. Only the last ``limit`` bytes and the total count are kept.
    """

    def __init__(self, limit: int = OUTPUT_TAIL_CHARS) -> None:
        self.limit = limit
        self._tail = b""
        self._total = 0
        self.thread_ident: int | None = None

    def __enter__(self) -> Capture:
        sys.stdout.flush()
        sys.stderr.flush()
        self._tail, self._total = b"", 0
        rfd, wfd = os.pipe()
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(wfd, 1)
        os.dup2(wfd, 2)
        os.close(wfd)
        self._thread = threading.Thread(target=self._drain, args=(rfd,), daemon=True)
        self._thread.start()
        self.thread_ident = self._thread.ident
        return self

    def _drain(self, rfd: int) -> None:
        try:
            while True:
                chunk = os.read(rfd, 1 << 16)
                if not chunk:
                    return
                self._total += len(chunk)
                self._tail = (self._tail + chunk)[-self.limit :]
        finally:
            os.close(rfd)

    def __exit__(self, *exc: object) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self.saved[0], 1)  # closes our write ends: the drain thread sees EOF
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        # A child the solution left behind may still hold the pipe open: do not wait for it.
        self._thread.join(timeout=1.0)

    def tail(self) -> str | None:
        if self._total == 0:
            return None
        text = self._tail.decode("utf-8", "replace")
        cut = self._total - len(self._tail)
        return f"[... {cut} bytes of output cut ...]\n{text}" if cut > 0 else text


def read_tail(path: Path, limit: int = OUTPUT_TAIL_CHARS) -> str | None:
    """The last ``limit`` bytes of a file, decoded leniently; never reads the whole (maybe huge) file."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size == 0:
        return None
    with open(path, "rb") as f:
        if size > limit:
            f.seek(size - limit)
        data = f.read(limit).decode("utf-8", "replace")
    return data if size <= limit else f"[... {size - limit} bytes of output cut ...]\n{data}"


def _fix_nonfinite(obj: Any) -> Any:
    """JSON has no NaN/Inf: report them as null rather than fail to answer."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _fix_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fix_nonfinite(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--tmp", required=True)
    parser.add_argument("--fsize", type=int, default=1 << 30)
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("--address-space", type=int, default=None)
    args = parser.parse_args(argv)

    held = os.environ.get(HOLD_ENV) == "1"
    allowed = os.sched_getaffinity(0)
    # cores the service set aside for this pool (see service.split_cpus); a standby imports elsewhere
    _pin(os.environ.get(HOLD_CPUS_ENV if held and os.environ.get(HOLD_CPUS_ENV) else "KS_CPUS"), allowed)
    tmp = Path(args.tmp)
    policy = sandbox.policy_from_env(tmp)
    policy.fsize_bytes = args.fsize
    policy.nproc = args.nproc
    policy.address_space = args.address_space
    launcher: sandbox.Launcher = "none"
    if os.environ.get("KS_SANDBOX_LAUNCHER") in ("bwrap", "unshare"):
        launcher = "bwrap" if os.environ["KS_SANDBOX_LAUNCHER"] == "bwrap" else "unshare"
    # Before anything creates a CUDA inter-process event (see sandbox.private_shm): bwrap mounted it already.
    shm_note = sandbox.private_shm() if launcher == "unshare" else None
    if shm_note and os.environ.get("CUDA_VISIBLE_DEVICES"):
        # Judging beside another worker would then be wrong, not merely less isolated: refuse to start.
        sys.stderr.write(f"{shm_note}: this GPU worker's inter-process events would not be its own\n")
        sys.exit(3)
    # The zygote starts before this process restricts itself: the side processes it forks then carry
    # only their own Landlock domain (their CUDA driver must write under their own /proc/<pid>, which a
    # domain inherited from the judge would forbid). It runs no code it is sent.
    from ..judging.sides import Zygote

    tmp.mkdir(parents=True, exist_ok=True)
    zygote = Zygote(tmp / "zygote-log.txt") if args.worker_id.startswith("eval") else None
    isolation = sandbox.harden_worker(policy, launcher=launcher)
    isolation.fallbacks[:0] = [n for n in os.environ.get("KS_SANDBOX_NOTES", "").split("\n") if n]
    if shm_note:
        isolation.fallbacks.append(shm_note)
    sandbox.become_subreaper()
    channel = Channel(args.result_fd)
    os.set_inheritable(args.result_fd, False)  # children of the solution (compilers...) do not get it
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(tmp)
    fault_log = open(tmp / FAULT_LOG_NAME, "w")  # noqa: SIM115 - open for the life of the worker
    faulthandler.enable(file=fault_log)  # a segfault leaves a Python traceback the parent can show

    t0 = time.perf_counter()
    import torch  # the expensive import, paid once per worker

    from ..judging import harness, integrity
    from ..judging.judging import Judge

    preimport()
    held_s = 0.0
    if held:
        # A standby: torch imported, CUDA untouched, so a fatal fault of the GPU's current clients cannot
        # reach it; the pool says go once the GPU takes clients again (``gpu_ready``).
        channel.send({"type": "standby", "worker_id": args.worker_id})
        t_hold = time.perf_counter()
        if sys.stdin.buffer.readline().strip() != b"go":
            return 0
        held_s = time.perf_counter() - t_hold
        _pin(os.environ.get("KS_CPUS"), allowed, *([zygote.pid] if zygote is not None else []))
    env = harness.probe_environment()
    judge = Judge(env, policy, tmp, zygote)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if gpu and env.device != "cuda":
        # Never time a "GPU" evaluation on the CPU: a sandbox or driver problem must stop the service.
        sys.stderr.write(f"GPU {gpu} was assigned to this worker but CUDA is unavailable inside it\n")
        sys.exit(3)
    if env.device == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        major, minor = torch.cuda.get_device_capability(0)
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    iso = isolation.model_dump()
    channel.send(
        {
            "type": "ready",
            "worker_id": args.worker_id,
            "device": env.device,
            "hardware": env.hardware,
            "torch_version": env.torch_version,
            "cuda_version": env.cuda_version,
            "cuda_arch": os.environ.get("TORCH_CUDA_ARCH_LIST"),
            "startup_s": time.perf_counter() - t0 - held_s,
            "held_s": held_s,
            "isolation": iso,
        }
    )
    # What a job may not leave behind: patches on torch/the harness, threads (recycle when it does).
    base_guard = integrity.PatchGuard.for_harness()
    base_threads = integrity.thread_baseline()
    capture = Capture()
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        try:
            raw = json.loads(line)
            job_id = str(raw.get("job_id", "?"))
        except (json.JSONDecodeError, AttributeError) as exc:
            channel.send({"type": "result", "job_id": "?", "error": f"bad job line: {exc}"})
            continue
        jobdir = tmp / f"job-{job_id}"
        jobdir.mkdir(parents=True, exist_ok=True)
        try:
            with capture:
                result = _run_job(
                    raw,
                    jobdir,
                    env,
                    judge,
                    _reporter(channel, job_id, tmp / CANCEL_FILE),
                    lambda: channel.send({"type": "candidate", "job_id": job_id}),  # noqa: B023 - called now
                )
            result["output"] = result.pop("solution_output", None) or capture.tail()
            if raw.get("kind", "kernelbench") == "kernelbench":  # its answer reports the sandbox layers
                result["isolation"] = iso
            left = _leftovers(
                base_guard,
                base_threads | judge.own_threads(),
                capture,
                judge.keep_pids(),
                check_cuda=not result.get("recycle"),  # a stuck stream would hang the check: it goes anyway
            )
            if left:
                result["recycle"] = "; ".join(left[:3])[:500]
                sys.stderr.write(f"job {job_id}: recycling: {'; '.join(left[:3])}\n")
            channel.send({"type": "result", "job_id": job_id, "result": _fix_nonfinite(result)})
        except JobCancelled as stop:  # stopped between two phases: still warm, unless the job left something
            left = _leftovers(base_guard, base_threads | judge.own_threads(), capture, judge.keep_pids())
            cancelled = {"cancelled": str(stop), **({"recycle": "; ".join(left[:3])[:500]} if left else {})}
            channel.send({"type": "result", "job_id": job_id, "result": cancelled})
        except BaseException as exc:  # a harness failure must still answer, then the parent recycles us
            channel.send(
                {
                    "type": "result",
                    "job_id": job_id,
                    "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}",
                    **({"gpu_fault": True} if _shared_context_fault(exc) else {}),
                }
            )
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)


def _pin(cpus: str | None, allowed: set[int], *pids: int) -> None:
    """This process (and ``pids``: its zygote) onto ``cpus`` ("0,1,..."), those of them in ``allowed``
    (the cores it was started with: on another host, a Ray node, the ids may not exist; then keep all)."""
    mine = {int(c) for c in cpus.split(",")} & allowed if cpus else set()
    for pid in (0, *pids) if mine else ():
        try:
            os.sched_setaffinity(pid, mine)
        except ProcessLookupError:  # the zygote died: the judge starts another when it needs one
            pass


def _shared_context_fault(exc: BaseException) -> bool:
    """Whether the judge's own CUDA context failed under MPS: there a fatal fault of any client of the
    GPU (the sides of this worker's job: the service runs one eval worker a GPU) ends every client's
    context, so the judge's error is the side's fault, and the job's phase says whose (the parent charges
    it as a crash in that phase). Without MPS the judge's context is its own: its error is the harness's."""
    if "CUDA error" not in str(exc):
        return False
    from ..judging.timing import under_mps  # torch is loaded by now: CUDA raised the error

    return under_mps()


def _reporter(channel: Channel, job_id: str, cancel_file: Path) -> Any:
    """The phase callback: stop here if the parent cancelled this job, else tell it the phase starts."""

    def report(phase: str) -> None:
        try:
            cancelled = cancel_file.read_text() == job_id
        except OSError:
            cancelled = False
        if cancelled:
            raise JobCancelled(phase)
        channel.send({"type": "phase", "job_id": job_id, "phase": phase})

    return report


def _run_job(
    raw: dict[str, Any], jobdir: Path, env: Any, judge: Any, report: Any, on_candidate: Any
) -> dict[str, Any]:
    kind = raw.get("kind", "kernelbench")
    if kind == "backendbench":
        from ..backendbench.evaluator import evaluate as bb_evaluate

        return dict(bb_evaluate(raw["request"], judge))
    if kind == "backendbench_batch":  # many kernels of one run: one verdict each
        from ..backendbench.evaluator import evaluate_batch

        return evaluate_batch(raw["requests"], judge)
    from ..judging import harness

    job = harness.Job.from_dict(raw)
    if job.mode == "compile":
        return compile_only(job, jobdir, env, report)
    from ..kernelbench.judge import evaluate

    return evaluate(judge, job, jobdir, env, report, on_candidate)


def preimport() -> None:
    """Import what solutions commonly import, before the baseline guard: a first import that re-wraps a
    torch function (``torch._dynamo`` wraps ``torch.manual_seed``) is then part of the baseline."""
    import importlib

    for name in ("torch.utils.cpp_extension", "torch._dynamo", "triton"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional (no triton on a CPU box, say)
            pass
    try:
        import tqdm

        # Inductor shows tqdm bars; tqdm's monitor thread would then outlive the job and recycle the
        # worker after every torch.compile submission (0 = no monitor thread, tqdm's own switch).
        tqdm.tqdm.monitor_interval = 0
    except Exception:  # noqa: BLE001 - tqdm is optional
        pass


#: The loop of a ``concurrent.futures`` pool thread. A thread whose innermost Python frame is this loop
#: is parked between work items and runs nothing: torch.compile leaves one (inductor's pool) after
#: every compile, and recycling the worker for it would cost a fresh torch import per submission.
_IDLE_POOL_THREAD = concurrent.futures.thread._worker.__code__


def _leftovers(
    guard: Any, threads: frozenset[int], capture: Capture, keep: set[int], check_cuda: bool = True
) -> list[str]:
    """Why this worker must not serve another job: processes, threads or patches a job left behind."""
    found = []
    killed = sandbox.kill_leftover_processes(keep=keep)
    if killed:
        found.append(f"killed {killed} leftover process(es)")
    # The capture thread may outlive its job for a moment (a child held the pipe): not the solution's.
    frames = sys._current_frames()
    extra = {
        ident
        for ident in set(frames) - threads - {threading.get_ident(), capture.thread_ident}
        if frames[ident].f_code is not _IDLE_POOL_THREAD
    }
    if extra:
        names = {t.ident: t.name for t in threading.enumerate()}
        named = ", ".join(sorted(names.get(i, "?") for i in extra)[:5])
        found.append(f"{len(extra)} thread(s) left running ({named})")
    found += guard.violations(check_values=False)
    if check_cuda and not _cuda_healthy():
        found.append("the judge's CUDA context failed (under MPS a fatal fault of any client ends them all)")
    return found


def _cuda_healthy() -> bool:
    """Whether this process can still run CUDA work (always true without CUDA)."""
    import torch

    if not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        return bool(torch.ones(1, device="cuda").add_(1).item() == 2)
    except Exception:  # noqa: BLE001 - any CUDA error means the context is gone
        return False


def compile_only(job: Job, workdir: Path, env: Environment, report: PhaseReporter) -> dict[str, Any]:
    """Import the solution once so its ``load_inline`` builds land in the shared build cache, then build
    and call its model once on ``meta``, then on fake CUDA tensors, for the builds it starts lazily
    (``lazy_builds``); all of it in a forked child that may write only its job's dirs (``forked``).

    The builds it started are reported (``extensions``): what a Ray compile actor packs into an artifact
    that another node loads without building (``artifacts.pack``)."""
    from ..judging.harness import usable_build_dir
    from .forked import confine, run_forked

    report("compile")
    t0 = time.perf_counter()
    answer = workdir / "compile-answer.json"
    build_dir = Path(usable_build_dir(Path(job.build_dir), workdir))
    pch = [Path(p) for p in [os.environ.get("KS_BUILD_PCH", "")] if p]  # opt-in fast builds: shared

    def work() -> None:
        confine([workdir, build_dir, *pch])
        answer.write_text(json.dumps(_compile(job, workdir, t0), default=str))

    status = run_forked(work, job.options.timeout_s)
    try:
        return dict(json.loads(answer.read_text()))
    except (OSError, ValueError):
        why = "timed out" if status is None else f"ended ({status}) without an answer"
        return {"ok": False, "build_error": False, "message": f"the solution's import {why}",
                "compile_s": time.perf_counter() - t0}  # fmt: skip


def _compile(job: Job, workdir: Path, t0: float) -> dict[str, Any]:
    """:func:`compile_only`'s work, in its child."""
    from ..judging.harness import HarnessError, load_solution
    from ..judging.schemas import excerpt
    from .artifacts import failed_builds, recording_builds
    from .fast_builds import pch_session
    from .lazy_builds import warm_lazy_builds

    lazy_s = 0.0
    try:
        with pch_session() as hook, recording_builds(hook) as built:
            module = load_solution(job, workdir)
            if job.reference:  # the builds its ``__init__`` and first call start (``lazy_builds``)
                budget = job.options.timeout_s - (time.perf_counter() - t0)
                lazy_s = warm_lazy_builds(module, job.reference, workdir, built, budget, job.solution)
    except HarnessError as err:
        build_error = "Error building extension" in (err.compile_log or "") or "ninja" in (err.tb or "")
        return {
            "ok": False,
            "build_error": build_error,
            "message": err.message,
            "compile_log": excerpt(err.compile_log),
            "traceback": excerpt(err.tb),
            "compile_s": time.perf_counter() - t0,
        }
    return {
        "ok": True,
        "build_error": False,
        "message": "",
        "compile_s": time.perf_counter() - t0,
        "lazy_s": lazy_s,
        "extensions": built,
        "failed_builds": failed_builds(built),
    }


if __name__ == "__main__":
    sys.exit(main())
