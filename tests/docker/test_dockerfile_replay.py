"""Each image's Dockerfile, replayed (dockerfile_replay.py): a generated runner's, both committed runners'
and the GPU service's, in this order, in one shared virtualenv (``SharedVenv``: each image must ask for
everything the replays before it installed, so sharing hides no missing requirement).

The build context is made the way ``make docker-build`` makes it (its ``docker-context`` step: wheels of
our packages from the library source, the public requirements), then every ``COPY`` and ``RUN`` of the
Dockerfile runs in a clean virtualenv from exactly the files it copies, and the entrypoint runs:
``--help``, then the runner's offline model on one bundled task (for the service image: the KernelBench
runner's ``reference`` model against the replayed ``kernel-service serve``). ``TORCH_PIP_ARGS`` pins
torch to the CPU build this machine has, as a user pins a build with ``--build-arg``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from dockerfile_replay import Image, replay
from installs import ROOT, TORCH_PIN, SharedVenv, fresh_env, sh

pytestmark = pytest.mark.slow

RUNNERS = ROOT / "runners"
#: The only steps a replay may skip: what a base image and user accounts provide.
ALLOWED_SKIPS = ("useradd", "apt-get", "python3 -m venv")


def build_context(repo: Path, target: str, **make_vars: str) -> Path:
    """``make TARGET`` in ``repo`` (the docker-context step of ``make docker-build``), in a fresh shell."""
    args = " ".join(f"{k}={v}" for k, v in make_vars.items())
    proc = sh(f"make --no-print-directory {target} {args}", repo, fresh_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return repo


def check_context(context: Path) -> None:
    """Our packages are wheels in the context, and no requirement the image resolves names one of them."""
    wheels = sorted(p.name for p in (context / "build/docker/wheels").iterdir())
    assert wheels and all(w.startswith("llmbench_") for w in wheels), wheels
    for name in ("requirements.txt", "torch.txt"):
        text = (context / "build/docker" / name).read_text()
        assert "llmbench" not in text and "benchmark-runner" not in text, text


def do_replay(dockerfile: Path, tmp_path: Path, venv: Path) -> Image:
    log = tmp_path / "replay.log"
    build_args = {"TORCH_PIP_ARGS": TORCH_PIN}
    image = replay(dockerfile, dockerfile.parent, tmp_path / "root", venv, build_args, fresh_env(), log)
    for skipped in image.skipped:
        assert any(s in skipped for s in ALLOWED_SKIPS), skipped
    assert image.user not in {"", "root", "0"}
    return image


def score_of(root: Path) -> dict:
    return json.loads(next(root.rglob("score.json")).read_text())


def check_runner_image(image: Image, cli: str, model: str) -> None:
    assert image.entrypoint == [cli]
    helped = image.run(["--help"])
    assert helped.returncode == 0 and "run" in helped.stdout, helped.stdout + helped.stderr
    proc = image.run(["run", "--model", model, "--run-id", "replay", "--limit", "1"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    score = score_of(image.host_path(image.workdir))
    assert [t["status"] for t in score["per_task"]] == ["correct"], score


def test_generated_runner_image(outside_runner: Path, replay_venv: SharedVenv, tmp_path: Path) -> None:
    """The runner generated outside the checkout: its own `make docker-context` with its own venv."""
    build_context(outside_runner, "docker-context")
    check_context(outside_runner)
    assert (outside_runner / "build/docker/torch.txt").read_text() == ""  # it needs no torch
    replay_venv.check_and_add(outside_runner)
    image = do_replay(outside_runner / "Dockerfile", tmp_path, replay_venv.venv)
    assert image.base.startswith("python:3.11-slim")
    check_runner_image(image, "mybench-runner", "oracle")


@pytest.mark.parametrize("runner", ["kernelbench", "backendbench"])
def test_committed_runner_image(runner: str, replay_venv: SharedVenv, tmp_path: Path) -> None:
    repo = RUNNERS / f"{runner}-runner"
    build_context(repo, "docker-context", VENV=sys.prefix)
    check_context(repo)
    assert (repo / "build/docker/torch.txt").read_text().startswith("torch")
    replay_venv.check_and_add(repo)
    image = do_replay(repo / "Dockerfile", tmp_path, replay_venv.venv)
    check_runner_image(image, f"{runner}-runner", "reference")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_service_image(replay_venv: SharedVenv, tmp_path: Path) -> None:
    service = ROOT / "services/kernel-service"
    build_context(ROOT, "docker-context-service")
    check_context(service)
    replay_venv.check_and_add(service)
    image = do_replay(service / "Dockerfile", tmp_path, replay_venv.venv)
    assert image.base.startswith("nvidia/cuda:") and "devel" in image.base
    assert image.entrypoint[:2] == ["kernel-service", "serve"] and image.cmd == ["--gpus", "all"]
    helped = image.run(["--help"])
    assert helped.returncode == 0 and "--gpus" in helped.stdout, helped.stdout + helped.stderr

    # `docker run IMAGE --gpus none --host 127.0.0.1 --port P`: later options win over the entrypoint's
    port = _free_port()
    argv, cwd, env = image.command(["--gpus", "none", "--host", "127.0.0.1", "--port", str(port)])
    log = tmp_path / "service.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        work = tmp_path / "client"
        work.mkdir()
        runner = Path(sys.executable).parent / "kernelbench-runner"
        args = ["run", "--model", "reference", "--run-id", "svc", "--limit", "1", "--service-url", url]
        done = sh([str(runner), *args], work, fresh_env(), timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert score_of(work)["metrics"]["correct_rate"] == 1.0
        assert "POST /v1/evaluate" in log.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
