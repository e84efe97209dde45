"""Render the runner template into a new repo, and bring template changes into an existing one.

Rendering goes through copier so the generated repo records its answers in ``.copier-answers.yml``
and ``copier update`` can later replay template changes with a three-way merge. ``copier update``
needs the template to be a *git* repository whose tags are versions (it re-renders the old version
from ``_commit`` to compute what the author changed). The template ships as plain files inside this
package, so :func:`sync_template_repo` mirrors it into a small local git repository (by default
``~/.cache/benchmark-runner/template``) with one commit per template content, tagged with the
benchmark-runner version (``v0.1.0``; a changed template under an unchanged version gets
``v0.1.0.post1``, ...). Generated repos point ``_src_path`` at that repository, written with ``~`` so
the answers file does not embed one machine's home directory.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..distributions import LIBRARY, RENAMED, is_ours, library_version, normalize, renamed
from ..schemas import StrictModel, describe_validation_error
from . import library_source

#: The copier template shipped inside the package (``copier.yml`` + ``project/``).
TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates"
#: Where the git mirror of the template lives; default ``~/.cache/benchmark-runner/template``.
TEMPLATE_HOME_ENV = "BENCHMARK_RUNNER_TEMPLATE_HOME"
NAME_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
NAME_RULE = (
    f"lowercase letters, digits and single hyphens, starting with a letter and not ending with a hyphen "
    f"(regex {NAME_PATTERN}), e.g. 'kernelbench' or 'my-bench'"
)
PAYLOAD_TYPES = ("text", "code", "json")
ANSWERS_FILE = ".copier-answers.yml"
#: Files the benchmark author owns once generated; ``copier update`` never touches them.
AUTHOR_OWNED = (
    "{pkg}/benchmark.py",
    "{pkg}/service.py",
    "{pkg}/data/sample.jsonl",
    "tests/test_runner.py",
    "README.md",
)
_GIT_ID = ("-c", "user.name=benchmark-runner", "-c", "user.email=benchmark-runner@localhost")


class ScaffoldError(ValueError):
    """Bad input or a destination the scaffolder refuses to write into; nothing was written."""


class RunnerSpec(StrictModel):
    """The answers that define a generated runner; everything else is derived from ``name``."""

    name: str = Field(description="benchmark name; the repo is <name>-runner")
    description: str = ""
    payload_type: str = "text"
    class_name: str = Field(default="", description="prefix of the class names; default: CamelCase of name")
    dependencies: list[str] = Field(default_factory=list, description="extra PEP 508 requirements")
    demo_model: str = Field(default="oracle", description="offline model that `make docker-run` runs")
    library_source: str = Field(
        default="", description="where `make install` gets our packages (see library_source.py)"
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"invalid benchmark name {value!r}: use {NAME_RULE}")
        return value

    @field_validator("payload_type")
    @classmethod
    def _check_payload_type(cls, value: str) -> str:
        if value not in PAYLOAD_TYPES:
            raise ValueError(f"invalid payload type {value!r}: expected one of {', '.join(PAYLOAD_TYPES)}")
        return value

    @field_validator("description")
    @classmethod
    def _check_description(cls, value: str) -> str:
        if "\n" in value or '"""' in value:
            raise ValueError('description must be one line without \'"""\'')
        return value

    @field_validator("class_name")
    @classmethod
    def _check_class_name(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Z][A-Za-z0-9]*", value):
            raise ValueError(
                f"invalid class name {value!r}: expected CamelCase letters and digits starting with an "
                "uppercase letter, e.g. 'KernelBench'"
            )
        return value

    @model_validator(mode="after")
    def _default_class_name(self) -> RunnerSpec:
        if not self.class_name and re.fullmatch(NAME_PATTERN, self.name):
            self.class_name = "".join(part.capitalize() for part in self.name.split("-"))
        return self

    @field_validator("demo_model")
    @classmethod
    def _check_demo_model(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", value):
            raise ValueError(f"invalid demo model {value!r}: expected a model name such as 'oracle'")
        return value

    @field_validator("dependencies")
    @classmethod
    def _check_dependencies(cls, value: list[str]) -> list[str]:
        from packaging.requirements import InvalidRequirement, Requirement

        for dep in value:
            try:
                Requirement(dep)
            except InvalidRequirement as exc:
                raise ValueError(
                    f"invalid dependency {dep!r}: expected a PEP 508 requirement ({exc})"
                ) from None
            if '"' in dep or "\\" in dep:
                raise ValueError(f"invalid dependency {dep!r}: quotes and backslashes are not allowed")
            if normalize(Requirement(dep).name) in RENAMED:
                raise ValueError(
                    f"invalid dependency {dep!r}: that is a former name of ours (on a public index it is "
                    f"anyone's); use {RENAMED[normalize(Requirement(dep).name)]!r}"
                )
        return value

    @classmethod
    def build(
        cls,
        name: str,
        description: str | None = None,
        payload_type: str = "text",
        dependencies: list[str] | tuple[str, ...] = (),
        class_name: str | None = None,
        demo_model: str | None = None,
        library_source: str | None = None,
    ) -> RunnerSpec:
        """Validate the answers, raising :class:`ScaffoldError` that names the bad field.

        ``library_source`` is only checked against the file system by :func:`generate`, which also
        fills in the default (where the running library came from) when it is empty.
        """
        try:
            return cls(
                name=name,
                description=description or f"Runner for the {name} benchmark",
                payload_type=payload_type,
                dependencies=list(dependencies),
                class_name=class_name or "",
                demo_model=demo_model or "oracle",
                library_source=library_source or "",
            )
        except ValidationError as exc:
            raise ScaffoldError(describe_validation_error(exc)) from None

    @property
    def repo_name(self) -> str:
        return f"{self.name}-runner"

    @property
    def package_name(self) -> str:
        return self.name.replace("-", "_") + "_runner"

    @property
    def env_prefix(self) -> str:
        return self.name.replace("-", "_").upper()

    def author_owned(self) -> list[str]:
        return [p.format(pkg=self.package_name) for p in AUTHOR_OWNED]

    def our_dists(self) -> list[str]:
        """The packages of this project the runner installs from its library source."""
        from packaging.requirements import Requirement

        extra = [normalize(Requirement(d).name) for d in self.dependencies if is_ours(Requirement(d).name)]
        return [LIBRARY, *(d for d in dict.fromkeys(extra) if d != LIBRARY)]

    def answers(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "payload_type": self.payload_type,
            "class_name": self.class_name,
            "dependencies": list(self.dependencies),
            "demo_model": self.demo_model,
            "library_source": self.library_source,
        }


@dataclass(frozen=True)
class TemplateRef:
    """A template version copier can check out: ``url`` (as recorded in ``_src_path``) and a tag."""

    url: str
    ref: str
    path: Path


@dataclass
class GenerateResult:
    dest: Path
    files: list[str] = field(default_factory=list)
    template: TemplateRef | None = None
    dry_run: bool = False


def package_version() -> str:
    return library_version()


def template_home() -> Path:
    env = os.environ.get(TEMPLATE_HOME_ENV)
    if env:
        return Path(env).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "benchmark-runner" / "template"


def _display_path(path: Path) -> str:
    """``~/...`` for paths under the home directory, so answers files do not embed a user's home."""
    home = Path.home()
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return path.as_posix()


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *_GIT_ID, *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise ScaffoldError(
            f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout.strip()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise concurrent scaffolder processes updating the same template mirror."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _copy_template(src: Path, dst: Path) -> None:
    for child in dst.iterdir():
        if child.name == ".git":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    shutil.copytree(
        src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git")
    )


def sync_template_repo(
    template_dir: Path = TEMPLATE_DIR, version: str | None = None, home: Path | None = None
) -> TemplateRef:
    """Make the git mirror at ``home`` hold ``template_dir``'s content under a version tag; return it.

    Idempotent and cheap when nothing changed (a few git commands). ``version`` defaults to the
    installed benchmark-runner version.
    """
    version = version or package_version()
    home = (home or template_home()).expanduser().resolve()
    if not (template_dir / "copier.yml").is_file():
        raise ScaffoldError(f"template directory {template_dir} has no copier.yml")
    with _locked(home.parent / f".{home.name}.lock"):
        home.mkdir(parents=True, exist_ok=True)
        if not (home / ".git").is_dir():
            _git(home, "init", "-q", "-b", "main")
        _copy_template(template_dir, home)
        _git(home, "add", "-A")
        has_head = (
            subprocess.run(
                ["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=home, capture_output=True, check=False
            ).returncode
            == 0
        )
        changed = not has_head or bool(_git(home, "status", "--porcelain"))
        if changed:
            _git(home, "commit", "-q", "--no-gpg-sign", "--no-verify", "-m", f"template {version}")
        base = f"v{version}"
        at_head = _git(home, "tag", "--points-at", "HEAD").split()
        mine = [t for t in at_head if t == base or t.startswith(base + ".post")]
        if mine:
            tag = mine[-1]
        else:
            existing = _git(home, "tag", "--list", f"{base}*").split()
            if base not in existing:
                tag = base
            else:
                posts = [
                    int(m.group(1))
                    for t in existing
                    if (m := re.fullmatch(re.escape(base) + r"\.post(\d+)", t))
                ]
                tag = f"{base}.post{max(posts, default=0) + 1}"
            _git(home, "tag", tag)
    return TemplateRef(url=_display_path(home), ref=tag, path=home)


def _is_nonempty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _list_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def render(
    spec: RunnerSpec,
    dest: Path,
    *,
    template: TemplateRef | None = None,
    template_dir: Path = TEMPLATE_DIR,
    overwrite: bool = False,
) -> None:
    """Render the template with ``spec``'s answers into ``dest`` via copier (no checks)."""
    from copier import run_copy  # imported lazily: copier is the slow part of `--help`

    src = template.url if template else str(template_dir)
    run_copy(
        src,
        dest,
        data=spec.answers(),
        vcs_ref=template.ref if template else None,
        defaults=True,
        overwrite=overwrite,
        quiet=True,
    )


def with_library_source(spec: RunnerSpec, dest: Path, cwd: Path | None = None) -> RunnerSpec:
    """``spec`` with its library source checked and recorded as the runner at ``dest`` will see it.

    Empty means the default: where the running library was installed from. A given path is taken
    relative to ``cwd`` (the shell's directory), as any command-line path.
    """
    try:
        if spec.library_source:
            recorded = library_source.record(spec.library_source, dest, spec.our_dists(), cwd)
        else:
            recorded = library_source.default_source(dest, spec.our_dists())
    except library_source.LibrarySourceError as exc:
        raise ScaffoldError(str(exc)) from None
    return spec.model_copy(update={"library_source": recorded})


def generate(
    spec: RunnerSpec,
    dest: Path,
    *,
    force: bool = False,
    dry_run: bool = False,
    template_dir: Path = TEMPLATE_DIR,
    version: str | None = None,
    home: Path | None = None,
    cwd: Path | None = None,
) -> GenerateResult:
    """Generate ``spec``'s runner repo at ``dest``; refuse a non-empty ``dest`` unless ``force``.

    With ``force``, template-owned files are overwritten and existing author-owned files are kept
    (the same rule as ``copier update``). ``dry_run`` renders into a temporary directory and reports
    the files it would write, touching neither ``dest`` nor the template mirror. The library source
    is checked (and defaulted) by :func:`with_library_source`.
    """
    dest = dest.expanduser().absolute()
    if dest.exists() and not dest.is_dir():
        raise ScaffoldError(f"destination {dest} exists and is not a directory")
    if _is_nonempty_dir(dest) and not force:
        raise ScaffoldError(f"destination {dest} is not empty; pass --force to generate into it anyway")
    spec = with_library_source(spec, dest, cwd)
    if dry_run:
        with tempfile.TemporaryDirectory(prefix="benchmark-runner-dry-") as tmp:
            out = Path(tmp) / spec.repo_name
            render(spec, out, template_dir=template_dir)
            return GenerateResult(dest=dest, files=_list_files(out), dry_run=True)
    ref = sync_template_repo(template_dir, version, home)
    before = set(_list_files(dest)) if dest.is_dir() else set()
    render(spec, dest, template=ref, overwrite=force)
    if before:  # --force: report what the template wrote, not the author's files that were kept
        with tempfile.TemporaryDirectory(prefix="benchmark-runner-list-") as tmp:
            render(spec, Path(tmp) / spec.repo_name, template_dir=template_dir)
            rendered = set(_list_files(Path(tmp) / spec.repo_name))
        kept = set(spec.author_owned()) & before
        files = sorted((rendered - kept) & set(_list_files(dest)))
    else:
        files = _list_files(dest)
    return GenerateResult(dest=dest, files=files, template=ref)


def read_answers(repo: Path) -> dict[str, Any]:
    """The copier answers recorded in a generated repo (``_src_path``/``_commit`` included)."""
    import yaml

    path = repo / ANSWERS_FILE
    if not path.is_file():
        raise ScaffoldError(f"{repo} has no {ANSWERS_FILE}: it was not generated by create-benchmark-runner")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ScaffoldError(f"{path}: expected a mapping of answers")
    return {str(k): v for k, v in data.items()}


def spec_from_answers(answers: dict[str, Any]) -> RunnerSpec:
    deps = answers.get("dependencies") or []
    if not isinstance(deps, list):
        raise ScaffoldError(f"dependencies in {ANSWERS_FILE}: expected a list of requirements, got {deps!r}")
    return RunnerSpec.build(
        str(answers.get("name", "")),
        answers.get("description"),
        str(answers.get("payload_type", "text")),
        [str(d) for d in deps],
        str(answers["class_name"]) if answers.get("class_name") else None,
        str(answers["demo_model"]) if answers.get("demo_model") else None,
        str(answers.get("library_source") or ""),
    )


def update(
    repo: Path,
    *,
    template_dir: Path = TEMPLATE_DIR,
    version: str | None = None,
    home: Path | None = None,
    conflict: Literal["inline", "rej"] = "inline",
    new_library_source: str | None = None,
    cwd: Path | None = None,
) -> TemplateRef:
    """``copier update`` ``repo`` to the installed template version, keeping author-owned files.

    The repo must be a clean git work tree (copier computes the author's changes from git).
    Conflicting hunks are left inline (``<<<<<<<``) for the author to resolve. The recorded library
    source is kept; ``new_library_source`` replaces it, and a repo generated before sources were
    recorded gets the default (where the running library came from).
    """
    from copier import run_update

    repo = repo.expanduser().absolute()
    answers = read_answers(repo)
    data: dict[str, Any] = {}
    deps = [str(d) for d in answers.get("dependencies") or []]
    if [renamed(d) for d in deps] != deps:  # a runner of the time before our own names
        answers["dependencies"] = data["dependencies"] = [renamed(d) for d in deps]
    if new_library_source or not answers.get("library_source"):
        spec = spec_from_answers(answers).model_copy(update={"library_source": new_library_source or ""})
        data["library_source"] = with_library_source(spec, repo, cwd).library_source
    recorded = str(answers.get("_src_path", ""))
    if home is None and recorded and not re.match(r"^[a-z+]+://|^[\w.-]+@|^g[hl]:", recorded):
        home = Path(recorded).expanduser()  # keep updating the mirror the repo was generated from
    ref = sync_template_repo(template_dir, version, home)
    old = str(answers.get("_commit", ""))
    known = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", f"{old}^{{commit}}"],
        cwd=ref.path,
        capture_output=True,
        check=False,
    )
    if not old or known.returncode != 0:
        raise ScaffoldError(
            f"cannot update {repo}: its template version {old or '(none)'} is not in the template mirror "
            f"{ref.path}; install the benchmark-runner version that generated it once and run "
            f"create-benchmark-runner (which records that version), then update again"
        )
    try:
        run_update(
            repo,
            data=data,
            vcs_ref=ref.ref,
            defaults=True,
            overwrite=True,
            quiet=True,
            conflict=conflict,
            skip_answered=True,
        )
    except Exception as exc:  # copier's UserMessageError etc.: re-raise with the repo named
        if type(exc).__name__ in {"UserMessageError", "CopierAnswersInterrupt"}:
            raise ScaffoldError(f"cannot update {repo}: {exc}") from exc
        raise
    return ref


def template_drift(repo: Path, template_dir: Path = TEMPLATE_DIR) -> list[str]:
    """Template-owned files of ``repo`` that differ from a fresh render of its answers (or are missing).

    Author-owned files and the answers file are not compared; files the author added are ignored.
    An empty list means the repo's plumbing is exactly what the template produces today.
    """
    spec = spec_from_answers(read_answers(repo))
    owned = set(spec.author_owned()) | {ANSWERS_FILE}
    with tempfile.TemporaryDirectory(prefix="benchmark-runner-drift-") as tmp:
        fresh = Path(tmp) / spec.repo_name
        render(spec, fresh, template_dir=template_dir)
        drifted = []
        for rel in _list_files(fresh):
            if rel in owned:
                continue
            mine = repo / rel
            if not mine.is_file():
                drifted.append(f"{rel} (missing)")
            elif mine.read_bytes() != (fresh / rel).read_bytes():
                drifted.append(f"{rel} (differs)")
    return drifted
