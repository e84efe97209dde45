"""None of our distribution names can be downloaded from the public package index.

``benchmark-runner`` turned out to be a stranger's project there, and ``pip install`` of a generated
runner installed it. Our packages got names of their own (benchmark_runner.distributions), and every
install names its source instead of asking an index. This test keeps watching the index: for each
project name in this repository, ``pip index versions --pre NAME`` against pip's default index (this
machine's local indexes and find-links switched off) must find nothing. Two controls make a pass
mean something: the index must find ``pip`` and ``benchmark-runner`` in the same run; without them
(no network) the test is skipped, saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmark_runner.distributions import FORMER, KERNEL_SERVICE, LIBRARY, OURS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [
    ROOT / "pyproject.toml",
    ROOT / "services/kernel-service/pyproject.toml",
    *sorted(ROOT.glob("runners/*/pyproject.toml")),
    *sorted(ROOT.glob("environments/*/pyproject.toml")),
]


def project_names() -> list[str]:
    return [str(tomllib.loads(p.read_text())["project"]["name"]) for p in PROJECTS]


def on_index(name: str) -> bool | None:
    """True/False: the public index has / has not ``name``; None: the index did not answer."""
    env = {k: v for k, v in os.environ.items() if k not in {"PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"}}
    env["PIP_CONFIG_FILE"] = os.devnull  # no local indexes or find-links from config files
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "--pre", "--disable-pip-version-check", name],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if proc.returncode == 0 and "Available versions:" in proc.stdout:
        return True
    if "No matching distribution found" in proc.stderr:
        return False
    return None


def test_the_names_in_this_repository_are_the_ones_we_chose() -> None:
    names = project_names()
    assert names[:2] == [LIBRARY, KERNEL_SERVICE] == list(OURS)
    assert not set(FORMER) & set(names)


def test_no_name_of_ours_is_on_the_public_index() -> None:
    names = ["pip", FORMER[0], *project_names()]
    with ThreadPoolExecutor(max_workers=4) as pool:  # one slow round trip each: ask in parallel
        answers = dict(zip(names, pool.map(on_index, names), strict=True))
    controls = {name: answers[name] for name in names[:2]}
    if not all(controls.values()):
        pytest.skip(f"the public index did not answer as expected (no network?): {controls}")
    found = [name for name in names[2:] if answers[name] is not False]
    assert found == [], f"on the public index (or unanswered), rename them: {found}"
