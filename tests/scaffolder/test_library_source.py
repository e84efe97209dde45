"""The library source of a generated runner: recorded in its answers, used by its Makefile, kept on update.

A runner's dependency on this project's library must never be resolved by name from a package index.
The answers file records where the library comes from (a checkout, a git URL, a wheel directory), and
the runner's ``make install`` / ``make docker-context`` pass pip that source, never a bare name. The
real install from a checkout runs in tests/docker/test_runner_outside_checkout.py; here ``make -n``
shows what the Makefile would run for each kind of source, and bad sources are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from benchmark_runner.scaffolder import TEMPLATE_DIR, RunnerSpec, ScaffoldError, generate, update
from benchmark_runner.scaffolder.generator import TEMPLATE_HOME_ENV
from benchmark_runner.scaffolder.library_source import LibrarySourceError, installed_source
from benchmark_runner.scaffolder.main import cli

ROOT = Path(__file__).resolve().parents[2]
GIT_URL = "git+https://example.invalid/benchmark-runner.git@v0.2.0"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "template-home"
    monkeypatch.setenv(TEMPLATE_HOME_ENV, str(path))
    return path


def fake_checkout(path: Path, name: str = "llmbench-runner") -> Path:
    """A directory shaped like a checkout of this project (the scaffolder reads only pyproject files)."""
    (path / "services/kernel-service").mkdir(parents=True)
    (path / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0.2.0"\n')
    (path / "services/kernel-service/pyproject.toml").write_text(
        '[project]\nname = "llmbench-kernel-service"\n'
    )
    return path


def fake_wheels(path: Path, *names: str) -> Path:
    path.mkdir(parents=True)
    for name in names:
        (path / f"{name}-0.2.0-py3-none-any.whl").write_bytes(b"")
    return path


def answers(repo: Path) -> dict:
    return yaml.safe_load((repo / ".copier-answers.yml").read_text())


def pip_install_line(repo: Path, *make_args: str) -> str:
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "install", *make_args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return next(ln for ln in out.stdout.splitlines() if "pip install" in ln)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


KERNEL = ["--dependency", "llmbench-kernel-service", "--dependency", "torch>=2.4"]


@pytest.mark.parametrize(
    ("kind", "kernel"),
    [("checkout", False), ("checkout", True), ("git", False), ("git", True), ("wheels", True)],
)
def test_the_answers_name_the_source_and_make_install_uses_it(
    tmp_path: Path, kind: str, kernel: bool
) -> None:
    if kind == "checkout":
        source = str(fake_checkout(tmp_path / "checkout"))
    elif kind == "git":
        source = GIT_URL
    else:
        source = str(fake_wheels(tmp_path / "wheels", "llmbench_runner", "llmbench_kernel_service"))
    repo = tmp_path / "kb-runner"
    code, out = invoke(
        "kb", "--dest", str(repo), "--defaults", "--library-source", source, *(KERNEL if kernel else [])
    )
    assert code == 0, out
    assert answers(repo)["library_source"] == source
    line = pip_install_line(repo)
    assert line.endswith(' -e ".[dev]"')
    expected = {
        ("checkout", False): f"{source}",
        ("checkout", True): f"{source} {source}/services/kernel-service",
        ("git", False): f'"llmbench-runner @ {GIT_URL}"',
        ("git", True): f'"llmbench-runner @ {GIT_URL}" '
        f'"llmbench-kernel-service @ {GIT_URL}#subdirectory=services/kernel-service"',
        ("wheels", True): f"{source}/llmbench_runner-0.2.0-py3-none-any.whl "
        f"{source}/llmbench_kernel_service-0.2.0-py3-none-any.whl",
    }[(kind, kernel)]
    assert line == f'.venv/bin/python -m pip install -q {expected} -e ".[dev]"'


def test_a_runner_inside_the_checkout_records_it_relative(tmp_path: Path) -> None:
    checkout = fake_checkout(tmp_path / "checkout")
    repo = checkout / "runners" / "kb-runner"
    spec = RunnerSpec.build("kb", dependencies=["llmbench-kernel-service"], library_source=str(checkout))
    generate(spec, repo)
    assert answers(repo)["library_source"] == "../.."  # valid wherever the checkout moves
    assert (
        pip_install_line(repo)
        == '.venv/bin/python -m pip install -q ../.. ../../services/kernel-service -e ".[dev]"'
    )


def test_a_relative_path_is_taken_from_the_shell_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_checkout(tmp_path / "src" / "br")
    monkeypatch.chdir(tmp_path / "src")
    code, out = invoke(
        "kb", "--dest", str(tmp_path / "out" / "kb-runner"), "--defaults", "--library-source", "br"
    )
    assert code == 0, out
    assert answers(tmp_path / "out" / "kb-runner")["library_source"] == str(tmp_path / "src" / "br")


def test_the_committed_runners_install_from_this_checkout() -> None:
    for runner in ("kernelbench", "backendbench"):
        repo = ROOT / "runners" / f"{runner}-runner"
        assert answers(repo)["library_source"] == "../.."
        line = pip_install_line(repo)
        assert line == '.venv/bin/python -m pip install -q ../.. ../../services/kernel-service -e ".[dev]"'


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "is not a directory"),
        ("stranger", "is the project 'benchmark-runner', not a checkout of benchmark-runner"),
        ("empty", "has no llmbench_runner-*.whl wheel"),
        ("no-service-wheel", "has no llmbench_kernel_service-*.whl wheel"),
        ("two-versions", "has 2 (llmbench_runner-0.1.0"),
        ("https", "a git URL starts with git+"),
    ],
)
def test_a_source_that_is_not_ours_is_refused_and_nothing_is_written(
    tmp_path: Path, home: Path, setup: str, message: str
) -> None:
    source = {
        "missing": lambda: str(tmp_path / "nowhere"),
        "stranger": lambda: str(fake_checkout(tmp_path / "c", name="benchmark-runner")),
        "empty": lambda: str(fake_wheels(tmp_path / "w")),
        "no-service-wheel": lambda: str(fake_wheels(tmp_path / "w", "llmbench_runner")),
        "two-versions": lambda: str(
            fake_wheels(tmp_path / "w", "llmbench_runner", "llmbench_kernel_service")
        ),
        "https": lambda: "https://example.invalid/benchmark-runner.git",
    }[setup]()
    if setup == "two-versions":
        (Path(source) / "llmbench_runner-0.1.0-py3-none-any.whl").write_bytes(b"")
    dest = tmp_path / "kb-runner"
    code, out = invoke("kb", "--dest", str(dest), "--defaults", "--library-source", source, *KERNEL)
    assert code != 0
    assert message in out, out
    assert not dest.exists() and not home.exists()


def test_make_refuses_a_wheel_directory_that_lost_its_wheel(tmp_path: Path) -> None:
    wheels = fake_wheels(tmp_path / "w", "llmbench_runner")
    repo = tmp_path / "r"
    generate(RunnerSpec.build("r", library_source=str(wheels)), repo)
    (wheels / "llmbench_runner-0.2.0-py3-none-any.whl").unlink()
    for target in ("install", "docker-context"):
        out = subprocess.run(["make", "-n", target], cwd=repo, capture_output=True, text=True, check=False)
        assert out.returncode != 0 and "no directory with one llmbench-runner wheel" in out.stderr
        assert "pip install" not in out.stdout  # never falls back to a bare name


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", *args], cwd=repo, capture_output=True, env=env, check=True)


def commit_all(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "c")


def test_update_keeps_the_source_or_replaces_it_when_asked(tmp_path: Path) -> None:
    checkout = fake_checkout(tmp_path / "checkout")
    repo = tmp_path / "r"
    generate(RunnerSpec.build("r", library_source=str(checkout)), repo)
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo)
    update(repo)
    assert answers(repo)["library_source"] == str(checkout)

    code, out = invoke("--update", str(repo), "--library-source", GIT_URL)
    assert code == 0, out
    assert answers(repo)["library_source"] == GIT_URL
    assert f"LIBRARY_SOURCE ?= {GIT_URL}\n" in (repo / "Makefile").read_text()


def test_update_gives_an_older_runner_the_default_source(tmp_path: Path) -> None:
    """A runner of a template that had neither library sources nor our own names: the update records
    where the running library came from and renames `kernel-service` (anyone's name on an index)."""
    old = tmp_path / "template-0.1.0"
    shutil.copytree(TEMPLATE_DIR, old)
    copier_yml = (old / "copier.yml").read_text()
    start = copier_yml.index("library_source:")
    (old / "copier.yml").write_text(copier_yml[:start] + copier_yml[copier_yml.index("demo_model:") :])
    makefile = old / "project/Makefile.jinja"
    makefile.write_text(makefile.read_text().replace("{{ library_source }}", "unknown"))
    old_pyproject = old / "project/pyproject.toml.jinja"
    old_pyproject.write_text(
        old_pyproject.read_text().replace('"llmbench-runner>=0.1"', '"benchmark-runner>=0.1"')
    )
    repo = tmp_path / "r"
    spec = RunnerSpec.build("r", library_source=str(fake_checkout(tmp_path / "c")))
    old_spec = spec.model_copy(update={"dependencies": ["kernel-service", "torch>=2.4"]})  # refused today
    generate(old_spec, repo, template_dir=old, version="0.1.0")
    assert "library_source" not in answers(repo)
    assert '"benchmark-runner>=0.1",\n  "kernel-service",' in (repo / "pyproject.toml").read_text()
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo)
    update(repo, version="0.2.0")
    assert answers(repo)["library_source"] == installed_source() == str(ROOT)
    assert answers(repo)["dependencies"] == ["llmbench-kernel-service", "torch>=2.4"]
    assert '"llmbench-runner>=0.1",\n  "llmbench-kernel-service",' in (repo / "pyproject.toml").read_text()
    makefile_text = (repo / "Makefile").read_text()
    assert f"LIBRARY_SOURCE ?= {ROOT}\n" in makefile_text and "LIB_SERVICE" in makefile_text


def test_a_former_name_of_ours_is_refused_as_a_dependency(tmp_path: Path) -> None:
    code, out = invoke(
        "kb", "--dest", str(tmp_path / "kb"), "--defaults", "--dependency", "kernel-service>=0.1"
    )
    assert code != 0 and "use 'llmbench-kernel-service'" in out


# ---- the default: where the running library came from (PEP 610 direct_url.json) --------------------


def fake_dist(tmp_path: Path, direct_url: dict | None) -> metadata.Distribution:
    info = tmp_path / "llmbench_runner-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llmbench-runner\nVersion: 0.2.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(info)


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        ({"url": "file:///src/benchmark-runner", "dir_info": {"editable": True}}, "/src/benchmark-runner"),
        ({"url": "file:///src/benchmark-runner", "dir_info": {}}, "/src/benchmark-runner"),
        (
            {"url": "https://example.invalid/br.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
            "git+https://example.invalid/br.git@abc123",
        ),
        (
            {"url": "file:///wheels/llmbench_runner-0.2.0-py3-none-any.whl", "archive_info": {}},
            "/wheels",
        ),
    ],
)
def test_the_default_source_is_where_the_library_was_installed_from(
    tmp_path: Path, direct_url: dict, expected: str
) -> None:
    assert installed_source(fake_dist(tmp_path, direct_url)) == expected


@pytest.mark.parametrize(
    "direct_url",
    [
        None,  # installed from an index: no direct_url.json
        {"url": "https://example.invalid/llmbench_runner-0.2.0.tar.gz", "archive_info": {}},
        {"url": "https://example.invalid/br", "vcs_info": {"vcs": "hg", "commit_id": "abc"}},
    ],
)
def test_an_unknown_origin_asks_for_library_source(tmp_path: Path, direct_url: dict | None) -> None:
    with pytest.raises(LibrarySourceError, match="--library-source"):
        installed_source(fake_dist(tmp_path, direct_url))


def test_this_checkout_is_the_default_here() -> None:
    """The library under test is installed editable from this checkout (`make install`)."""
    assert installed_source() == str(ROOT)
    with pytest.raises(ScaffoldError, match="--library-source"):
        generate(RunnerSpec.build("r", library_source="/nonexistent/place"), ROOT / "never-written")
    assert not (ROOT / "never-written").exists()


# ---- the Makefile's pip arguments, given to pip for real -------------------------------------------


def tiny_project(path: Path, name: str) -> None:
    """A buildable project called ``name`` (one empty module), standing in for one of ours."""
    module = name.replace("-", "_") + "_stub"
    (path / "src" / module).mkdir(parents=True)
    (path / "src" / module / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "0.2.0"\ndependencies = ["click"]\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )


def test_git_and_wheel_sources_build_the_docker_context(tmp_path: Path) -> None:
    """`make docker-context` passes the git+ source (with #subdirectory for the service) to pip, which
    builds both wheels from that commit; a wheel directory then serves as the source of another runner."""
    upstream = tmp_path / "upstream"
    tiny_project(upstream, "llmbench-runner")
    tiny_project(upstream / "services/kernel-service", "llmbench-kernel-service")
    git(upstream, "init", "-q", "-b", "main")
    commit_all(upstream)
    url = f"git+{upstream.as_uri()}@main"
    spec = RunnerSpec.build("kb", dependencies=["llmbench-kernel-service"], library_source=url)
    repo = generate(spec, tmp_path / "kb-runner").dest
    venv = sys.prefix  # any venv with this library: the runner's own, after its `make install`
    proc = subprocess.run(
        ["make", "docker-context", f"VENV={venv}"], cwd=repo, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = sorted(p.name for p in (repo / "build/docker/wheels").iterdir())
    assert wheels == [
        "llmbench_kernel_service-0.2.0-py3-none-any.whl",
        "llmbench_runner-0.2.0-py3-none-any.whl",
    ]
    # the stubs' dependency and the runner's build backend; nothing of ours
    assert (repo / "build/docker/requirements.txt").read_text() == "click\nsetuptools>=68\nwheel\n"

    other = generate(
        RunnerSpec.build(
            "kc", dependencies=["llmbench-kernel-service"], library_source=str(repo / "build/docker/wheels")
        ),
        tmp_path / "kc-runner",
    ).dest
    proc = subprocess.run(
        ["make", "docker-context", f"VENV={venv}"], cwd=other, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (other / "build/docker/wheels").iterdir()) == wheels
