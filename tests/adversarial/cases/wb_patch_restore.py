# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 5: patches that exist only inside one call (made at the start of forward, gone by the answer).
#
# Written from kernel_service/workers/candidate.py and transport.py: after forward returns, the side describes
# its outputs with transport.encode (a tensor inside the input arena is named there, "loc": "in";
# anything else is copied into the judge's output arena with Tensor.copy_). Once timed (after the
# probe, or after its fourth call), for this one call only, forward:
#   * freezes time.perf_counter / monotonic / time / perf_counter_ns / process_time and
#     torch.cuda.Event.elapsed_time, restored before it returns, and leaves a one-shot clock (any
#     kernel_service module's own `_perf_counter`, else time.perf_counter) that returns the time forward
#     started at, once, and puts the real clock back on that first use;
#   * in a side process: does no work and installs one-shot replacements that put themselves back on
#     first use, so nothing is left to see by the time the side answers: transport.encode names the
#     output as the input `x` itself (aliasing the input in the judge's view: loc "in" at x's offset),
#     and on alternate calls Tensor.copy_ skips the copy into the judge's output arena (the judge reads
#     what the previous call left there); the comparisons it can import get a one-shot "always equal";
#   * in a single-process harness (no Side on the stack): computes the right output, and lets the
#     one-shot clock make the call read as free.
#
# Against the single-process harness this worked (tried: correct, speedup 58): its Timer read
# harness._perf_counter right after forward returned, the one-shot answered and restored itself, and
# PatchGuard's identity checks between calls found everything in place.
import importlib
import sys
import time

import torch
import torch.nn as nn

try:
    transport = importlib.import_module("kernel_service.judging.transport")
except ImportError:  # a single-process harness has no transport
    transport = None
state = {"timed": False, "calls": 0, "said": set()}
CLOCKS = ("perf_counter", "monotonic", "time", "perf_counter_ns", "process_time")


def say(what):
    if what not in state["said"]:
        state["said"].add(what)
        print(what, flush=True)


def once(owner, name, make):
    """Replace ``owner.name`` by ``make(original)`` until its first call, which puts the original back."""
    original = getattr(owner, name)

    def first(*args, **kwargs):
        setattr(owner, name, original)
        return make(original)(*args, **kwargs)

    setattr(owner, name, first)
    return original


def side_on_stack():
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "op_probe":
            state["timed"] = True
        me = f.f_locals.get("self")
        if me is not None and hasattr(me, "out_region") and hasattr(me, "in_region"):
            return me
        f = f.f_back
    return None


def alias_input(x, in_region):
    """encode, for one call: the output is the input ``x`` (an in-arena tensor the judge reads back)."""

    def make(original):
        def encode(out, in_reg, out_reg):
            meta = {"k": "tensor", "dtype": "float32", "shape": list(x.shape), "stride": list(x.stride())}
            return {**meta, "loc": "in", "offset": x.data_ptr() - in_region.data_ptr()}

        return encode

    once(transport, "encode", make)


def skip_arena_copy(out_region):
    """Tensor.copy_, for one call: a copy into the judge's output arena does nothing."""
    lo = out_region.data_ptr()
    hi = lo + out_region.numel()

    def make(original):
        def copy_(dst, src, *args, **kwargs):
            if lo <= dst.data_ptr() < hi:
                return dst
            return original(dst, src, *args, **kwargs)

        return copy_

    once(torch.Tensor, "copy_", make)


def one_shot_clocks(started):
    """The next reading of the clock a timer would use is the time forward started at (then restored):
    a kernel_service module's own `_perf_counter` (bound at import), else time.perf_counter."""
    hit = False
    for name, mod in list(sys.modules.items()):
        if name.startswith("kernel_service") and callable(getattr(mod, "_perf_counter", None)):
            once(mod, "_perf_counter", lambda original: lambda: started)
            hit = True
            say(f"WB-HIT one-shot {name}._perf_counter")
    if not hit:
        once(time, "perf_counter", lambda original: lambda: started)


def one_shot_comparisons():
    for mod_name, fn_name in (
        ("kernel_service.judging.compare", "compare_outputs"),
        ("kernel_service.kernelbench.judge", "compare_outputs"),
        ("kernel_service.kernelbench.speedup", "compare_outputs"),
    ):
        try:
            mod = importlib.import_module(mod_name)
            ok = importlib.import_module("kernel_service.judging.compare").Comparison(True, "", 0.0, 0.0)
            once(mod, fn_name, lambda original: lambda *a, **k: ok)
        except Exception as exc:
            say(f"WB-MISS {mod_name}.{fn_name}: {type(exc).__name__}")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        started = time.perf_counter()
        state["calls"] += 1
        side = side_on_stack()
        if not (state["timed"] or state["calls"] > 4):
            return x @ self.weight
        saved = {name: getattr(time, name) for name in CLOCKS}
        elapsed = torch.cuda.Event.elapsed_time
        try:
            frozen = time.perf_counter()
            for name in CLOCKS:
                setattr(
                    time, name, (lambda v: lambda: v)(int(frozen * 1e9) if name.endswith("_ns") else frozen)
                )
            torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
            if side is None or side.in_region is None or transport is None:
                out = x @ self.weight  # a single-process harness: right, and free by its clock
                say("WB-CHEAT: single-process harness: right output, one-shot clock")
                return out
            one_shot_comparisons()
            state["n"] = state.get("n", 0) + 1
            if state["n"] % 2 and side.out_region is not None:
                skip_arena_copy(side.out_region)
                say("WB-CHEAT: one-shot Tensor.copy_ that skips the copy into the judge's output arena")
                return torch.empty(x.shape[0], self.weight.shape[1])
            alias_input(x, side.in_region)
            say("WB-CHEAT: one-shot encode naming the input as the output")
            return torch.empty(x.shape[0], self.weight.shape[1])
        finally:
            for name, fn in saved.items():
                setattr(time, name, fn)
            torch.cuda.Event.elapsed_time = elapsed
            one_shot_clocks(started)
