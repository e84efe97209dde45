"""KernelBench problems served by ``list_tasks``: from a KernelBench checkout or a JSONL file.

Sources are configured (``--datasets PATH``), never read from a fixed location. A checkout is a
directory holding ``level{N}/*.py`` (the repo's ``KernelBench/`` folder or a parent of it); a JSONL file
has one ``{"level", "problem_id", "name", "code"}`` object per line. Datasets are ``level1``..``level4``
and ``all``; a task is ``{"id": "level1/1_Square_matrix_multiplication_", "question": <code>, "level",
"problem_id", "name"}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEVELS = (1, 2, 3, 4)
DATASET_NAMES = tuple(f"level{n}" for n in LEVELS) + ("all",)
_FILE_RE = re.compile(r"^(\d+)_.*\.py$")


@dataclass(frozen=True)
class Problem:
    level: int
    problem_id: int
    name: str
    code: str

    @property
    def task_id(self) -> str:
        return f"level{self.level}/{self.name}"

    def as_task(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "question": self.code,
            "level": self.level,
            "problem_id": self.problem_id,
            "name": self.name,
        }


class DatasetError(ValueError):
    """A configured dataset source is missing or malformed."""


def _from_checkout(root: Path) -> list[Problem]:
    base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    problems = []
    for level in LEVELS:
        folder = base / f"level{level}"
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.py")):
            m = _FILE_RE.match(path.name)
            if m:
                problems.append(Problem(level, int(m.group(1)), path.stem, path.read_text()))
    if not problems:
        raise DatasetError(
            f"{root}: no level{{1..4}}/<id>_<name>.py files found (expected a KernelBench checkout)"
        )
    return problems


def _from_jsonl(path: Path) -> list[Problem]:
    problems = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problems.append(
                Problem(int(row["level"]), int(row["problem_id"]), str(row["name"]), str(row["code"]))
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DatasetError(
                f"{path}:{lineno}: expected a JSON object with level, problem_id, name, code ({exc})"
            ) from exc
    return problems


def load_problems(sources: list[Path]) -> list[Problem]:
    """All problems of all sources; a later source overrides an earlier one with the same task id."""
    by_id: dict[str, Problem] = {}
    for src in sources:
        src = Path(src)
        if src.is_dir():
            found = _from_checkout(src)
        elif src.is_file():
            found = _from_jsonl(src)
        else:
            raise DatasetError(
                f"dataset source {src} does not exist (expected a KernelBench checkout or a .jsonl)"
            )
        for p in found:
            by_id[p.task_id] = p
    return sorted(by_id.values(), key=lambda p: (p.level, p.problem_id))


class ProblemStore:
    """The configured problems, by dataset name and by task id."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self._by_id = {p.task_id: p for p in problems}
        self._by_name = {p.name: p for p in problems}

    @classmethod
    def from_sources(cls, sources: list[Path]) -> ProblemStore:
        return cls(load_problems(sources))

    def dataset(self, name: str) -> list[Problem]:
        """Problems of ``level1``..``level4`` or ``all``; ``KeyError`` for any other name."""
        if name == "all":
            return list(self.problems)
        m = re.fullmatch(r"level([1-4])", name)
        if not m:
            raise KeyError(f"unknown dataset {name!r}; expected one of {', '.join(DATASET_NAMES)}")
        level = int(m.group(1))
        return [p for p in self.problems if p.level == level]

    def find(self, task_id: str, dataset: str | None = None) -> Problem:
        """A problem by task id (``level1/19_ReLU``) or bare name (``19_ReLU``); ``KeyError`` if absent."""
        p = self._by_id.get(task_id) or self._by_name.get(task_id)
        if p is None:
            raise KeyError(f"unknown task {task_id!r}" + (f" in dataset {dataset!r}" if dataset else ""))
        if dataset and dataset in DATASET_NAMES[:-1] and f"level{p.level}" != dataset:
            raise KeyError(f"task {task_id!r} is not in dataset {dataset!r}")
        return p
