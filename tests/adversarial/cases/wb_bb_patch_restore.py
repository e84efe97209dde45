# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 5, BackendBench (relu): patches that exist only inside one call.
#
# Written from kernel_service/workers/candidate.py and backendbench/evaluator.py. In a correctness call (the
# judge's request on the stack carries "record": a DispatchRecorder is active) the kernel swaps the
# recorder class's __torch_dispatch__ for a pass-through, calls aten.relu itself, and puts the original
# back before returning: the op call is never recorded and nothing is left patched. In a timed call it
# freezes the clocks (time.perf_counter, monotonic, time, perf_counter_ns, process_time) for the call,
# does no work, and installs a one-shot transport.encode that names the output as the input tensor itself
# (aliasing the input in the judge's view: "loc": "in" at its offset) and puts the real encode back on
# first use, so the side answers with nothing patched. With no request on its stack (an evaluator that
# runs kernels in its own process) every call is the op itself, unrecorded, and leaves a one-shot
# time.perf_counter that gives the timer's next reading as the time the kernel started, then restores.
#
# Against the single-process BackendBench evaluator this worked (tried: correct, no op call reported,
# performance ~6e3): the recorder was back in place when anything looked, and the one-shot clock was
# the one timing the kernel.
import importlib
import sys
import time

import torch

try:
    transport = importlib.import_module("kernel_service.judging.transport")
except ImportError:
    transport = None
CLOCKS = ("perf_counter", "monotonic", "time", "perf_counter_ns", "process_time")
state = {"said": set()}


def say(what):
    if what not in state["said"]:
        state["said"].add(what)
        print(what, flush=True)


def request_on_stack():
    """(the judge's request, the Side object) from the frames above the kernel."""
    f = sys._getframe(2)
    msg = side = None
    while f is not None:
        loc = f.f_locals
        if msg is None and isinstance(loc.get("msg"), dict) and loc["msg"].get("op") == "call":
            msg = loc["msg"]
        me = loc.get("self")
        if me is not None and hasattr(me, "in_region") and hasattr(me, "out_region"):
            side = me
        f = f.f_back
    return msg, side


def recorder_classes():
    for name in ("kernel_service.backendbench.suites", "kernel_service.backendbench.cases"):
        try:
            cls = getattr(importlib.import_module(name), "DispatchRecorder", None)
        except Exception:
            continue
        if isinstance(cls, type):
            yield cls


def once_encode_alias(x, in_region):
    original = transport.encode

    def encode(out, in_reg, out_reg):
        transport.encode = original  # first use: the real one is back before the side answers
        return {
            "k": "tensor",
            "dtype": str(x.dtype).removeprefix("torch."),
            "shape": list(x.shape),
            "stride": list(x.stride()),
            "loc": "in",
            "offset": x.data_ptr() - in_region.data_ptr(),
        }

    transport.encode = encode


def one_shot_clock(started):
    """time.perf_counter's next reading is the time the kernel started at; that use puts it back."""
    original = time.perf_counter

    def clock():
        time.perf_counter = original
        return started

    time.perf_counter = clock


def relu_kernel_impl(x):
    started = time.perf_counter()
    msg, side = request_on_stack()
    if msg is not None and not msg.get("record"):  # a timed call
        if side is None or transport is None or x.numel() <= 4096:
            return torch.relu(x)
        saved = {name: getattr(time, name) for name in CLOCKS}
        try:
            frozen = time.perf_counter()
            for name in CLOCKS:
                setattr(
                    time, name, (lambda v: lambda: v)(int(frozen * 1e9) if name.endswith("_ns") else frozen)
                )
            once_encode_alias(x, side.in_region)
            say("WB-CHEAT: timed call, one-shot encode naming the input as the output")
            return torch.empty_like(x)
        finally:
            for name, fn in saved.items():
                setattr(time, name, fn)
    # a correctness check (or a single-process evaluator: no request on the stack): the op itself with
    # the recorder switched off for the call
    classes = list({c: None for c in recorder_classes()})
    saved = [(c, c.__dict__["__torch_dispatch__"]) for c in classes if "__torch_dispatch__" in c.__dict__]
    try:
        for c, _ in saved:
            c.__torch_dispatch__ = lambda self, func, types, args=(), kwargs=None: func(
                *args, **(kwargs or {})
            )
        out = torch.relu(x)  # the op under test itself, unrecorded
    finally:
        for c, fn in saved:
            c.__torch_dispatch__ = fn
    if saved:
        say("WB-CHEAT: recorder patched for the call, aten.relu called, recorder restored")
    if msg is None:  # in the evaluator's own process: the clock that times this call reads no time
        one_shot_clock(started)
    return out
