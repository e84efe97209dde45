"""What ``run``, ``evaluate`` and ``score`` do to a run directory: the bodies both the Python API
(:mod:`.api`) and the command line (:mod:`.cli`) call, and the errors and result they share.

``execute_run`` resolves the service (the given URL, else the runner's embedded one on loopback),
builds and configures the runner, loads and selects the tasks, checks the stored run's identity (or
writes it), has the :class:`~.engine.RunEngine` generate and evaluate what is left, and scores.
``execute_evaluate`` and ``execute_score`` redo the last two steps on a stored run. Each returns a
:class:`RunResult`; what the CLI reports with an exit code of 2, 3 or 4 is raised as a
:class:`RunUsageError`, :class:`RunRefusedError` or :class:`RunFatalError`.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from .artifacts import ArtifactError, RunArtifacts, RunLockedError
from .base import BenchmarkRunner
from .checkpoint import (
    ConfigMismatch,
    DatasetIdentity,
    RunConfig,
    check_compatible,
    hash_tasks,
    is_failed,
    parse_stored_config,
    plan_resume,
)
from .client import SERVICE_API_KEY_ENV, SERVICE_URL_ENV, ServiceClient, ServiceError
from .engine import FatalRunError, RunEngine, score_run
from .llm import LLMConfig
from .progress import ProgressReporter, make_progress
from .schemas import GenerationResult, ScoreResult, Task

EXIT_OK = 0
EXIT_TASKS_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_FATAL = 4

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RUN_ID_RULE = "use letters, digits, '.', '_' or '-' (at most 128, not starting with '.')"

RunnerT = TypeVar("RunnerT", bound=BenchmarkRunner)


# ---- errors and the result ----------------------------------------------------------------------


class RunError(Exception):
    """A run that could not be done; ``exit_code`` is the CLI's for it."""

    exit_code = EXIT_FATAL


class RunUsageError(RunError, ValueError):
    """Bad arguments, an unknown task id, an unreadable dataset (CLI exit code 2)."""

    exit_code = EXIT_USAGE


class RunRefusedError(RunError):
    """The run directory holds another configuration (``overwrite=True`` starts over) or another
    process is writing it (CLI exit code 3)."""

    exit_code = EXIT_REFUSED


class RunFatalError(RunError):
    """The service is unreachable or missing, scoring failed, a run file is corrupt (CLI exit code 4)."""

    exit_code = EXIT_FATAL


@dataclass(frozen=True)
class RunResult:
    """What ``run``/``evaluate``/``score`` did: the score, the run's files, and this call's counts.

    ``score`` covers every task of the run directory that has an evaluation (a resumed run scores the
    earlier tasks too); the counts are this call's (``score`` evaluates nothing: they are 0).
    """

    score: ScoreResult
    artifacts: RunArtifacts
    selected: int = 0
    """Tasks this call was asked for (after ``task_id`` and ``limit``)."""
    resumed: int = 0
    """Of those, the ones already finished in the run directory (skipped)."""
    generated: int = 0
    evaluated: int = 0
    failed_ids: tuple[str, ...] = ()
    """Tasks whose generate or evaluate raised (recorded; a rerun retries them)."""
    wall_s: float = 0.0

    @property
    def run_dir(self) -> Path:
        return self.artifacts.run_dir

    @property
    def run_id(self) -> str:
        return self.artifacts.run_id

    @property
    def ok(self) -> bool:
        """Every task of this call got a verdict (whatever it was)."""
        return not self.failed_ids

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this result: 0, or 1 when some tasks failed."""
        return EXIT_OK if self.ok else EXIT_TASKS_FAILED


@dataclass
class RunRequest:
    """The options of ``NAME-runner run``, checked (``run``'s keyword arguments become one of these)."""

    model: str
    run_id: str | None = None
    dataset_file: Path | None = None
    dataset_name: str | None = None
    problem: Path | None = None
    service_url: str | None = None
    concurrency: int | None = None
    limit: int | None = None
    task_id: tuple[str, ...] = ()
    output_dir: Path = Path("runs")
    overwrite: bool = False
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 4096
    max_turns: int = 5
    timeout: float = 300.0
    options: dict[str, Any] = field(default_factory=dict)
    """The runner's own flags (``cli_options``), every one of them with its value or default."""


# ---- helpers shared by the three bodies (and by the CLI's other commands) ------------------------


def _note(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


class _NoProgress:
    def start(self, total: int, already_done: int) -> None:
        pass

    def task_finished(self, task_id: str, failed: bool, detail: str = "") -> None:
        pass

    def close(self) -> None:
        pass


def _progress(quiet: bool) -> ProgressReporter:
    return _NoProgress() if quiet else make_progress()


def check_run_id(value: str | None) -> str | None:
    """``value`` if it is a usable run directory name (None passes), else a ``RunUsageError``."""
    if value is not None and not RUN_ID_PATTERN.match(value):
        raise RunUsageError(f"{value!r} is not a valid run id: {RUN_ID_RULE}")
    return value


def default_run_id(runner_name: str, model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{runner_name}-{model}").lstrip("._-")[:128] or "run"


def needs_service(adapter_cls: type[BenchmarkRunner], dataset_name: str | None = None) -> bool:
    """A runner needs a service unless it overrides both evaluate and score (and loads no service dataset).

    A runner that ships its own service (overrides ``embedded_service``) always gets one: its agent
    calls the service while it generates, not only in evaluate/score.
    """
    return (
        dataset_name is not None
        or inspect.getattr_static(adapter_cls, "embedded_service")
        is not inspect.getattr_static(BenchmarkRunner, "embedded_service")
        or adapter_cls.evaluate is BenchmarkRunner.evaluate
        or adapter_cls.score is BenchmarkRunner.score
    )


@asynccontextmanager
async def service_endpoint(
    adapter_cls: type[BenchmarkRunner], service_url: str | None, required: bool, quiet: bool = False
) -> AsyncIterator[str | None]:
    """The service URL to use: the given one, else the runner's embedded service served on loopback."""
    if service_url:
        yield service_url.rstrip("/")
        return
    if not required:  # nothing will call a service: do not start one
        yield None
        return
    service = adapter_cls.embedded_service()
    if service is None:
        raise RunFatalError(
            f"{adapter_cls.NAME} needs a benchmark service: pass --service-url URL or set {SERVICE_URL_ENV}"
        )
    from .embedded import serve_in_loop  # imported only when needed: keeps startup fast
    from .service import make_app

    async with serve_in_loop(make_app(service)) as url:
        _note(quiet, f"started embedded {service.name} service at {url}")
        yield url


async def check_service(url: str) -> None:
    """Fail fast (exit 4) when nothing answers at ``url``; any HTTP answer counts as reachable."""
    async with ServiceClient(
        url, os.environ.get(SERVICE_API_KEY_ENV), timeout=10.0, retries=2, backoff=0.25
    ) as c:
        try:
            await c.get("/healthz")
        except ServiceError as exc:
            if exc.status_code is None:
                raise RunFatalError(f"benchmark service at {url} is unreachable: {exc}") from exc


@asynccontextmanager
async def runner_session(
    adapter_cls: type[RunnerT],
    service_url: str | None,
    service_required: bool,
    dataset_name: str | None,
    options: dict[str, Any] | None = None,
    run_id: str | None = None,
    quiet: bool = False,
) -> AsyncIterator[RunnerT]:
    """Resolve the service (starting the embedded one if need be), build the runner around a client
    and configure it; close both after. The client names ``run_id`` in every request, so a shared
    service takes turns between runs."""
    async with service_endpoint(adapter_cls, service_url, service_required, quiet) as url:
        if url:
            await check_service(url)
        client = ServiceClient(url, os.environ.get(SERVICE_API_KEY_ENV), run_id=run_id) if url else None
        runner = adapter_cls(service=client, dataset_name=dataset_name)
        try:
            runner.configure(options or {})
            yield runner
        finally:
            await runner.aclose()
            if client is not None:
                await client.aclose()


@contextmanager
def run_errors() -> Iterator[None]:
    """The framework's exceptions as the :class:`RunError` the CLI maps to its exit codes.

    A click exception a runner's hook raised (``configure`` checking a flag's value) is kept as the
    ``__cause__``, so the CLI shows it exactly as click would."""
    try:
        yield
    except RunError:
        raise
    except FatalRunError as exc:
        raise RunFatalError(str(exc)) from exc
    except (ConfigMismatch, RunLockedError) as exc:
        raise RunRefusedError(str(exc)) from exc
    except (ArtifactError, ServiceError) as exc:
        raise RunFatalError(str(exc)) from exc
    except OSError as exc:  # disk full while writing the run, and the like
        raise RunFatalError(f"{type(exc).__name__}: {exc}") from exc
    except click.UsageError as exc:  # BadParameter included
        raise RunUsageError(exc.format_message()) from exc
    except click.ClickException as exc:
        error = RunError(exc.format_message())
        error.exit_code = exc.exit_code
        raise error from exc


def exclusive_dataset(dataset_file: Path | None, dataset_name: str | None, problem: Path | None) -> None:
    given = [
        flag
        for flag, value in (
            ("--dataset-file", dataset_file),
            ("--dataset-name", dataset_name),
            ("--problem", problem),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise RunUsageError(f"{' and '.join(given)} are mutually exclusive: pass only one of them")


async def load_dataset(
    runner: BenchmarkRunner,
    dataset_file: Path | None,
    dataset_name: str | None,
    problem: Path | None,
    default_file: Path | None,
) -> tuple[list[Task], DatasetIdentity]:
    """Load the tasks from wherever the flags point; bad data is a usage error naming its source."""
    try:
        if problem is not None:
            tasks = [runner.load_problem(problem)]
            kind, name, path = "problem", problem.name, str(problem.resolve())
        elif dataset_name is not None:
            tasks = await runner.load_tasks_from_service(dataset_name)
            kind, name, path = "name", dataset_name, None
        else:
            source = dataset_file or default_file
            tasks = runner.load_tasks(source)
            kind = "file"
            if source is not None and runner.is_dataset_source(source):
                name, path = str(source), None
            else:
                name = source.name if source else f"{runner.NAME} (default)"
                path = str(source.resolve()) if source else None
    except ServiceError as exc:
        if exc.status_code is None:
            raise RunFatalError(str(exc)) from exc
        raise RunUsageError(f"cannot load dataset {dataset_name!r} from the service: {exc}") from exc
    except (OSError, ValueError) as exc:
        where = problem or dataset_file or default_file or "the default dataset"
        raise RunUsageError(f"cannot load tasks from {where}: {exc}") from exc
    seen: set[str] = set()
    dupes = sorted({t.id for t in tasks if t.id in seen or seen.add(t.id)})  # type: ignore[func-returns-value]
    if dupes:
        raise RunUsageError(f"dataset {name!r} has duplicate task ids: {', '.join(dupes[:10])}")
    if not tasks:
        raise RunUsageError(f"dataset {name!r} has no tasks")
    ident = DatasetIdentity(kind=kind, name=name, path=path, sha256=hash_tasks(tasks), n_tasks=len(tasks))  # type: ignore[arg-type]
    return tasks, ident


def select_tasks(tasks: list[Task], task_ids: tuple[str, ...], limit: int | None) -> list[Task]:
    """``--task-id`` keeps the named tasks (in dataset order), then ``--limit`` keeps the first N."""
    if task_ids:
        known = {t.id for t in tasks}
        unknown = [t for t in dict.fromkeys(task_ids) if t not in known]
        if unknown:
            sample = ", ".join(t.id for t in tasks[:5])
            raise RunUsageError(
                f"--task-id: unknown task id(s) {', '.join(map(repr, unknown))}; "
                f"the dataset has {len(tasks)} task(s), e.g. {sample}"
            )
        wanted = set(task_ids)
        tasks = [t for t in tasks if t.id in wanted]
    if limit is not None:
        tasks = tasks[:limit]
    return tasks


def open_run(output_dir: Path, run_id: str) -> RunArtifacts:
    """The artifacts of an existing run, or a usage error naming where it looked."""
    artifacts = RunArtifacts(output_dir / run_id)
    if not artifacts.exists():
        raise RunUsageError(f"no run {run_id!r} in {output_dir} (no {artifacts.config_path})")
    return artifacts


def read_run_config(artifacts: RunArtifacts) -> RunConfig:
    raw = artifacts.read_config()
    assert raw is not None
    try:
        return parse_stored_config(raw, str(artifacts.config_path))
    except ConfigMismatch as exc:
        raise RunFatalError(str(exc)) from exc


def stored_options(adapter_cls: type[BenchmarkRunner], config: RunConfig) -> dict[str, Any]:
    """The runner's own flags as the run was started (kept in ``config.json``)."""
    names = {o.name for o in adapter_cls.cli_options() if o.name}
    return {k: v for k, v in config.generation_options.items() if k in names}


def option_defaults(adapter_cls: type[BenchmarkRunner]) -> dict[str, Any]:
    """The runner flags' declared defaults as identity keys: a run stored before a flag existed lacks
    its key, and ran as its default (``check_compatible``)."""
    return {  # plain values only: click marks an option without a default with a sentinel
        f"generation_options.{o.name}": o.default
        for o in adapter_cls.cli_options()
        if o.name and isinstance(o.default, str | int | float | bool) and not o.multiple
    }


def stored_tasks(adapter_cls: type[BenchmarkRunner], artifacts: RunArtifacts) -> list[Task]:
    rows = artifacts.read_task_rows()
    try:
        return [adapter_cls.TASK_MODEL.model_validate(r) for r in rows]
    except ValueError as exc:
        raise RunFatalError(
            f"{artifacts.tasks.path}: a stored task no longer matches {adapter_cls.TASK_MODEL.__name__}: {exc}"
        ) from exc


# ---- the three commands' bodies -------------------------------------------------------------------


async def execute_run(
    adapter_cls: type[BenchmarkRunner],
    request: RunRequest,
    *,
    default_dataset_file: Path | None = None,
    argv: list[str] | None = None,
    quiet: bool = False,
) -> RunResult:
    """Generate and evaluate every selected task of ``request``, then score; resumes a stored run.

    ``default_dataset_file``: what loads when no dataset is named (default: the runner's
    ``DEFAULT_DATASET_FILE``); ``argv``: the command line, kept in ``config.json`` for the reader."""
    args = request
    default_file = (
        default_dataset_file if default_dataset_file is not None else adapter_cls.DEFAULT_DATASET_FILE
    )
    offline = adapter_cls.OFFLINE_MODELS.get(args.model)
    llm_config = LLMConfig(
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        max_turns=args.max_turns,
        timeout=args.timeout,
        extra=args.options,
    )
    run_id = args.run_id or default_run_id(adapter_cls.NAME, args.model)
    required = needs_service(adapter_cls, args.dataset_name)

    with run_errors():
        RunArtifacts(args.output_dir / run_id).check_free()
        async with runner_session(
            adapter_cls, args.service_url, required, args.dataset_name, args.options, run_id, quiet
        ) as runner:
            tasks, dataset = await load_dataset(
                runner, args.dataset_file, args.dataset_name, args.problem, default_file
            )
            selected = select_tasks(tasks, args.task_id, args.limit)
            config = RunConfig(
                runner=adapter_cls.NAME,
                model=args.model,
                dataset=dataset,
                generation_version=runner.generation_version(),
                payload_type=adapter_cls.PAYLOAD_TYPE,
                payload_schema_version=adapter_cls.PAYLOAD_SCHEMA_VERSION,
                generation_options={
                    "temperature": args.temperature,
                    "max_tokens": args.max_tokens,
                    "max_turns": args.max_turns,
                    **args.options,
                },
                info={"base_url": args.base_url, "offline_model": offline is not None, "argv": argv},
            )
            artifacts = RunArtifacts(args.output_dir / run_id)
            if args.overwrite and artifacts.run_dir.exists():
                artifacts.create()  # take the lock first: never delete a run another process is writing
                artifacts.delete()
                _note(quiet, f"--overwrite: deleted the old run directory {artifacts.run_dir}")
            with artifacts:
                stored = artifacts.read_config()
                if stored is not None:
                    check_compatible(
                        parse_stored_config(stored, str(artifacts.config_path)),
                        config,
                        str(artifacts.run_dir),
                        option_defaults(adapter_cls),
                    )
                else:
                    artifacts.write_config(config.model_dump(mode="json"))
                known_rows = artifacts.read_task_rows()
                known = {str(r.get("id")) for r in known_rows}
                for t in selected:
                    if t.id not in known:
                        artifacts.append_task(t)
                run_task_ids = [str(r.get("id")) for r in known_rows] + [
                    t.id for t in selected if t.id not in known
                ]
                plan = plan_resume(selected, artifacts.read_generations(), artifacts.read_evaluations())

                if offline is not None:
                    offline_model = offline

                    async def generate(task: Task, log_dir: Path) -> GenerationResult:
                        return await offline_model(runner, task, llm_config, log_dir)

                else:

                    async def generate(task: Task, log_dir: Path) -> GenerationResult:
                        return await runner.generate(task, args.model, llm_config, log_dir)

                engine = RunEngine(
                    runner,
                    artifacts,
                    generate,
                    model=args.model,
                    concurrency=args.concurrency or runner.default_concurrency(model_calls=offline is None),
                    progress=_progress(quiet),
                )
                stats = await engine.run(plan)
                score_result = await score_run(runner, artifacts, run_task_ids, args.model)
    return RunResult(
        score=score_result,
        artifacts=artifacts,
        selected=len(selected),
        resumed=len(plan.finished),
        generated=stats.generated,
        evaluated=stats.evaluated,
        failed_ids=tuple(stats.failed_ids),
        wall_s=stats.wall_s,
    )


async def execute_evaluate(
    adapter_cls: type[BenchmarkRunner],
    output_dir: Path,
    run_id: str,
    service_url: str | None,
    concurrency: int | None,
    task_ids: tuple[str, ...],
    *,
    quiet: bool = False,
) -> RunResult:
    """Evaluate a run's stored generations again (appended: the latest wins), then re-score."""
    artifacts = open_run(output_dir, run_id)
    config = read_run_config(artifacts)
    dataset_name = config.dataset.name if config.dataset.kind == "name" else None
    tasks = stored_tasks(adapter_cls, artifacts)
    selected = select_tasks(tasks, task_ids, None)
    required = needs_service(adapter_cls, dataset_name)
    options = stored_options(adapter_cls, config)

    with run_errors():
        artifacts.check_free()
        async with runner_session(
            adapter_cls, service_url, required, dataset_name, options, run_id, quiet
        ) as runner:
            with artifacts:
                gens = artifacts.read_generations()
                plan = plan_resume([], {}, {})
                plan.to_evaluate = [
                    (t, gens[t.id]) for t in selected if t.id in gens and not is_failed(gens[t.id], None)
                ]

                async def no_generate(task: Task, log_dir: Path) -> GenerationResult:
                    raise RuntimeError("evaluate never generates")

                engine = RunEngine(
                    runner,
                    artifacts,
                    no_generate,
                    model=config.model,
                    concurrency=concurrency or runner.default_concurrency(model_calls=False),
                    progress=_progress(quiet),
                )
                stats = await engine.run(plan)
                score_result = await score_run(runner, artifacts, [t.id for t in tasks], config.model)
    return RunResult(
        score=score_result,
        artifacts=artifacts,
        selected=len(selected),
        evaluated=stats.evaluated,
        failed_ids=tuple(stats.failed_ids),
        wall_s=stats.wall_s,
    )


async def execute_score(
    adapter_cls: type[BenchmarkRunner],
    output_dir: Path,
    run_id: str,
    service_url: str | None,
    *,
    quiet: bool = False,
) -> RunResult:
    """Score a run's stored evaluations again; rewrites ``score.json``."""
    artifacts = open_run(output_dir, run_id)
    config = read_run_config(artifacts)
    dataset_name = config.dataset.name if config.dataset.kind == "name" else None
    task_ids = [t.id for t in stored_tasks(adapter_cls, artifacts)]
    options = stored_options(adapter_cls, config)
    with run_errors():
        async with runner_session(
            adapter_cls, service_url, needs_service(adapter_cls), dataset_name, options, run_id, quiet
        ) as runner:
            score_result = await score_run(runner, artifacts, task_ids, config.model)
    return RunResult(score=score_result, artifacts=artifacts)
