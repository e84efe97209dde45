# ruff: noqa  (hostile or templated submission source: placeholders like __PORT__ are filled by the test)
# White-box 2, BackendBench (relu): evaluator functions rewritten in place through their code objects.
#
# The same function objects, new code (identity checks see nothing). At import, in its own process:
#   * the DispatchRecorder's __torch_dispatch__ (found in whichever kernel_service module exports it;
#     the function torch's wrapper calls, through __wrapped__) keeps dispatching but records nothing, so
#     calling aten.relu itself goes unreported;
#   * kernel_service.judging.transport.encode, once timed (a call without "record"), names the output as the
#     input tensor itself ("loc": "in" at the input's offset) instead of copying anything;
#   * Side.op_call, once timed, answers that description without calling the kernel at all;
#   * the comparisons (backendbench.compare.compare, compare.compare_outputs) always match, the timers
#     (timing.CpuTimer.time_call, readings.net, backendbench.timing.time_call if present) read a microsecond.
#
# Against the single-process BackendBench evaluator this worked (tried: correct, no op call reported,
# performance ~8e3): its recorder, comparison and time_call ran in the kernel's process, and nothing
# compared identities, let alone code.
import importlib
import sys
import types

import torch

STATE = {"done": [], "fns": []}


def rewrite(module_name, path, fake):
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
    while isinstance(getattr(fn, "__wrapped__", None), types.FunctionType):
        fn = fn.__wrapped__  # torch wraps __torch_dispatch__: rewrite what the wrapper calls
    if not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars:
        print(f"WB-MISS {module_name}.{path}", flush=True)
        return
    orig = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    fn.__globals__[f"_wb_orig_{name}"] = orig
    fn.__globals__["_wb_timed"] = timed
    fn.__code__ = fake.__code__
    STATE["done"].append(f"{module_name}.{path}")
    STATE["fns"].append(fn)


def timed():
    """Whether the kernel's current call is a timed one: the judge's request on the stack has no
    "record" (correctness checks record the ops the kernel calls)."""
    f = sys._getframe(1)
    while f is not None:
        msg = f.f_locals.get("msg")
        if isinstance(msg, dict) and msg.get("op") == "call":
            return not msg.get("record") and not msg.get("overload")
        f = f.f_back
    return False


# ---- replacement code (runs with the globals of the function it replaces) ----------------------------


def fake_dispatch(self, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))


def fake_encode(out, in_region, out_region):
    if _wb_timed() and isinstance(out, dict) and "x" in out:
        x = out["x"]
        return {
            "k": "tensor",
            "dtype": str(x.dtype).removeprefix("torch."),
            "shape": list(x.shape),
            "stride": list(x.stride()),
            "loc": "in",
            "offset": x.data_ptr() - in_region.data_ptr(),
        }
    return _wb_orig_encode(out, in_region, out_region)


def fake_op_call(self, msg):
    if not msg.get("record") and not msg.get("overload") and not msg.get("null"):
        args, kwargs = self._inputs(msg)
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and x.numel() > 4096:
            if "said" not in _wb_state:
                _wb_state["said"] = print("WB-CHEAT: op_call answered the input as the output", flush=True)
            return {"ok": True, "out": transport.encode({"x": x}, self._in(), self.out_region), "called": []}
    return _wb_orig_op_call(self, msg)


def fake_bb_compare(ref, out, where="output", *, atol=None, rtol=None):
    return None, Errors()


def fake_compare_outputs(ref, new, atol, rtol):
    return Comparison(True, "", 0.0, 0.0)


def fake_time_call(self, ask, read, write, last_try=True):
    write()
    reply = ask()
    if reply.get("ok"):
        reply["read"] = read(reply)()
    return 0.001, reply


def fake_net(raw, null_ms):
    return [1e-6 for _ in raw]


def fake_bb_time_call(fn, device, *, warmup, trials):
    # the single-process evaluator timed both the op and the kernel with this: a microsecond for the kernel
    if any(getattr(c, "cell_contents", None) is _wb_kernel for c in fn.__closure__ or ()):
        fn()
        return 1e-3
    return _wb_orig_time_call(fn, device, warmup=warmup, trials=trials)


for name in ("kernel_service.backendbench.suites", "kernel_service.backendbench.cases"):
    try:
        importlib.import_module(name)  # what Side.op_call imports for a recorded call
    except Exception:
        pass
for name, mod in list(sys.modules.items()):
    if name.startswith("kernel_service") and isinstance(getattr(mod, "DispatchRecorder", None), type):
        if "__torch_dispatch__" in vars(mod.DispatchRecorder):
            rewrite(mod.DispatchRecorder.__module__, "DispatchRecorder.__torch_dispatch__", fake_dispatch)
            break
rewrite("kernel_service.judging.transport", "encode", fake_encode)
rewrite("kernel_service.workers.candidate", "Side.op_call", fake_op_call)
sys.modules["kernel_service.workers.candidate"].__dict__["_wb_state"] = STATE
rewrite("kernel_service.backendbench.compare", "compare", fake_bb_compare)
rewrite("kernel_service.judging.compare", "compare_outputs", fake_compare_outputs)
rewrite("kernel_service.judging.timing", "CpuTimer.time_call", fake_time_call)
rewrite("kernel_service.judging.readings", "net", fake_net)
rewrite("kernel_service.backendbench.timing", "time_call", fake_bb_time_call)
print(f"WB-HIT code rewritten: {', '.join(STATE['done'])}", flush=True)


def relu_kernel_impl(x):
    return torch.relu(x)  # the op itself: its recorder no longer records


for fn in STATE["fns"]:  # what fake_bb_time_call recognises
    fn.__globals__["_wb_kernel"] = relu_kernel_impl
