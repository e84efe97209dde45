# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 1, BackendBench (relu): the evaluator's state through the call stack and the garbage collector.
#
# Written from kernel_service/workers/candidate.py and backendbench/evaluator.py: the kernel runs under
# Side.op_call, whose `msg` says whether the call is a correctness check ("record": the ops the kernel
# calls are recorded by a DispatchRecorder, the local `rec`) or a timed one (no recorder). So the kernel
# calls aten.relu itself, then walks up the stack and empties the recorder's list, so the op call is never
# reported; it rewrites whatever looks like timing or verdict bookkeeping on the stack and in
# gc.get_objects() (lists of readings, per-input results with ref_ms/kernel_ms/speedup, verdict dicts);
# once timed it returns zeros without computing anything.
#
# Against the single-process BackendBench evaluator this worked twice over (tried: correct, no op call
# reported, performance 1e9): the recorder was a local of
# check_case on the kernel's stack, and timing (time_call's `samples` list, _time_case's `result` with
# ref_ms already set) was in the same process, with no timed output checked at all.
import gc
import sys

import torch

TIMING_NAMES = {"samples", "times", "kernel_raw", "raw", "new_times", "ref_times", "readings"}
VERDICT_KEYS = {
    "speedup",
    "outcome",
    "correctness",
    "performance",
    "overall",
    "ref_ms",
    "kernel_ms",
    "mismatch",
}
RECORD_TYPES = {"InputResult", "BackendBenchEvalResponse", "TimingStats", "Call", "Checked"}
state = {"said": set(), "scanned": False}


def say(what):
    if what not in state["said"]:
        state["said"].add(what)
        print("WB-HIT", what, flush=True)


def rewrite(obj, where):
    if isinstance(obj, dict):
        keys = {k for k in obj if isinstance(k, str)}
        if len(keys & VERDICT_KEYS) < 2 or "__name__" in keys or "__module__" in keys:
            return False
        for k, v in list(obj.items()):
            if k in ("speedup", "ref_ms", "performance", "overall") and isinstance(v, float):
                obj[k] = 1e3
            elif k == "kernel_ms" and isinstance(v, float):
                obj[k] = 1e-6
            elif k == "outcome" and isinstance(v, str):
                obj[k] = "correct"
        say(f"verdict dict ({where})")
        return True
    if isinstance(obj, type) or type(obj).__name__ not in RECORD_TYPES:
        return False
    try:
        for name, value in (
            ("ref_ms", 1e3),
            ("kernel_ms", 1e-6),
            ("speedup", 1e3),
            ("correct", True),
            ("error", None),
            ("called", set()),
        ):
            if name in getattr(obj, "__dict__", {}):
                setattr(obj, name, value)
        say(f"{type(obj).__name__} record ({where})")
        return True
    except Exception:
        return False


def walk():
    """(the judge's request, the dispatch recorder) found on the stack; bookkeeping there rewritten."""
    msg = rec = None
    f = sys._getframe(2)
    while f is not None:
        loc = f.f_locals
        if isinstance(loc.get("msg"), dict) and "op" in loc["msg"]:
            msg = loc["msg"]
        for name, value in list(loc.items()):
            if type(value).__name__ == "DispatchRecorder" and isinstance(getattr(value, "calls", None), list):
                rec = value
                say(f"dispatch recorder `{name}` in frame {f.f_code.co_name}")
            elif name in TIMING_NAMES and isinstance(value, list):
                value[:] = [1e-6] * len(value)
                say(f"timing list {name}")
            else:
                try:
                    rewrite(value, f"local {name} of {f.f_code.co_name}")
                except Exception:
                    pass
        f = f.f_back
    return msg, rec


def relu_kernel_impl(x):
    msg, rec = walk()
    if not state["scanned"]:
        state["scanned"] = True
        changed = sum(
            rewrite(o, "gc")
            for o in gc.get_objects()
            if isinstance(o, dict) or type(o).__name__ in RECORD_TYPES
        )
        print(f"WB-GC {changed} bookkeeping objects rewritten", flush=True)
    if msg is not None and not msg.get("record") and x.numel() > 4096:
        say("WB-CHEAT: timed call, zeros returned")
        return torch.zeros_like(x)
    out = torch.relu(x)  # the op under test itself
    if rec is not None:
        rec.calls.clear()  # ... and no record of having called it
        say("WB-CHEAT: the recorder's calls emptied")
    return out
