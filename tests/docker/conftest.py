"""Session fixtures of the install-anywhere tests (see installs.py): the replay venv of the kernel images,
and a runner generated outside this checkout, installed and tested by its own Makefile in a fresh shell."""

from __future__ import annotations

from pathlib import Path

import pytest
from installs import ROOT, VENV_BIN, SharedVenv, fresh_env, make_venv, sh


@pytest.fixture(scope="session")
def kernel_venv(tmp_path_factory: pytest.TempPathFactory) -> SharedVenv:
    return SharedVenv(make_venv(tmp_path_factory.mktemp("kernel-images") / "venv"))


@pytest.fixture(scope="session")
def outside_runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``create-benchmark-runner mybench --defaults`` in a directory outside this checkout, then its
    ``make install && make test`` in a fresh shell (the README's "Your own benchmark" steps)."""
    where = tmp_path_factory.mktemp("elsewhere")
    assert ROOT not in where.parents
    env = fresh_env(BENCHMARK_RUNNER_TEMPLATE_HOME=str(where / "template-mirror"))
    proc = sh([str(VENV_BIN / "create-benchmark-runner"), "mybench", "--defaults"], where, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    repo = where / "mybench-runner"
    proc = sh("make install && make test", repo, env)
    assert proc.returncode == 0, (
        f"make install && make test failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout
    return repo
