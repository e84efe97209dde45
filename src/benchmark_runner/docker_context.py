"""Fill a Docker build context with this project's packages as wheels and their public requirements.

``python -m benchmark_runner.docker_context --out build/docker [--project .] -- SOURCE...`` (what
``make docker-build`` runs): each SOURCE is a pip argument that names where one of our packages comes
from (a checkout directory, ``NAME @ git+URL``, a wheel file), never a bare name. It writes:

* ``wheels/``: one wheel per package of ours, built here (``pip wheel --no-deps``), so the image
  installs them with ``--no-index``: a package index is never asked for a name of ours;
* ``requirements.txt``: every *public* requirement, those of the wheels plus the project's own
  ``[project] dependencies`` and its build backend (``[build-system] requires``: the image installs
  the project offline, without build isolation), with our names taken out, so the image's dependency
  layer depends on this file alone and is rebuilt only when a requirement changes, not on every
  source edit;
* ``torch.txt``: the torch requirements, split out so an image can take torch from another index
  (a CPU or a CUDA build) in a layer of its own; empty when nothing needs torch.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

from .distributions import OURS, is_ours, normalize

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Requirements that go to torch.txt (installed from a torch index) instead of requirements.txt.
TORCH_FAMILY = frozenset({"torch"})


class ContextError(RuntimeError):
    """The sources did not yield exactly our packages, or a requirement could not be read."""


def _can_build_without_isolation() -> bool:
    """Whether this interpreter's setuptools can build our wheels itself (saves an isolated env each).

    Our ``build-system`` asks for setuptools>=68 and wheel; setuptools >= 70.1 carries ``bdist_wheel``.
    Otherwise pip builds in an isolated environment, as it would by default.
    """
    try:
        from importlib.metadata import version

        from packaging.version import Version

        return Version(version("setuptools")) >= Version("70.1")
    except Exception:
        return False


#: What a project directory of ours needs to build a wheel (src layout); everything else stays behind.
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "src")


def clean_copy(project: Path, dest: Path) -> Path:
    """Copy the files a wheel is built from into ``dest``.

    pip builds a local directory in place, and setuptools' ``build/lib`` there keeps files deleted
    from the sources since the last build, which would then ship in the wheel. A fresh copy has none,
    and the checkout is left untouched.
    """
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in PROJECT_FILES:
        src = project / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    return dest


def build_wheels(sources: Sequence[str], wheel_dir: Path) -> list[Path]:
    """``pip wheel --no-deps`` every source into ``wheel_dir``; return the wheels, all of them ours."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(wheel_dir)]
    if _can_build_without_isolation():
        cmd.append("--no-build-isolation")
    with tempfile.TemporaryDirectory(prefix="docker-context-") as tmp:
        args = [
            str(clean_copy(Path(src), Path(tmp) / str(i)))
            if (Path(src) / "pyproject.toml").is_file()
            else src
            for i, src in enumerate(sources)
        ]
        proc = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ContextError(f"pip wheel {' '.join(sources)} failed:\n{proc.stdout}{proc.stderr}")
    wheels = sorted(wheel_dir.glob("*.whl"))
    names = [normalize(w.name.split("-")[0]) for w in wheels]
    strangers = [w.name for w, n in zip(wheels, names, strict=True) if not is_ours(n)]
    if strangers:
        raise ContextError(f"not packages of this project: {', '.join(strangers)}")
    if len(set(names)) != len(names) or len(names) != len(sources):
        raise ContextError(
            f"expected one wheel per source ({len(sources)}), got: {', '.join(w.name for w in wheels)}"
        )
    return wheels


def wheel_requirements(wheel: Path) -> list[str]:
    """A wheel's ``Requires-Dist`` lines, without those that only an extra asks for."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise ContextError(f"{wheel.name} has no METADATA")
        message = Parser().parsestr(zf.read(meta).decode("utf-8"))
    reqs = message.get_all("Requires-Dist") or []
    return [r for r in reqs if not (Requirement(r).marker and "extra" in str(Requirement(r).marker))]


def project_requirements(project: Path) -> list[str]:
    """``[project] dependencies`` and ``[build-system] requires`` of ``project/pyproject.toml``."""
    data = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    runtime = data.get("project", {}).get("dependencies", [])
    build = data.get("build-system", {}).get("requires", [])
    return [str(d) for d in [*runtime, *build]]


def split_public(requirements: Iterable[str]) -> tuple[list[str], list[str]]:
    """(torch requirements, other public requirements), ours dropped, duplicates once, order kept."""
    torch: list[str] = []
    public: list[str] = []
    for line in requirements:
        req = Requirement(line)
        if is_ours(req.name):
            continue
        target = torch if normalize(req.name) in TORCH_FAMILY else public
        if str(req) not in target:
            target.append(str(req))
    return torch, public


def build_context(sources: Sequence[str], out: Path, project: Path | None = None) -> list[Path]:
    """Write ``out/wheels``, ``out/requirements.txt`` and ``out/torch.txt``; return the wheels."""
    if not sources:
        raise ContextError(f"no source given for any of {', '.join(OURS)}")
    if out.exists():
        shutil.rmtree(out)
    wheels = build_wheels(sources, out / "wheels")
    requirements = [r for w in wheels for r in wheel_requirements(w)]
    if project is not None:
        requirements += project_requirements(project)
    torch, public = split_public(requirements)
    (out / "torch.txt").write_text("".join(f"{r}\n" for r in torch), encoding="utf-8")
    (out / "requirements.txt").write_text("".join(f"{r}\n" for r in public), encoding="utf-8")
    return wheels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark_runner.docker_context", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="the context directory to (re)write")
    parser.add_argument("--project", type=Path, default=None, help="a runner whose dependencies to add")
    parser.add_argument("sources", nargs="+", help="pip arguments naming our packages' sources")
    args = parser.parse_args(argv)
    try:
        wheels = build_context(args.sources, args.out, args.project)
    except ContextError as exc:
        print(f"docker context: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {', '.join(w.name for w in wheels)}, requirements.txt, torch.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
