"""The doctor's kernels: source files shipped as package data (``doctor/data/*.py``), read through
:mod:`importlib.resources`, so the doctor needs no network, no checkout and no ``bench/`` or ``tests/``.

``self_solution`` makes a reference its own solution (``ModelNew = Model``): an honest kernel whose
true speedup is exactly 1. ``fill`` replaces ``__NAME__`` placeholders (the sandbox probe's port and
files, a build's token) with the ``repr`` of a value or with text.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

DATA = "data"


@cache
def source(name: str) -> str:
    """The text of ``data/<name>.py``."""
    return resources.files(__package__).joinpath(DATA).joinpath(f"{name}.py").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every shipped kernel's name (file stem)."""
    folder = resources.files(__package__).joinpath(DATA)
    return sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".py"))


def self_solution(reference: str) -> str:
    return reference + "\nModelNew = Model\n"


def fill(text: str, *, literal: bool = True, **values: object) -> str:
    """``__KEY__`` -> ``repr(value)`` (``literal``) or ``str(value)``, for every keyword."""
    for key, value in values.items():
        text = text.replace(f"__{key.upper()}__", repr(value) if literal else str(value))
    return text
