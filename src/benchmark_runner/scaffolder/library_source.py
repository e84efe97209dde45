"""Where a generated runner gets this project's library: the ``library_source`` answer.

A generated runner depends on ``llmbench-runner`` (and, for the kernel runners,
``llmbench-kernel-service``). Those names are never resolved from a package index, where anyone can
publish under a name (``benchmark-runner``, this library's first name, belongs to a stranger there).
Instead the runner's answers file records a source that is this project, and its Makefile turns it
into pip arguments that name the source itself:

* a **checkout** of this repository (a directory whose ``pyproject.toml`` is ``llmbench-runner``):
  pip builds the packages from it;
* a **git URL** (``git+https://HOST/OWNER/REPO@REF``): pip builds them from that commit;
* a **wheel directory** (one ``llmbench_runner-*.whl``, and ``llmbench_kernel_service-*.whl`` when the
  runner uses the kernel service): pip installs those files.

The default is where the running library came from, read from its PEP 610 ``direct_url.json`` (what
pip records for an install from a path, a VCS URL or a wheel file). Paths are recorded relative to
the generated repo when the source contains it (a runner inside a checkout, as ``runners/*`` here:
the pair stays valid wherever the checkout moves), else absolute.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..distributions import LIBRARY, OURS, normalize, wheel_prefix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class LibrarySourceError(ValueError):
    """The library source is missing, unusable, or cannot be told from how the library was installed."""


HINT = (
    "pass --library-source with a checkout of benchmark-runner, a git URL (git+https://HOST/REPO@REF) "
    "or a directory holding its wheels"
)


def is_git_url(value: str) -> bool:
    return value.startswith("git+") and "://" in value


def _checkout_name(path: Path) -> str | None:
    """The project name in ``path/pyproject.toml``, or None when there is none."""
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LibrarySourceError(f"{pyproject}: not readable TOML ({exc})") from None
    return str(data.get("project", {}).get("name", ""))


def describe(path: Path, dists: Iterable[str] = (LIBRARY,)) -> str:
    """``checkout`` or ``wheels`` for a local source directory of ``dists``; raises when it is neither."""
    if not path.is_dir():
        raise LibrarySourceError(f"library source {path} is not a directory; {HINT}")
    name = _checkout_name(path)
    if name is not None:
        if normalize(name) != LIBRARY:
            raise LibrarySourceError(
                f"library source {path} is the project {name!r}, not a checkout of benchmark-runner "
                f"({LIBRARY}); {HINT}"
            )
        for dist in dists:
            if not (path / OURS[normalize(dist)] / "pyproject.toml").is_file():
                raise LibrarySourceError(
                    f"checkout {path} has no {OURS[normalize(dist)]}/pyproject.toml ({dist})"
                )
        return "checkout"
    for dist in dists:
        wheels = sorted(p.name for p in path.glob(wheel_prefix(dist) + "*.whl"))
        if len(wheels) != 1:
            found = "no" if not wheels else f"{len(wheels)} ({', '.join(wheels)})"
            raise LibrarySourceError(
                f"library source {path} has {found} {wheel_prefix(dist)}*.whl wheel(s); a wheel directory "
                f"holds exactly one of each package the runner needs; {HINT}"
            )
    return "wheels"


def record(value: str, dest: Path, dists: Iterable[str] = (LIBRARY,), cwd: Path | None = None) -> str:
    """Check ``value`` (a git URL, or a path relative to ``cwd``) as a source of ``dists`` for a runner
    generated at ``dest``; return what the answers record."""
    value = value.strip()
    if not value:
        raise LibrarySourceError(f"empty library source; {HINT}")
    if is_git_url(value):
        if any(c.isspace() for c in value) or '"' in value:
            raise LibrarySourceError(f"library source {value!r}: a git URL has no spaces or quotes")
        return value
    if "://" in value or value.startswith("git@"):
        raise LibrarySourceError(f"library source {value!r}: a git URL starts with git+ (git+https://...)")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    path = Path(os.path.normpath(path.absolute()))
    describe(path, dists)
    if any(c.isspace() for c in str(path)):
        raise LibrarySourceError(f"library source {path}: a path with spaces cannot be used by make")
    dest = Path(os.path.normpath(dest.expanduser().absolute()))
    if dest == path:
        raise LibrarySourceError(f"library source {path} is the runner's own directory; {HINT}")
    if path in dest.parents:
        return Path(os.path.relpath(path, dest)).as_posix()
    return path.as_posix()


def _file_path(url: str) -> Path | None:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def installed_source(dist: metadata.Distribution | None = None) -> str:
    """Where the running library was installed from (absolute path or git URL), per ``direct_url.json``.

    Raises :class:`LibrarySourceError` when that cannot be told (e.g. it came from a package index),
    naming ``--library-source`` as the way out.
    """
    if dist is None:
        try:
            dist = metadata.distribution(LIBRARY)
        except metadata.PackageNotFoundError:
            raise LibrarySourceError(
                f"{LIBRARY} is not installed, so its source is unknown; {HINT}"
            ) from None
    raw = dist.read_text("direct_url.json")
    if not raw:
        raise LibrarySourceError(
            f"{LIBRARY} was not installed from a checkout, a git URL or a wheel file (no direct_url.json), "
            f"so where it came from is unknown; {HINT}"
        )
    info = json.loads(raw)
    url = str(info.get("url", ""))
    if "vcs_info" in info:
        vcs = info["vcs_info"]
        if vcs.get("vcs") != "git":
            raise LibrarySourceError(f"{LIBRARY} came from a {vcs.get('vcs')} URL, not git; {HINT}")
        return f"git+{url}@{vcs['commit_id']}"
    path = _file_path(url)
    if "dir_info" in info and path is not None:
        return path.as_posix()
    if "archive_info" in info and path is not None and path.suffix == ".whl":
        return path.parent.as_posix()
    raise LibrarySourceError(
        f"{LIBRARY} was installed from {url}, which is no checkout, git URL or wheel; {HINT}"
    )


def default_source(
    dest: Path, dists: Iterable[str] = (LIBRARY,), dist: metadata.Distribution | None = None
) -> str:
    """The source to record for a runner generated at ``dest`` when none is given."""
    return record(installed_source(dist), dest, dists)
