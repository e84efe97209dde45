"""The committed runners (runners/*-runner) have not drifted from the scaffolder template.

Each runner's `.copier-answers.yml` is re-rendered with today's template into a temp dir and every
template-owned file (everything but benchmark.py, service.py, data/sample.jsonl, tests/test_runner.py,
README.md and the answers file) must be byte-identical to the committed one. A failure means either
someone hand-edited plumbing in a runner (move the change into the template) or the template changed
without the runners being updated (`create-benchmark-runner --update runners/<name>-runner`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmark_runner.scaffolder import TEMPLATE_DIR, RunnerSpec, generate, template_drift
from benchmark_runner.scaffolder.generator import TEMPLATE_HOME_ENV

RUNNERS = sorted(
    p.parent for p in (Path(__file__).resolve().parents[1] / "runners").glob("*-runner/.copier-answers.yml")
)


@pytest.mark.parametrize("runner", RUNNERS, ids=[r.name for r in RUNNERS])
def test_runner_template_owned_files_match_the_template(runner: Path) -> None:
    drifted = template_drift(runner)
    assert drifted == [], f"{runner.name}: template-owned files drifted from the template: {drifted}"


def test_drift_check_sees_edited_plumbing_and_ignores_author_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: plumbing edits and template changes are reported, author edits are not."""
    monkeypatch.setenv(TEMPLATE_HOME_ENV, str(tmp_path / "mirror"))
    repo = tmp_path / "demo-runner"
    generate(RunnerSpec.build("demo", payload_type="code", dependencies=["torch>=2.4"]), repo)
    assert template_drift(repo) == []

    bench = repo / "demo_runner/benchmark.py"
    bench.write_text(bench.read_text() + "\nAUTHOR = 1\n")
    (repo / "demo_runner/extra.py").write_text("X = 1\n")
    assert template_drift(repo) == []

    (repo / "Makefile").write_text((repo / "Makefile").read_text() + "\nlocal:\n\ttrue\n")
    (repo / ".dockerignore").unlink()
    assert sorted(template_drift(repo)) == [".dockerignore (missing)", "Makefile (differs)"]

    newer = tmp_path / "template"
    shutil.copytree(TEMPLATE_DIR, newer)
    dockerfile = newer / "project/Dockerfile.jinja"
    dockerfile.write_text(dockerfile.read_text() + "# changed\n")
    (repo / "Makefile").write_text("")
    assert "Dockerfile (differs)" in template_drift(repo, newer)
