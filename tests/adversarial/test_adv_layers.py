"""The defences of sandbox.py and integrity.py on their own, in real processes (no service needed).

These prove each layer works here, independently of whether the service has wired it in yet.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from kernel_service.judging import sandbox
from kernel_service.judging.integrity import (
    KernelProbe,
    PatchGuard,
    default_trusted_roots,
    output_violation,
    snapshot_outputs,
    solution_threads,
    thread_baseline,
)

CHILD = textwrap.dedent(
    """
    import json, os, signal, socket, sys
    from pathlib import Path
    from kernel_service.judging.sandbox import HardenPolicy, harden_worker
    tmp, secret, outside, port = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    report = harden_worker(HardenPolicy(writable=[tmp], fsize_bytes=1 << 20))
    res = {"report": report.model_dump()}
    import torch
    res["torch"] = float(torch.ones(3).sum())
    (tmp / "ok.txt").write_text("fine"); res["write_tmp"] = True
    def attempt(name, fn):
        try:
            fn(); res[name] = "ALLOWED"
        except OSError as exc:
            res[name] = f"blocked: {exc.strerror}"
    attempt("read_secret", lambda: open(secret).read())
    attempt("write_outside", lambda: open(os.path.join(outside, "x.txt"), "w").write("x"))
    attempt("connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    attempt("big_file", lambda: open(tmp / "big.bin", "wb").write(b"0" * (2 << 20)))
    print(json.dumps(res))
    """
)


def test_landlock_and_rlimits_in_a_real_child(tmp_path: Path) -> None:
    if sandbox.landlock_abi() < 6:
        pytest.skip("this kernel lacks Landlock ABI 6 (DESIGN.md: dev/CI/H100 have ABI 7)")
    secret = tmp_path / "api-keys.yaml"
    secret.write_text("tenant: key-123")
    outside = tmp_path / "outside"
    outside.mkdir()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    script = tmp_path / "scripts" / "child.py"
    script.parent.mkdir()
    script.write_text(CHILD)
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                f"exec(open({str(script)!r}).read())",
                str(tmp_path / "wtmp"),
                str(secret),
                str(outside),
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            cwd=tmp_path / "scripts",
        )
    finally:
        listener.close()
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["torch"] == 3.0 and res["write_tmp"] is True
    assert (
        res["report"]["landlock_fs"]
        and res["report"]["landlock_net"]
        and res["report"]["landlock_scoped_signals"]
    )
    for name in ("read_secret", "write_outside", "connect", "signal_parent", "big_file"):
        assert res[name].startswith("blocked"), f"{name}: {res[name]}"
    assert not (outside / "x.txt").exists()


def test_launchers_and_environment(tmp_path: Path) -> None:
    launcher, why = sandbox.available_launcher("auto")
    assert launcher in ("bwrap", "unshare", "none")
    prefix = sandbox.launch_prefix(launcher, writable=[tmp_path / "w"], hidden=[tmp_path / "hidden"])
    if launcher != "none":
        # Inside: no network to the host, and our own PID namespace.
        code = "import os, socket; print(os.getpid());\ntry:\n socket.create_connection(('127.0.0.1', 9), 1)\nexcept OSError as e: print('neterr', e.errno)"
        out = subprocess.run(
            [*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        pid, net = out.stdout.split("\n")[:2]
        assert int(pid) < 10 and net.startswith("neterr")
    else:
        assert why  # the fallback says why
    env = sandbox.worker_environment({"PATH": "/bin", "OPENAI_API_KEY": "sk", "HF_TOKEN": "t"}, tmp_path)
    assert env["PATH"] == "/bin" and "OPENAI_API_KEY" not in env and "HF_TOKEN" not in env
    assert env["HOME"] == str(tmp_path) and env["TRITON_CACHE_DIR"].startswith(str(tmp_path))


def test_leftover_processes_are_found_and_killed() -> None:
    code = textwrap.dedent(
        """
        import subprocess, sys, time
        from kernel_service.judging import sandbox
        assert sandbox.become_subreaper()
        # a double fork: the grandchild is orphaned and, thanks to the subreaper, reparented to us
        subprocess.Popen([sys.executable, "-c",
            "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)"]).wait()
        time.sleep(0.5)
        print(len(sandbox.child_pids()), sandbox.kill_leftover_processes(), len(sandbox.child_pids()))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    before, killed, after = map(int, out.stdout.split())
    assert before == 1 and killed == 1 and after == 0


def test_patch_guard_sees_timer_harness_torch_and_weight_tampering() -> None:
    import time as time_mod

    import kernel_service.judging.timing as timing

    model = torch.nn.Linear(4, 4)
    guard = PatchGuard.for_harness(None, model)
    assert guard.violations() == []
    saved = (time_mod.perf_counter, timing.CpuTimer.time_call, torch.matmul)
    try:
        time_mod.perf_counter = lambda: 0.0  # type: ignore[assignment]
        timing.CpuTimer.time_call = lambda *a: (0.0, None)  # type: ignore[method-assign,assignment]
        torch.matmul = lambda *a, **k: None  # type: ignore[assignment]
        torch.Tensor.__add__ = lambda a, b: a  # type: ignore[method-assign,assignment]
        with torch.no_grad():
            model.weight.zero_()
        found = "\n".join(guard.violations())
    finally:
        time_mod.perf_counter, timing.CpuTimer.time_call, torch.matmul = saved  # type: ignore[method-assign]
        del torch.Tensor.__add__
    for needle in (
        "time.perf_counter",
        "CpuTimer.time_call",
        "torch.matmul",
        "torch.Tensor.__add__",
        "weight",
    ):
        assert needle in found, found
    assert guard.violations(check_values=False) == []  # all restored (the weights stay zeroed)


def test_outputs_threads_and_kernel_probe(tmp_path: Path) -> None:
    class Lazy(torch.Tensor):
        pass

    assert output_violation(torch.zeros(2)) is None
    assert "subclass" in (output_violation((torch.zeros(2).as_subclass(Lazy),)) or "")
    x = torch.ones(3)
    snap = snapshot_outputs([x])
    x.zero_()
    assert float(snap[0].sum()) == 3.0

    sol = tmp_path / "solution_mod.py"
    sol.write_text(
        "import threading, time\ndef spin(stop):\n    while not stop.is_set():\n        time.sleep(0.01)\n"
    )
    ns: dict[str, object] = {}
    exec(compile(sol.read_text(), str(sol), "exec"), ns)  # noqa: S102 - a stand-in solution file
    import threading

    base = thread_baseline()
    stop = threading.Event()
    t = threading.Thread(target=ns["spin"], args=(stop,))
    t.start()
    time.sleep(0.05)
    try:
        assert solution_threads(base, [str(sol)]) and not solution_threads(base, ["/elsewhere.py"])
    finally:
        stop.set()
        t.join()

    @torch.library.custom_op("advtest::twice", mutates_args=())
    def twice(a: torch.Tensor) -> torch.Tensor:
        return a * 2

    probe = KernelProbe(default_trusted_roots())
    probe.run(lambda: torch.relu(torch.ones(2)))
    assert not probe.usage.uses_custom_kernel
    probe = KernelProbe(default_trusted_roots())
    probe.run(lambda: torch.ops.advtest.twice(torch.ones(2)))
    assert probe.usage.uses_custom_kernel and any("advtest" in n for n in probe.usage.names), probe.usage
    assert os.getpid() > 0
