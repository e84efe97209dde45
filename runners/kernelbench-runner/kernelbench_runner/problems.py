"""KernelBench problems: the task model and the three places tasks come from.

Sources, picked by ``load_problems(source)``:

- a KernelBench checkout: a directory holding ``level1/ .. level4/`` (the upstream ``KernelBench/``
  folder) or a repo root holding ``KernelBench/level*/``; each ``<id>_<Name>.py`` is one problem;
- a JSONL file, one problem a line: ``level, problem_id, name, code`` (upstream's dataset columns),
  or already task-shaped rows (``id, question, level, problem_id, name[, reference_code]``), the shape
  a kernel service's ``/v1/datasets/{name}/tasks`` answers;
- the public hub, ``hub`` or ``hub:<dataset name>`` (default ``ScalingIntelligence/KernelBench``),
  read with the ``datasets`` library (imported only then; it caches under ``~/.cache/huggingface``).

What the model is shown: upstream KernelBench puts the *whole* problem file (``Model``, the
module-level sizes, ``get_inputs``/``get_init_inputs``) into its prompt (``ref_arch_src = problem.code``
in ``scripts/generate_samples.py``), so shapes are visible to the model. ``question`` is therefore
the full source by default; ``model_only_source`` gives the stripped variant (``Model`` and imports
only) for the ``--prompt-source model`` option.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from benchmark_runner.schemas import StrictModel, Task, describe_validation_error
from pydantic import Field, SerializerFunctionWrapHandler, ValidationError, model_serializer, model_validator

HUB_DATASET = "ScalingIntelligence/KernelBench"
HARNESS_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})
_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")


class ProblemLoadError(ValueError):
    """A problem source is missing, malformed, or names no problem."""


#: What the service compiles a solution as (``KernelEvalRequest.backend``).
SolutionBackend = Literal["cuda", "triton", "cpp", "torch"]


class StoredSolution(StrictModel):
    """An existing solution a task carries (``--solutions``: a corpus judged as it is, no model asked)."""

    code: str = Field(min_length=1, description="the solution module (defines ModelNew)")
    backend: SolutionBackend = Field(
        description="what the service compiles it as: inferred from the source, or --backend"
    )
    source: str = Field(
        min_length=1, description="where it was read: a file, or FILE:LINE / FILE level L row N"
    )
    fields: dict[str, Any] = Field(
        default_factory=dict, description="the row's other fields, kept as they were (e.g. score_default)"
    )


class KernelBenchTask(Task):
    """One KernelBench problem. ``question`` is what the prompt shows; ``reference_code`` what is run."""

    level: int = Field(ge=1, description="KernelBench level (1: single ops .. 4: HF models)")
    problem_id: int = Field(ge=0)
    name: str = Field(min_length=1, description="upstream file stem, e.g. 19_ReLU")
    reference_code: str = Field(default="", description="the full problem source; defaults to question")
    solution: StoredSolution | None = Field(
        default=None, description="a stored solution to judge (``--model solutions``); None for a problem"
    )

    @model_serializer(mode="wrap")
    def _without_absent_solution(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A problem dumps as it did before ``solution`` existed: its dataset hash (a run's identity)
        and ``tasks.jsonl`` stay the same, so runs made earlier resume."""
        data: dict[str, Any] = handler(self)
        if self.solution is None:
            data.pop("solution", None)
        return data

    @model_validator(mode="after")
    def _default_reference(self) -> KernelBenchTask:
        if not self.reference_code:
            self.reference_code = self.question
        if not self.reference_code.strip():
            raise ValueError(
                "a KernelBench task needs its reference source in `reference_code` or `question`"
            )
        return self


def task_id_for(level: int, problem_id: int, name: str) -> str:
    """``L1_19_ReLU``: level, then upstream's file stem (which already starts with the problem id)."""
    stem = name[:-3] if name.endswith(".py") else name
    if not stem.startswith(f"{problem_id}_"):
        stem = f"{problem_id}_{stem}"
    return f"L{level}_{stem}"


def make_task(
    level: int, problem_id: int, name: str, code: str, timeout: float | None = None
) -> KernelBenchTask:
    """A task from upstream's four columns; ``question`` is the full source (as upstream prompts)."""
    stem = name[:-3] if name.endswith(".py") else name
    fields: dict[str, Any] = {
        "id": task_id_for(level, problem_id, stem),
        "question": code,
        "level": level,
        "problem_id": problem_id,
        "name": stem,
        "reference_code": code,
    }
    if timeout is not None:
        fields["timeout"] = timeout
    return KernelBenchTask.model_validate(fields)


# ---- prompt-facing source --------------------------------------------------------------------------


def _free_names(node: ast.AST, bound: frozenset[str] = frozenset()) -> set[str]:
    """Names read by ``node`` that are not parameters of an enclosing function (a cheap scope model:
    ``self.config = config`` inside ``__init__(self, config)`` does not use a module-level ``config``)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        a = node.args
        params = [
            *a.posonlyargs,
            *a.args,
            *a.kwonlyargs,
            *([a.vararg] if a.vararg else []),
            *([a.kwarg] if a.kwarg else []),
        ]
        inner = bound | {p.arg for p in params}
        names: set[str] = set()
        for default in [*a.defaults, *(d for d in a.kw_defaults if d is not None)]:
            names |= _free_names(default, bound)
        for deco in getattr(node, "decorator_list", []):
            names |= _free_names(deco, bound)
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            names |= _free_names(stmt, inner)
        return names
    if isinstance(node, ast.Name):
        return set() if node.id in bound else {node.id}
    names = set()
    for child in ast.iter_child_nodes(node):
        names |= _free_names(child, bound)
    return names


def _names_loaded(nodes: Iterable[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        names |= _free_names(node)
    return names


def _assigned_names(node: ast.stmt) -> list[str] | None:
    """Target names of a plain module-level assignment, or None when it is not one."""
    targets: list[ast.expr]
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return None
    names: list[str] = []
    for target in targets:
        elts = target.elts if isinstance(target, ast.Tuple) else [target]
        for elt in elts:
            if not isinstance(elt, ast.Name):
                return None
            names.append(elt.id)
    return names


def model_only_source(code: str) -> str:
    """The problem without its input harness: drops ``get_inputs``/``get_init_inputs`` and the
    module-level constants that only they use (sizes); keeps imports, ``Model`` and any helper the
    model needs. Comments and formatting of kept lines are preserved. Unparsable code is returned as is.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    body = tree.body
    harness = [
        n
        for n in body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in HARNESS_FUNCTIONS
    ]
    assigns = {id(n): names for n in body if (names := _assigned_names(n)) is not None}
    kept_code = [n for n in body if n not in harness and id(n) not in assigns]
    used = _names_loaded(kept_code)
    # Constants used by kept assignments that are themselves kept (e.g. derived sizes) stay too.
    drop: set[int] = {id(n) for n in harness}
    changed = True
    kept_assigns = {k for k, names in assigns.items() if any(name in used for name in names)}
    while changed:
        changed = False
        extra = _names_loaded(n for n in body if id(n) in kept_assigns)
        for k, names in assigns.items():
            if k not in kept_assigns and any(name in extra for name in names):
                kept_assigns.add(k)
                changed = True
    drop |= {k for k in assigns if k not in kept_assigns}
    lines = code.splitlines(keepends=True)
    remove: set[int] = set()
    for node in body:
        if id(node) in drop:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            end = node.end_lineno or node.lineno
            remove.update(range(start - 1, end))
    text = "".join(line for i, line in enumerate(lines) if i not in remove)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


# ---- sources --------------------------------------------------------------------------------------


def _level_dirs(root: Path) -> list[tuple[int, Path]]:
    for base in (root, root / "KernelBench"):
        found = []
        for child in sorted(base.glob("level*")) if base.is_dir() else []:
            m = re.fullmatch(r"level(\d+)", child.name)
            if m and child.is_dir():
                found.append((int(m.group(1)), child))
        if found:
            return sorted(found)
    return []


def load_checkout(root: Path) -> list[KernelBenchTask]:
    """Problems of a KernelBench checkout (``level<N>/<id>_<Name>.py``)."""
    dirs = _level_dirs(root)
    if not dirs:
        raise ProblemLoadError(
            f"{root}: not a KernelBench checkout (expected level1/, level2/... here or under KernelBench/)"
        )
    tasks = []
    for level, directory in dirs:
        for path in sorted(directory.glob("*.py")):
            m = _FILE_RE.match(path.name)
            if not m:
                continue  # helpers such as __init__.py
            tasks.append(make_task(level, int(m.group(1)), path.stem, path.read_text(encoding="utf-8")))
    return _sorted(tasks)


def _task_from_row(row: Any, where: str) -> KernelBenchTask:
    if not isinstance(row, dict):
        raise ProblemLoadError(f"{where}: expected a JSON object, got {type(row).__name__}")
    try:
        if "code" in row:
            missing = [k for k in ("level", "problem_id", "name") if k not in row]
            if missing:
                raise ProblemLoadError(
                    f"{where}: missing field(s) {', '.join(missing)} (expected level, problem_id, name, code)"
                )
            if not isinstance(row["code"], str) or not row["code"].strip():
                raise ProblemLoadError(f"{where}: field `code` must be a non-empty string")
            return make_task(
                int(row["level"]), int(row["problem_id"]), str(row["name"]), row["code"], row.get("timeout")
            )
        return KernelBenchTask.model_validate(row)
    except ValidationError as exc:
        raise ProblemLoadError(f"{where}: {describe_validation_error(exc)}") from exc
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ProblemLoadError):
            raise
        raise ProblemLoadError(f"{where}: {exc}") from exc


def load_jsonl(path: Path) -> list[KernelBenchTask]:
    tasks = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProblemLoadError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        tasks.append(_task_from_row(row, f"{path}:{lineno}"))
    return tasks


def tasks_from_hub_dataset(dataset: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[KernelBenchTask]:
    """Convert the hub's ``DatasetDict`` (splits ``level_1``.. with rows ``code, level, name, problem_id``).

    Takes any mapping of split name to rows so it is testable without the network.
    """
    tasks = []
    for split, rows in dataset.items():
        m = re.fullmatch(r"level_(\d+)", split)
        if not m:
            continue
        for i, row in enumerate(rows):
            row = dict(row)
            row.setdefault("level", int(m.group(1)))
            tasks.append(_task_from_row(row, f"hub split {split} row {i}"))
    return _sorted(tasks)


def load_hub(name: str = HUB_DATASET) -> list[KernelBenchTask]:
    """Download (or read from the local cache) the public KernelBench dataset."""
    try:
        import datasets  # optional and heavy: imported only for this source
    except ImportError as exc:
        raise ProblemLoadError(
            "loading from the hub needs the `datasets` package: pip install datasets"
        ) from exc
    try:
        loaded = datasets.load_dataset(name)
    except Exception as exc:  # network, auth, missing dataset: the library raises many kinds
        raise ProblemLoadError(f"could not load hub dataset {name!r}: {exc}") from exc
    return tasks_from_hub_dataset(loaded)


def load_problems(source: Path | str) -> list[KernelBenchTask]:
    """Tasks from a checkout directory, a ``.jsonl`` file, a single problem ``.py``, or ``hub[:NAME]``."""
    text = str(source)
    if text == "hub" or text.startswith("hub:"):
        return load_hub(text[4:] or HUB_DATASET)
    path = Path(source)
    if path.is_dir():
        return load_checkout(path)
    if not path.exists():
        raise ProblemLoadError(
            f"{path}: no such file or directory (expected a KernelBench checkout or a .jsonl)"
        )
    if path.suffix == ".py":
        m = _FILE_RE.match(path.name)
        level_m = re.fullmatch(r"level(\d+)", path.parent.name)
        return [
            make_task(
                int(level_m.group(1)) if level_m else 1,
                int(m.group(1)) if m else 0,
                path.stem,
                path.read_text(encoding="utf-8"),
            )
        ]
    return load_jsonl(path)


def _sorted(tasks: list[KernelBenchTask]) -> list[KernelBenchTask]:
    return sorted(tasks, key=lambda t: (t.level, t.problem_id, t.name))


def _matches(task: KernelBenchTask, wanted: str) -> bool:
    """A task id filter matches the id (``L1_19_ReLU``), ``L1_19``, ``level1/19_ReLU`` or the stem."""
    return wanted in {
        task.id,
        f"L{task.level}_{task.problem_id}",
        f"level{task.level}/{task.name}",
        f"level{task.level}/{task.problem_id}",
        task.name,
    }


def select(
    tasks: Sequence[KernelBenchTask],
    levels: Iterable[int] | None = None,
    task_ids: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[KernelBenchTask]:
    """Filter by level and task id (order kept), then keep the first ``limit``; unknown ids are errors."""
    out = list(tasks)
    if levels:
        wanted_levels = set(levels)
        out = [t for t in out if t.level in wanted_levels]
    if task_ids:
        ids = list(task_ids)
        unknown = [w for w in ids if not any(_matches(t, w) for t in out)]
        if unknown:
            raise ProblemLoadError(
                f"task id(s) not found: {', '.join(unknown)} (ids look like L1_19_ReLU or L1_19)"
            )
        out = [t for t in out if any(_matches(t, w) for w in ids)]
    if limit is not None:
        if limit < 0:
            raise ProblemLoadError(f"limit must be >= 0, got {limit}")
        out = out[:limit]
    return out
