"""Worker subprocess: ``python -m kernel_service.worker --result-fd N --worker-id ID --tmp DIR``.

Reads one JSON job per line on stdin; writes JSON messages, one per line, on the dedicated result
fd (never on stdout: the solution may print anything, so fds 1 and 2 point at a capture file that the
parent only ever reads a bounded tail of). Messages: ``ready`` (once, after importing torch),
``phase`` (before each phase, so the parent can name what a crash interrupted) and ``result``.

The worker lowers its own limits before running anything: no core dumps, a file-size cap (with
SIGXFSZ ignored so an oversized write fails with EFBIG instead of killing the worker), optionally a
process-count cap. The parent puts it in its own session/process group and kills the whole group on
timeout.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import resource
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

#: Name of the capture file (solution stdout/stderr) inside the worker's temp dir.
#: Where a fatal signal's Python traceback goes (faulthandler), inside the worker's temp dir; the
#: parent reads its tail when a worker dies.
FAULT_LOG_NAME = "fault.txt"
OUTPUT_TAIL_CHARS = 4000


def set_limits(fsize_bytes: int, nproc: int | None, address_space: int | None) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
    if nproc is not None:
        # RLIMIT_NPROC counts every process of the *user*, and root is exempt: a guard, not a wall.
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    if address_space is not None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


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

    set_limits(args.fsize, args.nproc, args.address_space)
    channel = Channel(args.result_fd)
    os.set_inheritable(args.result_fd, False)  # children of the solution (compilers...) do not get it
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(tmp)
    fault_log = open(tmp / FAULT_LOG_NAME, "w")  # noqa: SIM115 - open for the life of the worker
    faulthandler.enable(file=fault_log)  # a segfault leaves a Python traceback the parent can show

    t0 = time.perf_counter()
    import torch  # the expensive import, paid once per worker

    from . import harness

    env = harness.probe_environment()
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if gpu and env.device != "cuda":
        # Never time a "GPU" evaluation on the CPU: a sandbox or driver problem must stop the service.
        sys.stderr.write(f"GPU {gpu} was assigned to this worker but CUDA is unavailable inside it\n")
        sys.exit(3)
    if env.device == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        major, minor = torch.cuda.get_device_capability(0)
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    channel.send(
        {
            "type": "ready",
            "worker_id": args.worker_id,
            "device": env.device,
            "hardware": env.hardware,
            "torch_version": env.torch_version,
            "cuda_version": env.cuda_version,
            "cuda_arch": os.environ.get("TORCH_CUDA_ARCH_LIST"),
            "startup_s": time.perf_counter() - t0,
        }
    )
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
                    lambda p, j=job_id: channel.send({"type": "phase", "job_id": j, "phase": p}),
                )
            result["output"] = capture.tail()
            channel.send({"type": "result", "job_id": job_id, "result": _fix_nonfinite(result)})
        except BaseException as exc:  # a harness failure must still answer, then the parent recycles us
            channel.send(
                {
                    "type": "result",
                    "job_id": job_id,
                    "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}",
                }
            )
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)


def _run_job(raw: dict[str, Any], jobdir: Path, env: Any, report: Any) -> dict[str, Any]:
    kind = raw.get("kind", "kernelbench")
    if kind == "backendbench":
        from .backendbench.evaluator import evaluate as bb_evaluate

        return dict(bb_evaluate(raw["request"]))
    from . import harness

    job = harness.Job.from_dict(raw)
    if job.mode == "compile":
        return harness.compile_only(job, jobdir, env, report)
    result = harness.evaluate(job, jobdir, env, report)
    result["recycle"] = env.device == "cuda" and result.get("outcome") in (
        "execution_failure",
        "initialization_failure",
        "unknown_error",
    )
    return result


if __name__ == "__main__":
    sys.exit(main())
