"""create-benchmark-runner: generation, validation, dry-run, --force, copier update, Makefile/Dockerfile.

Everything runs for real: copier renders the packaged template, git holds the template mirror and
the generated repos, ruff checks the generated code, make expands the Makefile. The end-to-end
install of a generated repo lives in tests/scaffolder/test_generated_repo.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from benchmark_runner.scaffolder import TEMPLATE_DIR, RunnerSpec, ScaffoldError, generate, update
from benchmark_runner.scaffolder.generator import TEMPLATE_HOME_ENV, sync_template_repo
from benchmark_runner.scaffolder.main import cli

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
EXPECTED_FILES = {
    ".copier-answers.yml",
    ".dockerignore",
    ".gitignore",
    "Dockerfile",
    "Makefile",
    "README.md",
    "pyproject.toml",
    "my_bench_runner/__init__.py",
    "my_bench_runner/benchmark.py",
    "my_bench_runner/cli.py",
    "my_bench_runner/service.py",
    "my_bench_runner/data/sample.jsonl",
    "tests/test_runner.py",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private template mirror per test, so tests never touch ~/.cache or each other."""
    path = tmp_path / "template-home"
    monkeypatch.setenv(TEMPLATE_HOME_ENV, str(path))
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, check=True)
    return out.stdout


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message)


# ---- generation ------------------------------------------------------------------------------


def test_generates_the_documented_layout(home: Path, tmp_path: Path) -> None:
    dest = tmp_path / "my-bench-runner"
    code, out = invoke("my-bench", "--dest", str(dest), "--defaults", "--description", "Adds numbers")
    assert code == 0, out
    assert files_under(dest) == EXPECTED_FILES
    assert "Wrote 13 files" in out

    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert answers["name"] == "my-bench"
    assert answers["description"] == "Adds numbers"
    assert answers["payload_type"] == "text"
    assert answers["_commit"].startswith("v")
    assert Path(answers["_src_path"]).expanduser().resolve() == home.resolve()

    pyproject = (dest / "pyproject.toml").read_text()
    assert 'my-bench-runner = "my_bench_runner.cli:main"' in pyproject
    assert '"llmbench-runner>=' in pyproject and "benchmark-runner" not in pyproject
    # the default library source: the checkout the running library was installed from (editable here)
    assert answers["library_source"] == str(ROOT)
    assert 'my_bench_runner = ["data/*"]' in pyproject
    bench = (dest / "my_bench_runner/benchmark.py").read_text()
    assert "class MyBenchRunner(BenchmarkRunner):" in bench
    assert 'GENERATION_VERSION_ENV: ClassVar[str] = "MY_BENCH_GENERATION_VERSION"' in bench
    assert '"oracle": oracle' in bench
    cli_py = (dest / "my_bench_runner/cli.py").read_text()
    assert "make_cli(MyBenchRunner, default_dataset_file=DEFAULT_DATASET_FILE)" in cli_py


def test_default_dest_is_name_runner_in_cwd(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = invoke("kernelbench", "--defaults")
    assert code == 0, out
    assert (tmp_path / "kernelbench-runner/kernelbench_runner/benchmark.py").is_file()
    assert (
        "class KernelbenchRunner"
        in (tmp_path / "kernelbench-runner/kernelbench_runner/benchmark.py").read_text()
    )


@pytest.mark.parametrize("payload_type", ["text", "code", "json"])
def test_generated_code_compiles_and_passes_ruff(home: Path, tmp_path: Path, payload_type: str) -> None:
    """The root `make lint` covers runners/*, so generated code must be ruff-clean as generated."""
    dest = tmp_path / "r"
    spec = RunnerSpec.build("x-bench2", "A benchmark", payload_type)
    generate(spec, dest)
    for py in dest.rglob("*.py"):
        compile(py.read_text(), str(py), "exec")
    assert (
        f'PAYLOAD_TYPE: ClassVar[str] = "{payload_type}"'
        in (dest / "x_bench2_runner/benchmark.py").read_text()
    )
    for args in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run([str(BIN / "ruff"), *args], cwd=dest, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "bad", ["1bench", "My-Bench", "my_bench", "my--bench", "bench-", "-bench", "my bench", "bé"]
)
def test_bad_name_is_refused_naming_the_rule_and_writes_nothing(home: Path, tmp_path: Path, bad: str) -> None:
    dest = tmp_path / "out"
    code, out = invoke("--dest", str(dest), "--defaults", "--", bad)  # `--`: "-bench" is no option
    assert code != 0
    assert f"invalid benchmark name {bad!r}" in out
    assert "lowercase letters, digits and single hyphens, starting with a letter" in out
    assert not dest.exists()
    assert not home.exists()


def test_missing_name_is_an_error(home: Path) -> None:
    code, out = invoke("--defaults")
    assert code != 0
    assert "missing NAME" in out


def test_bad_payload_type_and_description(home: Path, tmp_path: Path) -> None:
    code, out = invoke("ok", "--dest", str(tmp_path / "o"), "--payload-type", "xml")
    assert code != 0 and "'xml' is not one of" in out
    with pytest.raises(ScaffoldError, match="description"):
        RunnerSpec.build("ok", "two\nlines")
    assert not (tmp_path / "o").exists()


def test_dry_run_lists_files_and_writes_nothing(home: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dry"
    code, out = invoke("my-bench", "--dest", str(dest), "--dry-run", "--defaults")
    assert code == 0, out
    assert "Would write 13 files" in out
    listed = {line.strip() for line in out.splitlines() if line.startswith("  ")}
    assert listed == EXPECTED_FILES
    assert not dest.exists()
    assert not home.exists()  # not even the template mirror


def test_non_empty_dest_is_refused_and_untouched(home: Path, tmp_path: Path) -> None:
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    code, out = invoke("my-bench", "--dest", str(dest), "--defaults")
    assert code != 0
    assert "is not empty; pass --force" in out
    assert files_under(dest) == {"notes.txt"}
    # a dry run refuses too: it would fail the same way for real
    code, out = invoke("my-bench", "--dest", str(dest), "--defaults", "--dry-run")
    assert code != 0 and "is not empty" in out


def test_force_overwrites_template_files_and_keeps_author_files(home: Path, tmp_path: Path) -> None:
    dest = tmp_path / "my-bench-runner"
    assert invoke("my-bench", "--dest", str(dest), "--defaults")[0] == 0
    (dest / "Makefile").write_text("stale\n")
    bench = dest / "my_bench_runner/benchmark.py"
    bench.write_text(bench.read_text() + "\nAUTHOR_EDIT = 1\n")
    (dest / "notes.txt").write_text("mine")
    code, out = invoke("my-bench", "--dest", str(dest), "--defaults", "--force")
    assert code == 0, out
    listed = {line.strip() for line in out.splitlines() if line.startswith("  ")}
    assert "Makefile" in listed and "my_bench_runner/cli.py" in listed
    assert "my_bench_runner/benchmark.py" not in listed and "notes.txt" not in listed  # kept, not written
    assert "docker-build:" in (dest / "Makefile").read_text()
    assert "AUTHOR_EDIT = 1" in bench.read_text()
    assert (dest / "notes.txt").read_text() == "mine"


def test_extra_dependencies_and_class_name_reach_the_repo_and_answers(home: Path, tmp_path: Path) -> None:
    import tomllib

    dest = tmp_path / "k"
    code, out = invoke(
        "kb",
        "--dest",
        str(dest),
        "--defaults",
        "--dependency",
        "llmbench-kernel-service",
        "--dependency",
        "torch>=2.4",
        "--class-name",
        "KernelBench",
        "--demo-model",
        "reference",
    )
    assert code == 0, out
    project = tomllib.loads((dest / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == ["llmbench-runner>=0.1", "llmbench-kernel-service", "torch>=2.4"]
    assert project["scripts"] == {"kb-runner": "kb_runner.cli:main"}
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert answers["dependencies"] == ["llmbench-kernel-service", "torch>=2.4"]
    assert answers["class_name"] == "KernelBench" and answers["demo_model"] == "reference"
    assert "ARGS   ?= run --model reference --run-id docker-demo" in (dest / "Makefile").read_text()
    assert "make_cli(KernelBenchRunner," in (dest / "kb_runner/cli.py").read_text()
    assert "class KernelBenchRunner(BenchmarkRunner):" in (dest / "kb_runner/benchmark.py").read_text()

    code, out = invoke("kb", "--dest", str(tmp_path / "bad"), "--defaults", "--dependency", "torch>>2")
    assert code != 0 and "invalid dependency 'torch>>2'" in out
    code, out = invoke("kb", "--dest", str(tmp_path / "bad"), "--defaults", "--class-name", "kernel_bench")
    assert code != 0 and "invalid class name 'kernel_bench'" in out
    code, out = invoke("kb", "--dest", str(tmp_path / "bad"), "--defaults", "--demo-model", "a b")
    assert code != 0 and "invalid demo model 'a b'" in out
    assert not (tmp_path / "bad").exists()


# ---- template mirror and copier update ----------------------------------------------------------


def test_template_mirror_tags_versions_and_is_idempotent(tmp_path: Path) -> None:
    home = tmp_path / "mirror"
    first = sync_template_repo(TEMPLATE_DIR, "1.2.3", home)
    assert first.ref == "v1.2.3"
    assert sync_template_repo(TEMPLATE_DIR, "1.2.3", home).ref == "v1.2.3"  # unchanged: same tag
    changed = tmp_path / "tpl"
    shutil.copytree(TEMPLATE_DIR, changed)
    (changed / "project/NEW.md").write_text("new\n")
    assert sync_template_repo(changed, "1.2.3", home).ref == "v1.2.3.post1"  # same version, new content
    assert sync_template_repo(changed, "1.3.0", home).ref == "v1.3.0"
    assert set(git(home, "tag").split()) == {"v1.2.3", "v1.2.3.post1", "v1.3.0"}


def test_copier_update_brings_template_changes_and_keeps_author_edits(home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "my-bench-runner"
    generate(RunnerSpec.build("my-bench"), repo, version="0.1.0")
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "generated")
    bench = repo / "my_bench_runner/benchmark.py"
    bench.write_text(bench.read_text().replace("Reply with the final answer only", "AUTHOR PROMPT"))
    commit_all(repo, "author edit")

    # a newer template: a new Makefile target (template-owned) and a changed benchmark.py (author-owned)
    newer = tmp_path / "template-0.2.0"
    shutil.copytree(TEMPLATE_DIR, newer)
    makefile = newer / "project/Makefile.jinja"
    makefile.write_text(makefile.read_text() + "\nhello:\n\t@echo hello from template 0.2.0\n")
    tpl_bench = newer / "project/{{ package_name }}/benchmark.py.jinja"
    tpl_bench.write_text(tpl_bench.read_text() + "\nTEMPLATE_ONLY = 1\n")

    ref = update(repo, template_dir=newer, version="0.2.0")
    assert ref.ref == "v0.2.0"
    assert "hello from template 0.2.0" in (repo / "Makefile").read_text()
    text = bench.read_text()
    assert "AUTHOR PROMPT" in text
    assert "TEMPLATE_ONLY" not in text
    assert yaml.safe_load((repo / ".copier-answers.yml").read_text())["_commit"] == "v0.2.0"
    assert "<<<<<<<" not in (repo / "Makefile").read_text()


def test_update_cli_on_a_clean_repo_and_on_a_repo_not_generated(home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "my-bench-runner"
    assert invoke("my-bench", "--dest", str(repo), "--defaults")[0] == 0
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "generated")
    code, out = invoke("--update", str(repo))
    assert code == 0, out
    assert "Updated" in out
    assert git(repo, "status", "--porcelain") == ""  # same template version: nothing changes

    plain = tmp_path / "plain"
    plain.mkdir()
    code, out = invoke("--update", str(plain))
    assert code != 0 and "has no .copier-answers.yml" in out


def test_update_refuses_a_dirty_repo(home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "r"
    generate(RunnerSpec.build("my-bench"), repo)
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "generated")
    (repo / "Makefile").write_text("dirty\n")
    with pytest.raises(ScaffoldError, match="dirty"):
        update(repo)


# ---- Makefile and Dockerfile -------------------------------------------------------------------


@pytest.fixture
def generated(home: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "my-bench-runner"
    generate(RunnerSpec.build("my-bench"), dest)
    return dest


def make_n(repo: Path, *args: str) -> str:
    """What ``make -n ARGS`` would run in ``repo`` (nothing is run)."""
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return out.stdout


def test_make_docker_build_builds_the_context_then_the_image(generated: Path) -> None:
    lines = make_n(generated, "docker-build").strip().splitlines()
    assert lines[-1].split() == "docker build -t my-bench-runner:latest .".split()
    extra = make_n(generated, "docker-build", "DOCKER_BUILD_ARGS=--pull=never --network=host").strip()
    assert extra.splitlines()[-1] == "docker build --pull=never --network=host -t my-bench-runner:latest ."
    context = next(ln for ln in lines if "benchmark_runner.docker_context" in ln)
    # the context gets our package from the recorded source (the checkout), never by name
    assert (
        context
        == f".venv/bin/python -m benchmark_runner.docker_context --project . --out build/docker -- {ROOT}"
    )
    out = make_n(generated, "docker-run", "ARGS=run --model echo --run-id d")
    run = out.strip().splitlines()[-1]
    assert run.startswith('docker run --rm --user "$(id -u):$(id -g)"')
    assert run.endswith("my-bench-runner:latest run --model echo --run-id d")
    for target in ("install", "test", "lint", "typecheck"):
        make_n(generated, target)


@pytest.mark.parametrize("runner", ["kernelbench", "backendbench"])
def test_kernel_runners_docker_run_defaults_to_an_offline_model_they_have(runner: str) -> None:
    """`make docker-run` with no ARGS runs the runner's `demo_model` answer, one of its offline models."""
    repo = Path(__file__).resolve().parents[1] / "runners" / f"{runner}-runner"
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "docker-run"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.rstrip().endswith(f"{runner}-runner:latest run --model reference --run-id docker-demo")


def dockerfile_instructions(path: Path) -> list[str]:
    text = re.sub(r"\\\n\s*", " ", path.read_text())  # join continuation lines
    return [ln.strip() for ln in text.splitlines() if re.match(r"^[A-Z]+\s", ln)]


def test_dockerfile_runs_as_non_root_with_the_runner_entrypoint(generated: Path) -> None:
    instructions = dockerfile_instructions(generated / "Dockerfile")
    assert re.fullmatch(r"FROM python:3\.\d+-slim", instructions[0])
    users = [ln.split()[1] for ln in instructions if ln.startswith("USER ")]
    assert users and users[-1] not in {"root", "0"}
    assert instructions[-2] == 'ENTRYPOINT ["my-bench-runner"]'
    # the public dependencies come from the requirements alone, before our wheels and the sources
    index = {ln: i for i, ln in enumerate(instructions)}
    public = index["RUN pip install -r build/docker/requirements.txt"]
    ours = index["RUN pip install --no-index --no-deps build/docker/wheels/*.whl"]
    sources = index["COPY my_bench_runner ./my_bench_runner"]
    assert index["COPY build/docker/requirements.txt build/docker/"] < public < ours < sources
    # no pip command in the image may name a package of ours: only wheel files, --no-index
    for ln in instructions:
        assert "llmbench" not in ln and "benchmark-runner" not in ln, ln
    ignored = (generated / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored and "!build/docker" in ignored
