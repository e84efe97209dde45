"""``kernel-service doctor`` (issue 54): it passes on this host's CPU path, and it names the check that
failed when the deployment is broken on purpose.

The broken deployments are real HTTP services on 127.0.0.1 that the doctor reaches with ``--url``
(``FakeService``): each judges like a sound service except in one way, the way a real deployment went
wrong (a judge that rewards cheats, a clock that reads honest work 1.5x, faults that spoil the jobs
beside them, GPU workers that share the host's ``/dev/shm``, a timer that counts host launch time, a
short kernel read 12x slow while builds run). A sound fake passes, so each failure is the one broken
thing's. The real CPU run starts the service in-process with ``serve``'s settings, as an operator would.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import tomllib
from click.testing import CliRunner
from kernel_service.cli import main
from kernel_service.doctor import DoctorOptions, DoctorReport, kernels, run, run_doctor
from kernel_service.doctor.independent import main as independent_main
from kernel_service.doctor.report import render
from kernel_service.service import KernelServiceConfig

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "services" / "kernel-service"

# ---- a deployment broken on purpose ----------------------------------------------------------------

BY_SOURCE = {kernels.source(n): n for n in kernels.names()}
GOOD_ISOLATION = {
    "launcher": "bwrap",
    "pid_namespace": True,
    "net_namespace": True,
    "mount_namespace": True,
    "private_shm": True,
    "landlock_abi": 7,
    "landlock_fs": True,
    "landlock_net": True,
    "landlock_scoped_signals": True,
    "fallbacks": [],
}
PROBE_OK = {
    "net": "blocked (PermissionError)",
    "file": "blocked (PermissionError)",
    "env": "absent",
    "shm": "written",
}


def kind(body: dict[str, Any]) -> str:
    """Which of the doctor's kernels a request submits."""
    sol = body["solution"]
    if "KS_DOCTOR_PROBE" in sol:
        return "probe"
    if "doctor_load_" in sol:
        return "build"
    if sol.endswith("\nModelNew = Model\n"):
        return "self"
    return BY_SOURCE.get(sol, "unknown")


class FakeService:
    """``POST /v1/evaluate`` answered by ``judge(body, kind) -> answer fields``: a sound service's verdicts
    unless a test replaces one. ``gpus``: that many GPU workers (``eval-<i>-1``), else one CPU worker."""

    def __init__(self, gpus: int = 0) -> None:
        self.gpus = gpus
        self.turn = itertools.count()
        self.lock = threading.Lock()
        self.builds_in_flight = 0
        self.isolation = dict(GOOD_ISOLATION)
        self.probe = dict(PROBE_OK)
        self.speedups: dict[str, float] = {}  # kernel name -> speedup a sound service reads
        self.overrides: list[Callable[[dict[str, Any], str], dict[str, Any] | None]] = []
        self.seen: list[str] = []

    def sound(self, body: dict[str, Any], k: str) -> dict[str, Any]:
        if k == "probe":
            return {
                "outcome": "correct",
                "reward": 0.0,
                "output": "KS_DOCTOR_PROBE " + json.dumps(self.probe),
            }
        if k.startswith("cheat_"):
            return {"outcome": "incorrect", "reward": -2.0, "message": "timed call 2: outputs differ"}
        if "fault" in k:
            return {"outcome": "execution_failure", "reward": -3.0, "message": "worker died (SIGSEGV)"}
        speedup = self.speedups.get(k, 1.0)
        return {"outcome": "correct", "reward": speedup - 1, "speedup": speedup}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        k = kind(body)
        fields = next((f for o in self.overrides if (f := o(body, k)) is not None), None) or self.sound(
            body, k
        )
        n = next(self.turn)
        worker = f"eval-{n % self.gpus}-{n}" if self.gpus else f"eval-cpu-{n}"
        return {
            "outcome": "correct",
            "reward": 0.0,
            "message": "",
            "worker_id": worker,
            "device": "cuda" if self.gpus else "cpu",
            "hardware": "Fake GPU 80GB" if self.gpus else "cpu",
            "torch_version": "2.x",
            "cuda_version": "13.0" if self.gpus else None,
            "isolation": self.isolation,
            "timing_method": "judge-side CUDA events around the side's work under MPS"
            if self.gpus
            else "cpu",
            "elapsed": {"total_s": 1.0},
            **fields,
        }

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/evaluate":
                    self.send_error(404)
                    return
                fake.seen.append(kind(body))
                if kind(body) == "build":  # a build takes a while: the busy check times beside it
                    with fake.lock:
                        fake.builds_in_flight += 1
                    time.sleep(20)
                    with fake.lock:
                        fake.builds_in_flight -= 1
                data = json.dumps(fake.answer(body)).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the doctor cancelled it (a build it no longer needs)
                    pass

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


def doctor(fake: FakeService, quick: bool = True) -> DoctorReport:
    with fake.serve() as url:
        return run_doctor(DoctorOptions(quick=quick, url=url, settings={"url": url}))


def status(report: DoctorReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def assert_fails(report: DoctorReport, check: str) -> None:
    """Exactly ``check`` failed, and the verdict line names it first."""
    failed = [c.name for c in report.checks if c.status == "fail"]
    assert failed == [check], (failed, render(report))
    assert not report.trusted
    assert report.verdict.startswith(f"VERDICT: scores can NOT be trusted on this deployment: {check} failed")
    fix = next(c.fix for c in report.checks if c.name == check)
    assert report.verdict.endswith(f"What to do: {fix}")


# ---- a sound service passes, and each broken one fails by name -------------------------------------


def test_a_sound_service_passes_on_both_paths() -> None:
    cpu = doctor(FakeService())
    assert cpu.trusted, render(cpu)
    assert status(cpu) == {
        "sandbox": "pass",
        "honest_self": "pass",
        "known_speedup": "skip",
        "cheats_no_reward": "pass",
        "fault_beside_honest": "pass",
        "busy_host": "skip",
    }
    gpu = doctor(FakeService(gpus=2))
    assert gpu.trusted, render(gpu)
    assert gpu.environment.devices == ["gpu0", "gpu1"]
    assert gpu.environment.mps == "running (answers timed under MPS)"
    # no GPU of the service's kind here to time the known speedup independently: said, not failed
    assert status(gpu)["known_speedup"] == "warn"
    for check in gpu.checks:
        if check.status != "skip":
            assert {r.device for r in check.results} == {"gpu0", "gpu1"}, check


def test_a_judge_that_rewards_cheats_fails_the_cheat_check_and_exits_1() -> None:
    fake = FakeService()
    fake.overrides.append(
        lambda body, k: (
            {"outcome": "correct", "reward": 9.0, "speedup": 10.0} if k.startswith("cheat_") else None
        )
    )
    with fake.serve() as url:
        result = CliRunner().invoke(main, ["doctor", "--url", url, "--quick", "--out", "/dev/null"])
    assert result.exit_code == 1, result.output
    verdict = result.output.strip().splitlines()[-1]
    assert verdict.startswith(
        "VERDICT: scores can NOT be trusted on this deployment: cheats_no_reward failed on cpu"
    )
    assert "cached_first_output x10.000 judged correct" in verdict
    report = doctor(fake)
    assert_fails(report, "cheats_no_reward")


def test_the_json_report_is_a_doctor_report() -> None:
    fake = FakeService()
    fake.overrides.append(
        lambda body, k: (
            {"outcome": "correct", "reward": 9.0, "speedup": 10.0} if k.startswith("cheat_") else None
        )
    )
    with fake.serve() as url:
        result = CliRunner().invoke(main, ["doctor", "--url", url, "--quick", "--json"])
    assert result.exit_code == 1
    report = DoctorReport.model_validate_json(result.stdout)
    cheats = next(c for c in report.checks if c.name == "cheats_no_reward")
    assert cheats.status == "fail" and cheats.fix and cheats.rule and cheats.runs
    assert [j.ok for j in cheats.results[0].jobs] == [False, False]


def test_a_clock_that_misreads_honest_work_fails_honest_self() -> None:
    fake = FakeService()
    fake.overrides.append(
        lambda body, k: {"outcome": "correct", "reward": 0.5, "speedup": 1.5} if k == "self" else None
    )
    report = doctor(fake)
    # the honest jobs beside faults read 1.5x too: that check fails with it, after honest_self
    assert [c.name for c in report.checks if c.status == "fail"] == ["honest_self", "fault_beside_honest"]
    assert "honest_self failed on cpu: outside 0.8-1.25: matmul_256 x1.500 then x1.500" in report.verdict


def test_one_miss_is_judged_again_before_it_fails() -> None:
    fake = FakeService()
    misses = [1.6]  # the first honest reading after the probe misses; the rerun is within the band

    def first_misses(body: dict[str, Any], k: str) -> dict[str, Any] | None:
        if k == "self" and "probe" in fake.seen and misses:
            return {"outcome": "correct", "speedup": misses.pop()}
        return None

    fake.overrides.append(first_misses)
    report = doctor(fake)
    assert report.trusted, render(report)
    honest = next(c for c in report.checks if c.name == "honest_self")
    assert [j.speedup for j in honest.results[0].jobs] == [1.6, 1.0]


def test_faults_that_spoil_their_neighbours_fail_the_fault_check() -> None:
    fake = FakeService(gpus=2)
    faulted = threading.Event()

    def spoiled(body: dict[str, Any], k: str) -> dict[str, Any] | None:
        if "fault" in k:
            faulted.set()
            return None
        if faulted.is_set() and body["reference"] == kernels.source("gpu_ref_add"):
            return {
                "outcome": "execution_failure",
                "reward": -3.0,
                "message": "CUDA-capable device(s) is/are busy or unavailable",
            }
        return None

    fake.overrides.append(spoiled)
    report = doctor(fake)
    assert_fails(report, "fault_beside_honest")
    assert "beside faults" in report.verdict or "after the faults" in report.verdict


def test_gpu_workers_sharing_the_hosts_dev_shm_fail_the_sandbox_check() -> None:
    """Issue 29's deployment: GPU workers without a mount namespace of their own (the CUDA driver's
    inter-process events of two workers then cross)."""
    fake = FakeService(gpus=2)
    fake.isolation = {**GOOD_ISOLATION, "launcher": "none", "pid_namespace": False, "net_namespace": False,
                      "mount_namespace": False, "private_shm": False,
                      "fallbacks": ["no namespaces: the worker shares the host's PID and network namespaces"]}  # fmt: skip
    report = doctor(fake)
    assert_fails(report, "sandbox")
    assert report.environment.private_dev_shm == "NO: the workers have the host's /dev/shm (launcher none)"
    assert "private /dev/shm" in report.verdict
    del fake.isolation["private_shm"]  # a service from before the workers reported it: told by the launcher
    report = doctor(fake)
    assert_fails(report, "sandbox")
    assert report.environment.private_dev_shm.startswith("NO: no mount namespace")


def test_a_probe_that_reaches_the_host_fails_the_sandbox_check() -> None:
    fake = FakeService()
    fake.probe["net"] = "reached"
    report = doctor(fake)
    assert_fails(report, "sandbox")
    assert "reached a TCP port on the host's loopback" in report.verdict


def test_a_timer_that_counts_host_launch_fails_the_known_speedup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The independent timer reads the diag rewrite 30x; a service whose clock holds host launch time
    reads the ~60 us kernel slow, so its speedup comes out 20% short."""

    async def independent(d: Any, hardware: str) -> dict[str, dict[str, Any]]:
        return {"*": {"gpu_ref_diag:gpu_new_diag": {"speedup": 30.0, "ref_ms": 1.8, "new_ms": 0.06}}}

    monkeypatch.setattr(run, "_local_independent", independent)
    fake = FakeService(gpus=2)
    fake.speedups["gpu_new_diag"] = 24.0
    report = doctor(fake)
    assert_fails(report, "known_speedup")
    assert "diag_rewrite_~30x: service x24.00, independent x30.00 (-20.0%)" in report.verdict
    fake.speedups["gpu_new_diag"] = 29.4  # within 5%: the same doctor passes
    assert doctor(fake).trusted


def test_a_short_kernel_read_slow_beside_builds_fails_the_busy_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30's busy host: a short kernel read 0.57x idle and 0.046x while nvcc builds ran."""

    async def independent(d: Any, hardware: str) -> dict[str, dict[str, Any]]:
        return {"*": {f"{p.reference}:{p.solution}": {"speedup": 1.0} for p in d.plan.known}}

    monkeypatch.setattr(run, "_local_independent", independent)
    fake = FakeService(gpus=2)
    fake.overrides.append(
        lambda body, k: (
            {"outcome": "correct", "speedup": 0.046 if fake.builds_in_flight else 0.57}
            if body["reference"] == kernels.source("gpu_ref_add_small")
            else None
        )
    )
    report = doctor(fake, quick=False)
    assert_fails(report, "busy_host")
    assert re.search(
        r"triton_add_1x128: idle x0\.570 and x0\.570, with 8 cuda builds x0\.046 \(-91\.9%\)", report.verdict
    )
    assert "this path's clock" not in report.verdict
    assert fake.seen.count("build") >= 8


def test_a_short_kernel_whose_idle_readings_spread_fails_the_busy_check_naming_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured with --mps off on one H200: the 1x128 add read idle x1.111 in one run and x0.949 in the
    next. Two idle readings that far apart fail the check before any build could be blamed."""

    async def independent(d: Any, hardware: str) -> dict[str, dict[str, Any]]:
        return {"*": {f"{p.reference}:{p.solution}": {"speedup": 1.0} for p in d.plan.known}}

    monkeypatch.setattr(run, "_local_independent", independent)
    fake = FakeService(gpus=1)
    idle = itertools.cycle([1.111, 0.949])
    fake.overrides.append(
        lambda body, k: (
            {"outcome": "correct", "speedup": 1.03 if fake.builds_in_flight else next(idle)}
            if body["reference"] == kernels.source("gpu_ref_add_small")
            else None
        )
    )
    report = doctor(fake, quick=False)
    assert_fails(report, "busy_host")
    assert "idle x1.111 and x0.949" in report.verdict
    assert "differ by -14.6% with no build running: this path's clock" in report.verdict


def test_faults_that_never_land_on_a_device_are_sent_again_then_warned() -> None:
    """The service picks each job's device: a device that got no fault is sent the batch again, and is
    warned about (not passed) if it never gets one."""
    fake = FakeService(gpus=2)
    fake.overrides.append(
        lambda body, k: {**fake.sound(body, k), "worker_id": "eval-1-9"} if "fault" in k else None
    )
    report = doctor(fake)
    check = next(c for c in report.checks if c.name == "fault_beside_honest")
    by_dev = {r.device: r for r in check.results}
    assert by_dev["gpu1"].status == "pass" and by_dev["gpu0"].status == "warn", render(report)
    assert "no fault landed on this device in 3 rounds" in by_dev["gpu0"].summary
    assert report.trusted  # a warning, not a failure


def test_a_service_that_judges_nothing_is_named() -> None:
    with FakeService().serve() as url:
        report = run_doctor(DoctorOptions(quick=True, url=url + "/nowhere"))
    assert not report.trusted
    assert [c.name for c in report.checks] == ["reach"]
    assert report.verdict.startswith("VERDICT: scores can NOT be trusted on this deployment: reach failed")
    assert "no job was judged: http_404" in report.verdict


def test_a_service_that_cannot_start_here_is_named(tmp_path: Path) -> None:
    config = KernelServiceConfig(gpus=[], work_dir=tmp_path, executor="nowhere")  # type: ignore[arg-type]
    report = run_doctor(DoctorOptions(quick=True, config=config))
    assert [c.name for c in report.checks] == ["start"] and not report.trusted
    assert report.verdict.startswith(
        "VERDICT: scores can NOT be trusted on this deployment: start failed on host"
    )


# ---- the shipped kernels ----------------------------------------------------------------------------


def test_the_kernels_ship_as_package_data() -> None:
    """Read through importlib.resources (no checkout needed), valid Python, and covered by the
    distribution's package-data globs (the service image installs a wheel, not this tree)."""
    folder = resources.files("kernel_service.doctor").joinpath("data")
    names = kernels.names()
    assert len(names) >= 20 and "sandbox_probe" in names
    for name in names:
        text = folder.joinpath(f"{name}.py").read_text(encoding="utf-8")
        assert text == kernels.source(name)
        compile(text, name, "exec")
    globs = tomllib.loads((SERVICE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "kernel_service"
    ]
    for name in names:
        assert any(fnmatch(f"doctor/data/{name}.py", g) for g in globs), (name, globs)


def test_the_independent_timer_times_a_pair_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert independent_main(["--device", "cpu", "--calls", "5", "cpu_ref_matmul:self"]) == 0
    got = json.loads(capsys.readouterr().out)["cpu_ref_matmul:self"]
    assert got["ref_ms"] > 0 and got["new_ms"] > 0 and 0.5 < got["speedup"] < 2.0, got


# ---- the real thing: this host's CPU path ------------------------------------------------------------


def test_the_doctor_passes_on_this_hosts_cpu_path(tmp_path: Path) -> None:
    """``kernel-service doctor --cpu --quick --json``: a real service in-process with serve's settings,
    every CPU check passing (known speedup and the busy host are GPU checks), the environment filled in."""
    t0 = time.monotonic()
    out = tmp_path / "doctor.json"
    proc = subprocess.run(
        [sys.executable, "-m", "kernel_service.cli", "doctor", "--cpu", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = DoctorReport.model_validate_json(out.read_text())
    assert report.trusted and report.quick
    assert status(report) == {
        "sandbox": "pass",
        "honest_self": "pass",
        "known_speedup": "skip",
        "cheats_no_reward": "pass",
        "fault_beside_honest": "pass",
        "busy_host": "skip",
    }, proc.stdout
    env = report.environment
    assert env.path == "cpu" and env.devices == ["cpu"] and env.torch and env.landlock
    assert env.private_dev_shm and env.namespaces
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("VERDICT: scores can be trusted on this deployment"), proc.stdout
    assert any(line.startswith("  private /dev/shm") for line in lines)
    print(f"doctor --cpu --quick: {wall:.1f} s (the report's own wall time {report.wall_s} s)")


# ---- on a GPU host (run by the device session: pytest -m gpu tests/kernel_service/test_doctor.py) --------


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def _doctor_cli(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], DoctorReport, float]:
    out = tmp_path / "doctor.json"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kernel_service.cli", "doctor", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    wall = time.monotonic() - t0
    print(proc.stdout[-6000:], proc.stderr[-3000:], f"wall {wall:.1f} s", sep="\n")
    return proc, DoctorReport.model_validate_json(out.read_text()), wall


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 1, reason="needs a GPU")
def test_the_quick_doctor_passes_on_every_gpu_of_this_host(tmp_path: Path) -> None:
    proc, report, wall = _doctor_cli(tmp_path, "--quick")
    assert proc.returncode == 0 and report.trusted, report.verdict
    assert report.environment.devices == [f"gpu{i}" for i in range(_gpus())]
    for check in report.checks:
        if check.status != "skip":
            assert {r.device for r in check.results} == set(report.environment.devices), check.name
    assert wall <= 90 + 30, f"--quick took {wall:.0f} s (the issue's bound: 90 s on a 2-GPU host)"


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs two GPUs: workers sharing /dev/shm cross only between GPUs")
def test_gpu_workers_without_namespaces_fail_the_doctor(tmp_path: Path) -> None:
    """A real broken deployment (issue 29's): --sandbox none leaves every GPU worker the host's /dev/shm."""
    proc, report, _ = _doctor_cli(tmp_path, "--quick", "--sandbox", "none")
    assert proc.returncode == 1 and not report.trusted
    assert next(c for c in report.checks if c.name == "sandbox").status == "fail", report.verdict


def test_the_gpus_row_lists_the_gpus_the_workers_see(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured on 2x H200: with CUDA_VISIBLE_DEVICES=0 the row listed both GPUs (nvidia-smi sees all)."""
    from kernel_service.doctor.environment import nvidia_smi

    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho '0, GPU-aaaa1111, NVIDIA H200, 580.159.04'\necho '1, GPU-bbbb2222, NVIDIA H200, 580.159.04'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvidia_smi() == ("580.159.04", ["0: NVIDIA H200", "1: NVIDIA H200"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert nvidia_smi() == ("580.159.04", ["1: NVIDIA H200"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")
    assert nvidia_smi() == ("580.159.04", ["0: NVIDIA H200"])
