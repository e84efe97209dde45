"""Existing solutions as tasks: ``--solutions PATH`` (with ``--model solutions``) judges a corpus as it is.

Each solution becomes one :class:`~.problems.KernelBenchTask` carrying its reference and the solution
(``task.solution``); the ``solutions`` offline model (baselines.py) hands the stored source to the
service unchanged, so a corpus runs, resumes, scores and reports like any run. Three layouts:

- a folder in upstream KernelBench's run layout (what ``scripts/eval_from_generations.py`` judges):
  ``level_{L}_problem_{P}_sample_{S}_kernel.py``, each a module defining ``ModelNew``; the reference is
  problem ``P`` of level ``L`` in the runner's dataset (``--dataset-file``, else the bundled sample).
  Task id: the problem's id with the sample, ``L1_19_ReLU_s0``. An empty file is skipped (counted);
  other files in the folder are ignored.
- a JSON object ``{"1": [...], "2": [...]}`` whose keys are levels, holding rows ``{task_id, ref_code,
  custom_code}`` (CUDA-L1's first release).
- JSON lines of rows ``{level_id, task_id, ref_code, custom_code, ...}`` (CUDA-L1's revision, whose
  file is named ``.json`` too: a file whose first line is a whole JSON value is read as JSON lines).

A row is judged against its own ``ref_code``; task id ``L{level}_{task_id}`` (``L1_19``). A row whose
``custom_code`` is null, empty or the text "None" is skipped and counted; its other fields
(``score_default``...) are kept on the task (``solution.fields``). The backend is ``--backend`` when given, else inferred from the
source (:func:`infer_backend`). Bad input raises :class:`SolutionLoadError` naming the file, the row
(or line) and the field, and what was expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .problems import KernelBenchTask, ProblemLoadError, SolutionBackend, StoredSolution

#: Upstream KernelBench's name for a generated kernel in a run folder.
SOLUTION_FILE_RE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
SOLUTION_FILE_PATTERN = "level_{L}_problem_{P}_sample_{S}_kernel.py"
ROW_FIELDS = ("task_id", "ref_code", "custom_code")
LINE_FIELDS = ("level_id", *ROW_FIELDS)
#: A ``custom_code`` that stands for no solution: empty, or a serialised null (CUDA-L1's revision writes 17
#: missing solutions as the text "None", which would be judged as a module without ``ModelNew``).
MISSING_CODE = frozenset({"", "None", "null"})

_CPP_EXTENSION = re.compile(r"\bload_inline\b|\bcpp_extension\b")
_CUDA = re.compile(r"cuda|__global__|<<<", re.IGNORECASE)
_TRITON = re.compile(r"^\s*(?:import|from)\s+triton\b", re.MULTILINE)


class SolutionLoadError(ProblemLoadError):
    """A solutions file or folder is missing, malformed, or holds nothing to judge."""


@dataclass
class LoadedSolutions:
    tasks: list[KernelBenchTask]
    skipped: list[str] = field(default_factory=list)
    """Where each row (or file) without solution code was: skipped, not judged."""


def infer_backend(code: str) -> SolutionBackend:
    """``cuda`` for a C++ extension (``load_inline``, ``torch.utils.cpp_extension``) whose source names
    CUDA anywhere (``cuda_sources``, a CUDA header, ``__global__``, a ``<<<`` launch...), ``cpp`` for one
    that does not (C++ only: CPU workers can judge it), ``triton`` for ``import triton``, else ``torch``."""
    if _CPP_EXTENSION.search(code):
        return "cuda" if _CUDA.search(code) else "cpp"
    if _TRITON.search(code):
        return "triton"
    return "torch"


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SolutionLoadError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def load_solutions(
    path: Path,
    problems: Callable[[], Sequence[KernelBenchTask]],
    levels: Collection[int] = (),
    backend: SolutionBackend | None = None,
) -> LoadedSolutions:
    """The tasks of a solutions folder or file (see the module's docstring). ``problems``: the runner's
    dataset, loaded only for a folder (its references); ``levels``: keep only these (empty: all);
    ``backend``: every solution's backend (None: inferred from each source)."""
    if path.is_dir():
        loaded = _from_folder(path, problems, levels, backend)
    elif path.is_file():
        loaded = _from_file(path, levels, backend)
    else:
        raise SolutionLoadError(
            f"{path}: no such file or directory (expected a folder of {SOLUTION_FILE_PATTERN} files "
            "or a JSON/JSONL file of solution rows)"
        )
    if not loaded.tasks:
        why = [f"{len(loaded.skipped)} without solution code skipped"] if loaded.skipped else []
        if levels:
            why.append(f"level(s) {', '.join(map(str, sorted(levels)))} kept")
        raise SolutionLoadError(f"{path}: no solution to judge ({'; '.join(why) or 'empty'})")
    return loaded


# ---- upstream's run folder ------------------------------------------------------------------------


def _from_folder(
    root: Path,
    problems: Callable[[], Sequence[KernelBenchTask]],
    levels: Collection[int],
    backend: SolutionBackend | None,
) -> LoadedSolutions:
    found: list[tuple[int, int, int, Path]] = []
    for path in root.iterdir():
        m = SOLUTION_FILE_RE.match(path.name)
        if m and path.is_file():
            found.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), path))
    if not found:
        raise SolutionLoadError(
            f"{root}: no solution files (expected {SOLUTION_FILE_PATTERN}, upstream KernelBench's run "
            "layout, directly in this folder)"
        )
    found.sort()
    wanted = [f for f in found if not levels or f[0] in levels]
    out = LoadedSolutions(tasks=[])
    if not wanted:
        return out
    dataset = list(problems())
    by_key = {(t.level, t.problem_id): t for t in dataset}
    for level, problem_id, sample, path in wanted:
        code = _read_text(path)
        if not code.strip():
            out.skipped.append(str(path))
            continue
        problem = by_key.get((level, problem_id))
        if problem is None:
            have = sorted({t.level for t in dataset})
            raise SolutionLoadError(
                f"{path}: the dataset has no level {level} problem {problem_id} to judge it against "
                f"({len(dataset)} problems, levels {', '.join(map(str, have)) or 'none'}): pass "
                "--dataset-file with the KernelBench problems these solutions were written for"
            )
        solution = StoredSolution(code=code, backend=backend or infer_backend(code), source=path.name)
        out.tasks.append(problem.model_copy(update={"id": f"{problem.id}_s{sample}", "solution": solution}))
    return out


# ---- JSON and JSON lines --------------------------------------------------------------------------


def _from_file(path: Path, levels: Collection[int], backend: SolutionBackend | None) -> LoadedSolutions:
    text = _read_text(path)
    rows: list[tuple[str, str, int | None, Any]]  # (where for errors, source, level from a key, row)
    if path.suffix == ".jsonl":
        rows = _json_lines(path, text)
    else:
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            if not _first_line_is_json(text):
                raise SolutionLoadError(
                    f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); expected an "
                    'object of levels {"1": [rows], ...} or JSON lines of rows'
                ) from exc
            rows = _json_lines(path, text)  # JSON lines (CUDA-L1's revision names its file .json)
        else:
            if isinstance(data, dict) and not set(data) & set(LINE_FIELDS):
                rows = _level_rows(path, data)
            elif isinstance(data, dict) and _first_line_is_json(text):  # JSON lines of one row
                rows = _json_lines(path, text)
            elif isinstance(data, dict):  # one row, pretty-printed
                rows = [(str(path), path.name, None, data)]
            else:
                raise SolutionLoadError(
                    f'{path}: expected an object whose keys are levels ("1", "2", ...), each a list of rows '
                    f"{{{', '.join(ROW_FIELDS)}}}, or JSON lines of rows {{{', '.join(LINE_FIELDS)}, ...}}; "
                    f"got a JSON {type(data).__name__}"
                )
    out = LoadedSolutions(tasks=[])
    seen: dict[tuple[int, int], str] = {}
    for where, source, level, row in rows:
        task = _row_task(row, where, source, level, levels, backend, out.skipped)
        if task is None:
            continue
        key = (task.level, task.problem_id)
        if key in seen:
            raise SolutionLoadError(
                f"{where}: level {task.level} task {task.problem_id} again (first at {seen[key]}): "
                "one solution a problem per file"
            )
        seen[key] = where
        out.tasks.append(task)
    return out


def _json_lines(path: Path, text: str) -> list[tuple[str, str, int | None, Any]]:
    rows: list[tuple[str, str, int | None, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SolutionLoadError(
                f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}); expected one row a "
                f"line: {{{', '.join(LINE_FIELDS)}, ...}}"
            ) from exc
        rows.append((f"{path}:{lineno}", f"{path.name}:{lineno}", None, row))
    return rows


def _level_rows(path: Path, data: dict[str, Any]) -> list[tuple[str, str, int | None, Any]]:
    rows: list[tuple[str, str, int | None, Any]] = []
    for key, level_rows in data.items():
        level = _level_key(path, key)
        if not isinstance(level_rows, list):
            raise SolutionLoadError(
                f'{path}: level "{key}" holds a JSON {type(level_rows).__name__}, expected a list of rows '
                f"{{{', '.join(ROW_FIELDS)}}}"
            )
        for i, row in enumerate(level_rows):
            rows.append((f'{path}: level "{key}" row {i}', f'{path.name}: level "{key}" row {i}', level, row))
    return rows


def _first_line_is_json(text: str) -> bool:
    """JSON lines: the first non-empty line is a whole JSON value (a pretty-printed object's is not)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        json.loads(first)
    except json.JSONDecodeError:
        return False
    return bool(first.strip())


def _level_key(path: Path, key: str) -> int:
    if key.strip().isdigit() and int(key) >= 1:
        return int(key)
    raise SolutionLoadError(
        f'{path}: key "{key}" is not a level (expected an object whose keys are levels "1", "2", ..., '
        "each a list of rows)"
    )


def _int_field(
    row: dict[str, Any], name: str, where: str, expected: Sequence[str], what: str, low: int
) -> int:
    if name not in row:
        raise SolutionLoadError(f"{where}: missing field `{name}` (a row has {', '.join(expected)})")
    value = row[name]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SolutionLoadError(
            f"{where}: field `{name}` must be {what} (an integer >= {low}), got {_show(value)}"
        )
    return value


def _row_task(
    row: Any,
    where: str,
    source: str,
    level: int | None,
    levels: Collection[int],
    backend: SolutionBackend | None,
    skipped: list[str],
) -> KernelBenchTask | None:
    """The task of one row; None when its level is not wanted, or (recorded in ``skipped``) when it has
    no solution code."""
    expected = LINE_FIELDS if level is None else ROW_FIELDS
    if not isinstance(row, dict):
        raise SolutionLoadError(
            f"{where}: expected a JSON object {{{', '.join(expected)}, ...}}, got a JSON {type(row).__name__}"
        )
    if level is None:
        level = _int_field(row, "level_id", where, expected, "a KernelBench level", 1)
    problem_id = _int_field(row, "task_id", where, expected, "the problem id", 0)
    if levels and level not in levels:
        return None
    custom = row.get("custom_code")
    if custom is None or (isinstance(custom, str) and custom.strip() in MISSING_CODE):
        skipped.append(where)
        return None
    if not isinstance(custom, str):
        raise SolutionLoadError(
            f"{where}: field `custom_code` must be the solution's source (a string defining ModelNew), "
            f"got {_show(custom)}"
        )
    if "ref_code" not in row:
        raise SolutionLoadError(f"{where}: missing field `ref_code` (a row has {', '.join(expected)})")
    reference = row["ref_code"]
    if not isinstance(reference, str) or not reference.strip():
        raise SolutionLoadError(
            f"{where}: field `ref_code` must be the reference's source (a non-empty string defining Model, "
            f"get_inputs and get_init_inputs), got {_show(reference)}"
        )
    extra = {k: v for k, v in row.items() if k not in LINE_FIELDS}
    solution = StoredSolution(
        code=custom,
        backend=backend or infer_backend(custom),
        source=source,
        fields=extra,
    )
    return KernelBenchTask(
        id=f"L{level}_{problem_id}",
        question=reference,
        level=level,
        problem_id=problem_id,
        name=str(problem_id),
        reference_code=reference,
        solution=solution,
    )
