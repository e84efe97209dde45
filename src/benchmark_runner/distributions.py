"""This project's distribution names: what pip calls the packages that import as ``benchmark_runner``
and ``kernel_service``.

The import names stay; the distribution names differ from them because ``benchmark-runner`` on the
public package index belongs to an unrelated project, and ``pip install benchmark-runner>=0.1``
installed it (dependency confusion). ``llmbench-runner`` and ``llmbench-kernel-service`` were not on
the index when chosen (``tests/test_distribution_names.py`` keeps checking), but a name nobody holds
today can be registered tomorrow, so nothing of ours is ever installed by name from an index: every
install names its source (a checkout path, a git URL or a wheel file), see ``library_source``.
"""

from __future__ import annotations

import re
from importlib import metadata

#: The library (``import benchmark_runner``).
LIBRARY = "llmbench-runner"
#: The GPU kernel service (``import kernel_service``), in ``services/kernel-service`` of a checkout.
KERNEL_SERVICE = "llmbench-kernel-service"
#: Every distribution of ours, with its project directory inside a checkout of this repository.
OURS: dict[str, str] = {LIBRARY: ".", KERNEL_SERVICE: "services/kernel-service"}
#: Our former names (``benchmark-runner`` is a stranger's on the public index) and what they became;
#: ``make install`` removes them from old virtualenvs, ``--update`` renames them in a runner's answers.
RENAMED: dict[str, str] = {"benchmark-runner": LIBRARY, "kernel-service": KERNEL_SERVICE}
FORMER = tuple(RENAMED)


def normalize(name: str) -> str:
    """PEP 503 normalised project name (``LLMBench_Runner`` -> ``llmbench-runner``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_ours(name: str) -> bool:
    return normalize(name) in OURS


def renamed(requirement: str) -> str:
    """``requirement`` with a former name of ours replaced by the current one (else unchanged)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match and normalize(match.group(1)) in RENAMED:
        return RENAMED[normalize(match.group(1))] + requirement[match.end() :]
    return requirement


def wheel_prefix(name: str) -> str:
    """How a wheel file of ``name`` starts (``llmbench_runner-``), per the wheel file name spec."""
    return normalize(name).replace("-", "_") + "-"


def library_version() -> str:
    """The installed library's version; ``0.0.0`` when running from a source tree that is not installed."""
    try:
        return metadata.version(LIBRARY)
    except metadata.PackageNotFoundError:
        return "0.0.0"
