"""A side process: runs one side's code (the submission, or the reference) on inputs the judge sends.

Forked by the zygote, one per side per job, and killed when the job ends. It hardens itself first
(rlimits, Landlock: it may write only its own temp dir and the build cache, may not signal or ptrace
anything outside its own domain, no TCP), then serves the judge's requests: load the code, map the
arena, call, probe, synchronise.

Nothing here is trusted: a submission can rewrite any code or state of this process, and the judge
assumes it does. The judge takes from a side only what it can check itself: output memory it reads
through views it validates (``transport.decode``), and, on a GPU, an event it orders its own timing
events after. A side's reply that a call is done decides nothing the judge cannot verify.
"""

from __future__ import annotations

import faulthandler
import json
import os
import pickle
import socket
import tempfile
import traceback
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from ..judging import cuda_ipc, transport
from ..judging.sandbox import HardenPolicy, harden_worker

MAX_TEXT = 4000


def _error(outcome: str, what: str, exc: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "outcome": outcome,
        "message": f"{what}: {type(exc).__name__}: {str(exc)[:1000]}",
        "traceback": traceback.format_exc()[-MAX_TEXT:],
        "compile_log": str(exc)[-MAX_TEXT:] if outcome == "compilation_failure" else None,
    }


class Side:
    """The state of one side: its callable, its mapped arenas, its events."""

    def __init__(self, sock: socket.socket, workdir: Path) -> None:
        self.sock = sock
        self.workdir = workdir
        self.device = torch.device("cpu")
        self.fn: Any = None
        self.in_region: torch.Tensor | None = None
        self.out_region: torch.Tensor | None = None
        self._keep: list[Any] = []  # the last outputs, alive until the next call
        self._mapped: dict[str, Any] = {}  # the judge's arenas mapped here, by "in" / "out"
        self.go: torch.cuda.Event | None = None
        self.done: torch.cuda.Event | None = None
        self.hop: int | None = None  # under MPS: the judge's counters (``cuda_ipc.Hop``), mapped here
        self._hops: dict[str, int] = {}
        self.loaded: dict[str, Any] = {}  # the model's source, class, init inputs, seed, precision, mode

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"ok": False, "outcome": "unknown_error", "message": f"unknown request {op!r}"}
        try:
            result: dict[str, Any] = handler(msg)
        except Exception as exc:  # noqa: BLE001 - a bad request or a broken mapping: answer, do not die
            return _error("execution_failure", f"request {op!r} failed", exc)
        return result

    def op_setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        from ..judging.harness import apply_tf32

        self.device = torch.device(msg["device"])
        os.environ["TORCH_EXTENSIONS_DIR"] = msg["build_dir"]
        if msg.get("cuda_arch"):
            os.environ["TORCH_CUDA_ARCH_LIST"] = str(msg["cuda_arch"])
        if self.device.type == "cuda":
            cuda_ipc.ensure_context()
        apply_tf32(msg.get("tf32", "default"))
        return {"ok": True, "pid": os.getpid()}

    def op_load_model(self, msg: dict[str, Any]) -> dict[str, Any]:
        from ..judging.build_relocation import relocate_builds
        from ..judging.harness import (
            build_model,
            drew_on_cpu,
            load_module,
            precision_dtype,
            reset_extension_versioner,
        )

        reset_extension_versioner()
        relocate_builds()  # a build in a directory of the submission's: the compile pool's, loaded
        if msg.get("prebuilt"):  # an installed artifact: its extensions load without a build
            from .artifacts import seed_prebuilt

            seed_prebuilt(os.environ["TORCH_EXTENSIONS_DIR"], msg["prebuilt"])
        if msg.get("failed_builds"):  # built and failed on the compile worker: not compiled again here
            from .artifacts import refuse_failed_builds

            refuse_failed_builds(msg["failed_builds"])
        try:
            module = load_module(msg["source"], msg["name"], self.workdir)
            cls = getattr(module, msg["cls"], None)
            if not isinstance(cls, type):
                return {
                    "ok": False,
                    "outcome": msg["missing_outcome"],
                    "message": f"defines no class `{msg['cls']}`",
                }
        except BaseException as exc:  # noqa: BLE001 - SystemExit included: report, never die silently
            return _error(msg["load_outcome"], f"{msg['name']} failed to load/compile", exc)
        try:
            init = transport.unpack(msg["init"], torch.empty(0, dtype=torch.uint8))
            dtype = precision_dtype(msg.get("precision", "fp32"))  # the judge cast the init inputs already
            # a model loaded before (an own baseline's reference) is freed before this one is built
            self.fn = None
            on_cpu = bool(msg.get("on_cpu")) or self.device.type == "cpu"
            module_mode = msg.get("module_mode", "train")
            self.fn = build_model(cls, init, msg["seed"], self.device, dtype, on_cpu, module_mode)
            drew = not on_cpu and drew_on_cpu(msg["seed"])
            self._sync()
        except BaseException as exc:  # noqa: BLE001
            return _error(msg["init_outcome"], f"{msg['cls']}(...) raised", exc)
        self.loaded = {k: msg[k] for k in ("cls", "seed") if k in msg}  # what an ncu replay rebuilds
        self.loaded.update(
            source=msg["source"], init=init, precision=msg.get("precision", "fp32"), module_mode=module_mode
        )
        return {"ok": True, "drew_on_cpu": drew}

    def op_load_fn(self, msg: dict[str, Any]) -> dict[str, Any]:
        from ..judging.harness import load_module

        try:
            module = load_module(msg["source"], "kernel", self.workdir)
        except BaseException as exc:  # noqa: BLE001
            return _error("load_error", "the source failed to import", exc)
        fn = getattr(module, msg["function"], None)
        if not callable(fn):
            defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("__"))
            return {
                "ok": False,
                "outcome": "missing_function",
                "message": f"the source defines no function `{msg['function']}` (it defines: "
                f"{', '.join(defined[:12]) or 'nothing'})",
            }
        self.fn = fn
        # what an ncu replay rebuilds (``profiling.replay``): the module, and the function to call
        self.loaded = {"source": msg["source"], "function": msg["function"]}
        return {"ok": True, "file": str(module.__file__)}

    def _op(self, name: str) -> Any:
        """An aten overload by name (``aten.add.Tensor``): what a BackendBench reference side calls."""
        target: Any = torch.ops
        for part in str(name).split("."):
            target = getattr(target, part)
        return target

    def op_arena(self, msg: dict[str, Any]) -> dict[str, Any]:
        nbytes, which = int(msg["nbytes"]), msg["which"]
        old = self._mapped.pop(which, None)
        if msg.get("kind") == "ipc":
            ptr, _ = cuda_ipc.open_handle(bytes.fromhex(msg["handle"]))
            region = cuda_ipc.byte_view(ptr, nbytes)
        else:
            _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
            try:
                if msg.get("kind") == "shared":
                    mapped: Any = cuda_ipc.Imported(fds[0], nbytes, self.device.index or 0)
                    region = cuda_ipc.byte_view(mapped.ptr, nbytes)
                else:
                    import mmap

                    mapped = mmap.mmap(fds[0], nbytes)
                    region = torch.frombuffer(mapped, dtype=torch.uint8)
            finally:
                os.close(fds[0])
            self._mapped[which] = mapped
        if which == "in":
            self.in_region = region
        else:
            self.out_region = region
        if isinstance(old, cuda_ipc.Imported):  # the judge's old arena: its memory goes when both let go
            self._sync()
            old.close()
        elif old is not None:  # a memfd mapping: views of it may still be alive
            self._keep.append(old)
        return {"ok": True}

    def op_events(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.go = torch.cuda.Event.from_ipc_handle(self.device, bytes.fromhex(msg["go"]))
        self.done = torch.cuda.Event(enable_timing=False, interprocess=True)
        self.done.record()
        reply: dict[str, Any] = {"ok": True, "done": bytes(self.done.ipc_handle()).hex()}
        if isinstance(msg.get("hop"), str):  # the judge's counters (``cuda_ipc.Hop``), mapped once
            try:
                if msg["hop"] not in self._hops:
                    self._hops[msg["hop"]] = cuda_ipc.open_handle(bytes.fromhex(msg["hop"]))[0]
            except (cuda_ipc.CudaDriverError, ValueError):  # the judge keeps to the events then
                self.hop = None
                return reply
            self.hop = self._hops[msg["hop"]]
            reply["hop"] = True
        return reply

    def _go(self, msg: dict[str, Any]) -> None:
        """Hold this side's stream until the judge says go: its counter, or its event."""
        stream = torch.cuda.current_stream()
        if self.hop is not None and isinstance(msg.get("hop"), int):
            cuda_ipc.stream_wait_value(stream.cuda_stream, self.hop, msg["hop"])
        else:
            assert self.go is not None
            stream.wait_event(self.go)

    def _done(self, msg: dict[str, Any]) -> None:
        """Mark this side's call done after the work on its stream."""
        if self.hop is not None and isinstance(msg.get("hop"), int):
            cuda_ipc.stream_write_value(
                torch.cuda.current_stream().cuda_stream, self.hop + cuda_ipc.Hop.DONE_AT, msg["hop"]
            )
        else:
            assert self.done is not None
            self.done.record()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _inputs(self, msg: dict[str, Any]) -> tuple[Any, Any]:
        assert self.in_region is not None
        return transport.unpack(msg["args"], self.in_region), transport.unpack(msg["kwargs"], self.in_region)

    def op_call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Run the callable once. ``gated``: wait on the judge's go event and mark done with our event,
        without a host sync (the judge times on the GPU); otherwise synchronise before answering."""
        self._keep = [k for k in self._keep if not isinstance(k, _Outputs)]
        if msg.get("null"):  # the judge measuring its own path: wait on go, mark done, nothing else
            self._go(msg)
            self._done(msg)
            return {"ok": True, "out": {"k": "scalar", "v": None}}
        fn = self._op(msg["overload"]) if msg.get("overload") else self.fn
        called: list[str] = []
        try:
            if "calls" in msg:  # several calls (a timed reading, a group of inputs): their outputs, in order
                args: Any = [transport.unpack(msg["calls"], self._in())]
                kwargs: Any = {}
                if msg.get("overloads"):  # a reference side: each call its own aten overload
                    fns = [self._op(name) for name in msg["overloads"]]
                else:
                    fns = [fn] * len(args[0])
                fn = partial(_tried if msg.get("tried") else _each, fns)
            else:
                args, kwargs = self._inputs(msg)
            if msg.get("gated"):
                self._go(msg)
                out = fn(*args, **kwargs)
                self._done(msg)
            elif msg.get("record"):  # BackendBench: which aten ops the kernel called (advisory)
                from ..backendbench.detect import packet_name
                from ..backendbench.suites import DispatchRecorder

                rec = DispatchRecorder()
                try:
                    with rec:
                        out = fn(*args, **kwargs)
                finally:
                    called = sorted({packet_name(f) for f, _, _ in rec.calls})
                self._sync()
            else:
                out = fn(*args, **kwargs)
                self._sync()
        except BaseException as exc:  # noqa: BLE001
            return {
                **_error("execution_failure", "forward raised", exc),
                "called": called,
                "exc": _short(exc),
                "lasting": _lasting(exc),
            }
        self._keep.append(_Outputs(out))  # the judge reads this memory after we answer
        try:
            return {"ok": True, "out": transport.encode(out, self._in(), self.out_region), "called": called}
        except transport.NeedSpace as need:
            return {"ok": False, "need": need.nbytes}
        except BaseException as exc:  # noqa: BLE001
            return _error("execution_failure", "the outputs could not be shared", exc)

    def _in(self) -> torch.Tensor:
        return self.in_region if self.in_region is not None else torch.empty(0, dtype=torch.uint8)

    def op_probe(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One untimed call under ``KernelProbe``: which custom kernels ran (advisory; the side could lie)."""
        from ..judging import integrity

        probe = integrity.KernelProbe(integrity.default_trusted_roots())
        try:
            args, kwargs = self._inputs(msg)
            with torch.no_grad():
                probe.run(lambda: self.fn(*args, **kwargs))
            self._sync()
        except BaseException as exc:  # noqa: BLE001
            return _error("execution_failure", "forward raised", exc)
        return {
            "ok": True,
            "uses_custom_kernel": probe.usage.uses_custom_kernel,
            "kernels": sorted(probe.usage.names),
        }

    def op_profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Warm-up calls, then one call under torch.profiler (``profiling.profile_call``), and with
        ``ncu``, Nsight Compute's metrics of the heaviest kernel. Advisory: the judge only reports it.
        ``overload``: the aten op of that name instead of the loaded callable (a BackendBench reference)."""
        from ..judging import profiling

        try:
            fn = self._op(msg["overload"]) if msg.get("overload") else self.fn
            args, kwargs = self._inputs(msg)
            report = profiling.profile_call(lambda: fn(*args, **kwargs), self.device, self._sync)
        except BaseException as exc:  # noqa: BLE001
            return _error("execution_failure", "the profiled call raised", exc)
        if msg.get("ncu"):
            report["ncu"] = profiling.ncu_report(
                self.loaded, args, kwargs, self.device, self.workdir, float(msg.get("ncu_timeout_s", 60))
            )
        return {"ok": True, "profile": report}

    def op_sync(self, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            self._sync()
        except BaseException as exc:  # noqa: BLE001
            return _error("execution_failure", "an asynchronous CUDA error", exc)
        return {"ok": True}


def _short(exc: BaseException) -> str:
    """The error and the frames in the submitted file (what its author can act on)."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if os.path.basename(f.filename).startswith(("kernel_", "solution_"))
    ]
    where = "".join(f" (line {f.lineno}: {(f.line or '').strip()[:80]})" for f in frames[-2:])
    return f"{type(exc).__name__}: {str(exc)[:500]}{where}"


def _each(fns: list[Any], sets: list[tuple[list[Any], dict[str, Any]]]) -> list[Any]:
    return [fn(*args, **kwargs) for fn, (args, kwargs) in zip(fns, sets, strict=True)]


#: Failures that say nothing lasting about a call's input: memory ran out (GPU, host) or the device broke.
_PASSING = (
    "OutOfMemoryError", "out of memory", "can't allocate memory", "ALLOC_FAILED", "CUDA error", "AcceleratorError",
)  # fmt: skip


def _lasting(exc: BaseException) -> bool:
    """Whether a call that raised ``exc`` would raise again on the same input (BackendBench: an op that
    rejects an input rejects it every time; a call that ran out of memory may pass the next time)."""
    text = f"{type(exc).__name__}: {exc}"
    return not any(mark in text for mark in _PASSING)


def _tried(fns: list[Any], sets: list[tuple[list[Any], dict[str, Any]]]) -> list[tuple[bool, Any]]:
    """Each call as ``(True, output)``, or ``(False, lasting)`` when it raised (BackendBench: an op rejects
    some inputs, and the judge keeps a lasting rejection with the op's answers; it checks a kernel that
    raised again input by input, for its message)."""
    out: list[tuple[bool, Any]] = []
    for fn, (args, kwargs) in zip(fns, sets, strict=True):
        try:
            out.append((True, fn(*args, **kwargs)))
        except Exception as exc:  # noqa: BLE001 - the call's own failure is its answer
            out.append((False, _lasting(exc)))
    return out


class _Outputs:
    def __init__(self, value: Any) -> None:
        self.value = value


def serve(sock: socket.socket, request: dict[str, Any]) -> None:
    """The side's main loop (called in the freshly forked child)."""
    tmp = Path(request["tmp"])
    tmp.mkdir(parents=True, exist_ok=True)
    policy = HardenPolicy(
        writable=[tmp, *(Path(p) for p in request.get("writable", []))],
        readable=[Path(p) for p in request.get("readable", [])],
        fsize_bytes=request.get("fsize"),
        nproc=request.get("nproc"),
        address_space=request.get("address_space"),
        landlock=request.get("landlock", True),
    )
    report = harden_worker(policy, launcher="none")
    faulthandler.enable()  # a crash leaves a Python traceback in the output the judge keeps
    for key in ("HOME", "TMPDIR", "XDG_CACHE_HOME"):
        os.environ[key] = str(tmp)
    tempfile.tempdir = str(tmp)  # cached by the zygote's imports (Triton builds its helpers under it)
    os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton-cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor-cache")
    if request.get("kernel_cache"):  # the judge's, shared by its sides (only the reference may write it)
        os.environ["PYTORCH_KERNEL_CACHE_PATH"] = str(request["kernel_cache"])
    os.chdir(tmp)
    conn = Connection(os.dup(sock.fileno()))
    side = Side(sock, tmp)
    conn.send_bytes(json.dumps({"ok": True, "isolation": report.model_dump()}).encode())
    with torch.no_grad():
        while True:
            try:
                raw = conn.recv_bytes()
            except (EOFError, OSError):
                return
            reply = side.handle(pickle.loads(raw))
            conn.send_bytes(json.dumps(reply, default=str).encode())
