"""A clean process that forks side processes: ``python -m kernel_service.workers.zygote --sock FD``.

The judge starts one zygote when it starts. The zygote imports torch (and what submissions commonly
import) once, never initialises CUDA (a forked CUDA context is unusable) and never runs code it is sent,
so every fork starts from the same clean state in milliseconds instead of a two-second torch import.

Protocol, on a ``SOCK_SEQPACKET`` pair shared only with the judge: a request is a JSON object (the side's
role, temp dir and sandbox settings); the reply is ``{"pid": N}`` carrying two file descriptors: the
judge's end of a socket pair to the new side, and the read end of the side's stdout/stderr pipe. The side
gets its own session (the judge kills it by process group). The zygote reaps its children and keeps
their exit status for the judge to ask about (``{"op": "status", "pid": N}``: a dead side's signal or
exit code, for the verdict's message). ``{"op": "freeze", "pid": N}`` stops a side and everything it
started (descendants, and orphans adopted here) until ``{"op": "thaw", "pid": N}``: the judge holds the
candidate while it times the reference between the candidate's calls.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: glibc's ``mallopt`` parameters (malloc.h): where a block is mmapped instead of taken from the heap, and
#: how much free heap top is kept before it is given back.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's cap on 64-bit hosts
TRIM_THRESHOLD = 1 << 30


def steady_malloc() -> None:
    """Every side allocates alike, whatever it freed before: glibc moves a process's mmap threshold up to
    the largest block it has freed, so two forks running the same code could differ, one taking each
    call's temporaries from the heap and the other mmapping, page-faulting and unmapping them every call
    (measured on the CPU path: ``relu(2 * x + 1)`` over 1M floats judged against itself read 1.02x, 2.29x,
    2.48x and 2.57x). Fixed thresholds, set here before the forks, keep blocks under 32 MB in the heap of
    every side. Elsewhere than glibc, nothing to do."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sock", type=int, required=True)
    parser.add_argument("--no-preimport", action="store_true")
    args = parser.parse_args(argv)
    from ..judging.sandbox import die_with_parent

    die_with_parent()  # a judge killed mid-import of torch here must not leave the zygote behind
    # Never initialise CUDA here (torch's CUDA availability check through NVML does not): a fork of a
    # process that did cannot use CUDA at all.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    sock = socket.socket(fileno=args.sock)
    os.set_inheritable(args.sock, False)
    statuses: dict[int, int] = {}
    sides: set[int] = set()  # the sides this zygote forked (kept until the judge kills them)
    frozen: dict[int, set[int]] = {}  # side -> the processes stopped for it

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
    from ..judging.sandbox import become_subreaper

    become_subreaper()  # what a side daemonises is reparented here, where "sweep" finds it

    steady_malloc()
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
            sides.discard(int(request["pid"]))
            frozen.pop(int(request["pid"]), None)
            sock.send(json.dumps({"killed": killed}).encode())
            continue
        if request.get("op") == "freeze":  # hold a side and all it started while the judge times another
            frozen[int(request["pid"])] = held = _freeze(
                int(request["pid"]), set(sides) - {int(request["pid"])}
            )
            sock.send(json.dumps({"frozen": len(held)}).encode())
            continue
        if request.get("op") == "thaw":
            for pid in frozen.pop(int(request["pid"]), set()):
                _signal(pid, signal.SIGCONT)
            sock.send(json.dumps({"ok": True}).encode())
            continue
        if request.get("op") == "sweep":  # every child left (a side's daemon reparented to us), at job end
            sock.send(json.dumps({"killed": _sweep(statuses)}).encode())
            sides.clear()
            frozen.clear()
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
                die_with_parent()  # its own session escapes a group kill: it dies with the zygote
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
        sides.add(pid)
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


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stopped(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True  # gone
    return state in ("T", "t", "Z", "X")


def _freeze(side: int, spare: set[int]) -> set[int]:
    """SIGSTOP ``side``, its descendants and every orphan adopted here (any child of the zygote that is
    not a side in ``spare``), until a scan finds no process of theirs still running: a process forked
    between a scan and the stop is found by the next scan, and a stopped process forks nothing.
    Returns once each is really stopped, so nothing of the side runs while another side is timed."""
    from ..judging.sandbox import parent_pids

    held: set[int] = set()
    me = os.getpid()
    for _ in range(50):
        parents = parent_pids()
        kids: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            kids.setdefault(ppid, []).append(pid)
        todo = [side] + [p for p in kids.get(me, []) if p not in spare and p != side]
        tree: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid not in tree and pid in parents:
                tree.add(pid)
                todo.extend(kids.get(pid, []))
        new = tree - held
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        held |= new
    end = time.monotonic() + 2.0
    for pid in held:
        while not _stopped(pid) and time.monotonic() < end:
            time.sleep(0.0002)
    return held


def _sweep(statuses: dict[int, int]) -> int:
    from ..judging.sandbox import child_pids

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
