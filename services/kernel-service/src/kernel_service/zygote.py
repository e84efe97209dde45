"""A clean process that forks side processes: ``python -m kernel_service.zygote --sock FD``.

The judge starts one zygote when it starts. The zygote imports torch (and what submissions commonly
import) once, never initialises CUDA (a forked CUDA context is unusable) and never runs code it is sent,
so every fork starts from the same clean state in milliseconds instead of a two-second torch import.

Protocol, on a ``SOCK_SEQPACKET`` pair shared only with the judge: a request is a JSON object (the side's
role, temp dir and sandbox settings); the reply is ``{"pid": N}`` carrying two file descriptors: the
judge's end of a socket pair to the new side, and the read end of the side's stdout/stderr pipe. The side
gets its own session (the judge kills it by process group). The zygote reaps its children and keeps
their exit status for the judge to ask about (``{"op": "status", "pid": N}``: a dead side's signal or
exit code, for the verdict's message).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sock", type=int, required=True)
    parser.add_argument("--no-preimport", action="store_true")
    args = parser.parse_args(argv)
    # Never initialise CUDA here (torch's CUDA availability check through NVML does not): a fork of a
    # process that did cannot use CUDA at all.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    sock = socket.socket(fileno=args.sock)
    os.set_inheritable(args.sock, False)
    statuses: dict[int, int] = {}

    def reap(*_: object) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            statuses[pid] = status
            while len(statuses) > 1000:
                statuses.pop(next(iter(statuses)))

    signal.signal(signal.SIGCHLD, reap)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    from .sandbox import become_subreaper

    become_subreaper()  # what a side daemonises is reparented here, where "sweep" finds it

    import torch  # noqa: F401 - the point of the zygote: imported once, before any fork

    from . import candidate
    from .worker import preimport

    if not args.no_preimport:
        preimport()
    sock.send(
        json.dumps({"ready": True, "pid": os.getpid(), "forks_can_use_cuda": _fork_is_clean()}).encode()
    )
    while True:
        try:
            data = sock.recv(1 << 16)
        except OSError:
            return 0
        if not data:
            return 0  # the judge is gone
        request: dict[str, Any] = json.loads(data)
        if request.get("op") == "status":
            sock.send(json.dumps({"status": _describe(statuses, int(request["pid"]))}).encode())
            continue
        if request.get("op") == "kill":  # the judge may not signal the sides itself (Landlock scopes it)
            killed = _kill_side(int(request["pid"]), statuses)
            sock.send(json.dumps({"killed": killed}).encode())
            continue
        if request.get("op") == "sweep":  # every child left (a side's daemon reparented to us), at job end
            sock.send(json.dumps({"killed": _sweep(statuses)}).encode())
            continue
        judge_end, side_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the side: never returns into this loop
            code = 1
            try:
                sock.close()
                judge_end.close()
                os.close(out_r)
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                os.close(out_w)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                candidate.serve(side_end, request)
                code = 0
            except BaseException:  # noqa: BLE001 - say why in the output the judge keeps, then exit
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        side_end.close()
        os.close(out_w)
        try:
            socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [judge_end.fileno(), out_r])
        finally:
            judge_end.close()
            os.close(out_r)


def _kill_side(pid: int, statuses: dict[int, int]) -> bool:
    """SIGKILL a side's process group and wait until the side is reaped (its CUDA context gone)."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + 10
    while pid not in statuses and time.monotonic() < end:
        try:
            got, status = os.waitpid(pid, 0)
            statuses[got] = status
        except ChildProcessError:
            break  # reaped by the handler meanwhile
        except InterruptedError:
            continue
    return True


def _sweep(statuses: dict[int, int]) -> int:
    from .sandbox import child_pids

    n = 0
    for _ in range(5):
        kids = child_pids()
        if not kids:
            break
        for pid in kids:
            _kill_side(pid, statuses)
            n += 1
    return n


def _fork_is_clean() -> bool:
    """Whether a child forked now may initialise CUDA (an import may have initialised it here)."""
    import torch

    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        except ChildProcessError:
            return True  # reaped by the SIGCHLD handler: cannot tell, assume clean
        except InterruptedError:
            continue


def _describe(statuses: dict[int, int], pid: int) -> str | None:
    for _ in range(100):
        if pid in statuses:
            status = statuses[pid]
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                try:
                    return f"killed by {signal.Signals(sig).name}"
                except ValueError:
                    return f"killed by signal {sig}"
            return f"exit status {os.WEXITSTATUS(status)}"
        time.sleep(0.01)
    return None


if __name__ == "__main__":
    sys.exit(main())
