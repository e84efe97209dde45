"""A generated runner repo, installed into a fresh virtualenv, passes its own tests and runs end to end.

The venv is new (``python -m venv``) and sees the benchmark-runner under test through a ``.pth`` file
that adds this interpreter's site-packages (no network, no wheel build of benchmark-runner); the
generated repo is pip-installed into it (editable, no build isolation), so its console script
``demo-bench-runner`` is the real installed entry point.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmark_runner.scaffolder import RunnerSpec, generate
from benchmark_runner.scaffolder.generator import TEMPLATE_HOME_ENV

pytestmark = pytest.mark.slow


@dataclass
class Installed:
    repo: Path
    python: Path
    exe: Path
    env: dict[str, str]


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("generated")
    env = {**os.environ, TEMPLATE_HOME_ENV: str(root / "mirror"), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    os.environ[TEMPLATE_HOME_ENV] = env[TEMPLATE_HOME_ENV]
    try:
        repo = root / "demo-bench-runner"
        generate(RunnerSpec.build("demo-bench", "A demo benchmark"), repo)
    finally:
        os.environ.pop(TEMPLATE_HOME_ENV, None)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    Path(purelib, "_benchmark_runner_dev.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(repo)],
        check=True,
        capture_output=True,
        env=env,
    )
    exe = venv / "bin" / "demo-bench-runner"
    assert exe.is_file(), "the console script was not installed"
    return Installed(repo=repo, python=python, exe=exe, env=env)


def run(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def find_score(root: Path) -> dict:
    """The ScoreResult JSON a run wrote somewhere under ``root``."""
    for path in sorted(root.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and {"n_tasks", "metrics", "per_task"} <= data.keys():
            return data
    raise AssertionError(f"no score JSON under {root}: {sorted(p.name for p in root.rglob('*'))}")


def test_generated_repo_passes_its_own_tests(installed: Installed) -> None:
    proc = run(
        [str(installed.python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        installed.repo,
        installed.env,
        300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout and "skipped" not in proc.stdout


@pytest.mark.parametrize(("model", "rate"), [("oracle", 1.0), ("echo", 0.0)])
def test_run_offline_model_with_the_embedded_service(
    installed: Installed, tmp_path: Path, model: str, rate: float
) -> None:
    proc = run([str(installed.exe), "run", "--model", model, "--run-id", "t"], tmp_path, installed.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    score = find_score(tmp_path)
    assert score["n_tasks"] == 3
    assert score["metrics"]["correct_rate"] == rate


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def service(installed: Installed, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The generated service, started separately: `python -m demo_bench_runner.service --port P`."""
    port = _free_port()
    log = tmp_path / "service.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [str(installed.python), "-m", "demo_bench_runner.service", "--port", str(port)],
            cwd=tmp_path,
            env=installed.env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"service did not start: {log.read_text()}"
            time.sleep(0.1)
        yield url, log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_run_against_a_separately_started_service(
    installed: Installed, tmp_path: Path, service: tuple[str, Path]
) -> None:
    url, log = service
    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = run(
        [str(installed.exe), "run", "--model", "oracle", "--run-id", "remote", "--service-url", url],
        workdir,
        installed.env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    score = find_score(workdir)
    assert score["metrics"]["correct_rate"] == 1.0
    served = log.read_text()
    assert served.count("POST /v1/evaluate") == 3, served  # the remote service did the evaluations


def test_generated_repo_typechecks(installed: Installed) -> None:
    """`make typecheck` in a generated repo passes as generated."""
    proc = run(
        [sys.executable, "-m", "mypy", "demo_bench_runner", "tests"], installed.repo, installed.env, 300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
