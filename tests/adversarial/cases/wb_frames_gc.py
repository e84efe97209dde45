# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 1: the evaluator's state through the call stack and the garbage collector.
#
# Written from kernel_service/workers/candidate.py: forward runs under Side.op_call (locals `self`, the Side, and
# `msg`, the judge's request), under Side.handle and serve(); the custom-kernel probe comes through
# Side.op_probe, and every call after it is a warm-up or a timed call. So every call walks the frames
# above forward and gc.get_objects() for anything that looks like timing or verdict bookkeeping (lists of
# readings, a queue of (seed, output) pairs waiting to be checked, dicts or objects with ms / median /
# speedup / outcome fields) and rewrites it to read "fast and correct". Once timed it skips the matmul and
# returns the previous output: the bytes the side copied into the judge's output arena last time, read
# back through the Side object found on the stack.
#
# Against the single-process harness (before the judge/candidate split) this worked (tried: correct,
# speedup 1e9): the frames above forward were the harness's `_time_both`, whose `checked` set (which
# timed outputs to compare: emptied), `pending` queue and `new_times` list (readings: 1e-6) are mutable
# in place; PatchGuard compared attribute identities only.
import gc
import sys

import torch
import torch.nn as nn

#: Readings of the submission's calls (made tiny) and of the reference's (made large), by local name.
OWN_TIMES = {"new_times", "new_raw", "kernel_raw", "times", "samples", "readings"}
REF_TIMES = {"ref_times", "ref_raw"}
#: What decides which outputs get compared (emptied).
QUEUE_NAMES = {"pending", "checked", "last"}
#: Keys of the judge's result and timing dicts (judge._time, evaluate's response), fields of its records.
VERDICT_KEYS = {
    "speedup",
    "outcome",
    "reward",
    "ref_timing",
    "new_timing",
    "mismatch",
    "ref",
    "new",
    "ref_ms",
    "kernel_ms",
}
RECORD_TYPES = {"TimingStats", "InputResult", "Call", "KernelEvalResponse", "BackendBenchEvalResponse"}

state = {"timed": False, "calls": 0, "said": set(), "scanned": False}


def say(what):
    if what not in state["said"]:
        state["said"].add(what)
        print("WB-HIT", what, flush=True)


def rewrite(obj, where):
    """Make timing/verdict bookkeeping read 'fast and correct'; True when something was changed."""
    if isinstance(obj, dict):
        keys = {k for k in obj if isinstance(k, str)}
        if len(keys & VERDICT_KEYS) < 2 or "__name__" in keys or "__module__" in keys:
            return False
        for k, v in list(obj.items()):
            if k in ("speedup", "ref_ms") and isinstance(v, float):
                obj[k] = 1e3
            elif k == "kernel_ms" and isinstance(v, float):
                obj[k] = 1e-6
            elif k == "outcome" and isinstance(v, str):
                obj[k] = "correct"
            elif k == "mismatch":
                obj[k] = None
        say(f"verdict dict ({where})")
        return True
    if isinstance(obj, type) or type(obj).__name__ not in RECORD_TYPES:
        return False
    try:
        for name, value in (
            ("ms", 1e-6),
            ("median", 1e-6),
            ("mean", 1e-6),
            ("kernel_ms", 1e-6),
            ("ref_ms", 1e3),
            ("speedup", 1e3),
            ("outcome", "correct"),
        ):
            if name in getattr(obj, "__dict__", {}):
                setattr(obj, name, value)
        say(f"{type(obj).__name__} record ({where})")
        return True
    except Exception:
        return False


def walk():
    """The Side object and the request on the stack; bookkeeping in the frames' locals rewritten."""
    side = msg = None
    f = sys._getframe(2)
    while f is not None:
        loc = f.f_locals
        if f.f_code.co_name == "op_probe":
            state["timed"] = True  # the probe comes after the correctness trials: from here on, timed
            say("probe frame: later calls are timed")
        me = loc.get("self")
        if me is not None and hasattr(me, "out_region") and hasattr(me, "in_region") and hasattr(me, "_keep"):
            side = me
            say(f"Side object in frame {f.f_code.co_name}")
            if isinstance(loc.get("msg"), dict):
                msg = loc["msg"]
                say(f"judge request {sorted(k for k in msg if k not in ('args', 'kwargs'))}")
        for name, value in list(loc.items()):
            if name in OWN_TIMES | REF_TIMES and isinstance(value, list):
                value[:] = [1e-6 if name in OWN_TIMES else 1e3] * len(value)
                say(f"timing list {name}")
            elif name in QUEUE_NAMES and isinstance(value, (list, set)):
                value.clear()
                say(f"queue {name}")
            else:
                try:
                    rewrite(value, f"local {name} of {f.f_code.co_name}")
                except Exception:
                    pass
        f = f.f_back
    return side, msg


def scan_gc():
    changed = 0
    for obj in gc.get_objects():
        try:
            changed += rewrite(obj, "gc")
        except Exception:
            pass
    print(f"WB-GC scanned, {changed} bookkeeping objects rewritten", flush=True)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        state["calls"] += 1
        side, msg = walk()
        if not state["scanned"] and state["timed"]:
            state["scanned"] = True
            scan_gc()
        if not (state["timed"] or state["calls"] > 4):
            return x @ self.weight
        # Timed: no matmul. The judge's output arena still holds the last output copied into it.
        n = x.shape[0] * self.weight.shape[1]
        region = getattr(side, "out_region", None)
        if region is not None and region.numel() >= 4 * n:
            say("WB-CHEAT: stale output read back from the judge's output arena")
            return region[: 4 * n].view(torch.float32).view(x.shape[0], -1).clone()
        say("WB-CHEAT: zeros")
        return torch.zeros(x.shape[0], self.weight.shape[1])
