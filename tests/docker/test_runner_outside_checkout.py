"""The README's "Your own benchmark" steps, verbatim, from a directory outside this checkout.

``create-benchmark-runner mybench --defaults && cd mybench-runner && make install && make test`` once
installed an unrelated project that owns the name ``benchmark-runner`` on the public index, and the
runner's tests failed. Here the README's commands run as written (conftest.py ``outside_runner``): the
generated runner's own Makefile, in a fresh shell, must install this project's library from this
checkout (the library source recorded in its answers file), pass its tests, and run its offline model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from installs import ROOT, fresh_env, our_version, sh

pytestmark = pytest.mark.slow


def test_answers_name_the_checkout_as_the_library_source(outside_runner: Path) -> None:
    answers = yaml.safe_load((outside_runner / ".copier-answers.yml").read_text())
    assert answers["library_source"] == str(ROOT)
    assert answers["description"] == "My benchmark"
    assert f"LIBRARY_SOURCE ?= {ROOT}\n" in (outside_runner / "Makefile").read_text()


def test_the_runner_venv_holds_this_projects_library(outside_runner: Path) -> None:
    probe = (
        "import json, importlib.metadata as m, benchmark_runner\n"
        "d = m.distribution('llmbench-runner')\n"
        "try:\n    m.distribution('benchmark-runner'); stranger = True\n"
        "except m.PackageNotFoundError:\n    stranger = False\n"
        "print(json.dumps({'version': d.version, 'file': benchmark_runner.__file__, "
        "'direct_url': json.loads(d.read_text('direct_url.json')), 'stranger': stranger}))"
    )
    proc = sh([str(outside_runner / ".venv/bin/python"), "-c", probe], outside_runner, fresh_env())
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["version"] == our_version()
    assert info["direct_url"]["url"] == ROOT.as_uri()  # installed from this checkout, by path
    assert Path(info["file"]).is_relative_to(outside_runner / ".venv")  # a real install, not the tree
    assert info["stranger"] is False


def test_the_offline_model_ran_end_to_end(outside_runner: Path) -> None:
    """The README's last command: `.venv/bin/mybench-runner run --model oracle --run-id t`."""
    score = json.loads((outside_runner / "runs/t/score.json").read_text())
    assert score["n_tasks"] == 3 and score["metrics"]["correct_rate"] == 1.0
