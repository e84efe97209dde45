"""Session fixtures of the install-anywhere tests (see installs.py): the venv the Dockerfile replays share,
and a runner generated outside this checkout, installed and tested by its own Makefile in a fresh shell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from installs import ROOT, VENV_BIN, SharedVenv, fresh_env, make_venv, readme_block, sh


@pytest.fixture(scope="session")
def replay_venv(tmp_path_factory: pytest.TempPathFactory) -> SharedVenv:
    return SharedVenv(make_venv(tmp_path_factory.mktemp("replays") / "venv"))


@pytest.fixture(scope="session")
def outside_runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's "Your own benchmark" commands, verbatim, in a directory outside this checkout, in a
    fresh shell where this checkout's venv is active (as ``source .venv/bin/activate`` leaves it)."""
    where = tmp_path_factory.mktemp("elsewhere")
    assert ROOT not in where.parents
    script = readme_block("Your own benchmark")
    assert "create-benchmark-runner mybench" in script and "make install && make test" in script
    env = fresh_env(
        BENCHMARK_RUNNER_TEMPLATE_HOME=str(where / "template-mirror"), VIRTUAL_ENV=str(VENV_BIN.parent)
    )
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    proc = sh("set -e\n" + script, where, env)
    assert proc.returncode == 0, f"the README's steps failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert re.search(r"^\d+ passed in ", proc.stdout, re.M), proc.stdout  # make test: all passed
    return where / "mybench-runner"
