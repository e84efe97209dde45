"""The command line every runner gets from ``make_cli(RunnerClass)``.

Commands: ``run`` (generate + evaluate + score, resumable), ``evaluate`` (re-evaluate the stored
generations of a run), ``score`` (re-score its stored evaluations), ``list-tasks``, ``status``
(progress of a run, read from its files), and ``report`` when the runner defines ``report(run_dir)``.
The group is a plain :class:`click.Group`: a runner adds its own commands with ``@cli.command()``.

Exit codes (also in ``--help``):

* 0 - every selected task was generated and evaluated (whatever the verdicts);
* 1 - some tasks failed: generate or evaluate raised (recorded as errors; a rerun retries them);
* 2 - usage error: bad flags, unknown task ids, an unreadable dataset file (click's default);
* 3 - run refused: the run directory holds another configuration (use ``--overwrite``) or is in use;
* 4 - fatal: the benchmark service is unreachable or missing, scoring failed, a run file is corrupt.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click
from rich.console import Console
from rich.table import Table

from .artifacts import ArtifactError, RunArtifacts, RunLockedError
from .base import DEFAULT_CONCURRENCY, BenchmarkRunner
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
from .progress import make_progress
from .schemas import GenerationResult, ScoreResult, Task

EXIT_OK = 0
EXIT_TASKS_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_FATAL = 4

EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0  all selected tasks generated and evaluated\n"
    "  1  some tasks failed (generate or evaluate raised; rerun to retry them)\n"
    "  2  usage error (bad flags, unknown task id, unreadable dataset)\n"
    "  3  run refused (stored config differs: use --overwrite; or run in use)\n"
    "  4  fatal (benchmark service unreachable or missing, scoring failed, corrupt run files)"
)

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

R = TypeVar("R")


class RunRefused(click.ClickException):
    exit_code = EXIT_REFUSED


class FatalError(click.ClickException):
    exit_code = EXIT_FATAL


class BenchmarkCLI(click.Group):
    """``make_cli``'s group; knows its runner class so added commands can reuse it."""

    def __init__(self, *args: Any, adapter_cls: type[BenchmarkRunner], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.adapter_cls = adapter_cls


# ---- helpers shared by the commands ------------------------------------------------------------


def _check_run_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not _RUN_ID.match(value):
        raise click.BadParameter(
            f"{value!r} is not a valid run id: use letters, digits, '.', '_' or '-' (at most 128, not starting with '.')"
        )
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
    adapter_cls: type[BenchmarkRunner], service_url: str | None, required: bool
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
        raise FatalError(
            f"{adapter_cls.NAME} needs a benchmark service: pass --service-url URL or set {SERVICE_URL_ENV}"
        )
    from .embedded import serve_in_loop  # imported only when needed: keeps startup fast
    from .service import make_app

    async with serve_in_loop(make_app(service)) as url:
        click.echo(f"started embedded {service.name} service at {url}", err=True)
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
                raise FatalError(f"benchmark service at {url} is unreachable: {exc}") from exc


def _client(url: str | None, run_id: str | None) -> ServiceClient | None:
    return ServiceClient(url, os.environ.get(SERVICE_API_KEY_ENV), run_id=run_id) if url else None


async def _with_runner(
    adapter_cls: type[BenchmarkRunner],
    service_url: str | None,
    service_required: bool,
    dataset_name: str | None,
    body: Callable[[BenchmarkRunner], Awaitable[R]],
    options: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> R:
    """Resolve the service, build the runner around a client, run ``body``; close everything after.

    The client names ``run_id`` in every request, so a shared service takes turns between runs."""
    async with service_endpoint(adapter_cls, service_url, service_required) as url:
        if url:
            await check_service(url)
        client = _client(url, run_id)
        runner = adapter_cls(service=client, dataset_name=dataset_name)
        runner.configure(options or {})
        try:
            return await body(runner)
        finally:
            await runner.aclose()
            if client is not None:
                await client.aclose()


def _exclusive_dataset(dataset_file: Path | None, dataset_name: str | None, problem: Path | None) -> None:
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
        raise click.UsageError(f"{' and '.join(given)} are mutually exclusive: pass only one of them")


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
            raise FatalError(str(exc)) from exc
        raise click.UsageError(f"cannot load dataset {dataset_name!r} from the service: {exc}") from exc
    except (OSError, ValueError) as exc:
        where = problem or dataset_file or default_file or "the default dataset"
        raise click.UsageError(f"cannot load tasks from {where}: {exc}") from exc
    seen: set[str] = set()
    dupes = sorted({t.id for t in tasks if t.id in seen or seen.add(t.id)})  # type: ignore[func-returns-value]
    if dupes:
        raise click.UsageError(f"dataset {name!r} has duplicate task ids: {', '.join(dupes[:10])}")
    if not tasks:
        raise click.UsageError(f"dataset {name!r} has no tasks")
    ident = DatasetIdentity(kind=kind, name=name, path=path, sha256=hash_tasks(tasks), n_tasks=len(tasks))  # type: ignore[arg-type]
    return tasks, ident


def select_tasks(tasks: list[Task], task_ids: tuple[str, ...], limit: int | None) -> list[Task]:
    """``--task-id`` keeps the named tasks (in dataset order), then ``--limit`` keeps the first N."""
    if task_ids:
        known = {t.id for t in tasks}
        unknown = [t for t in dict.fromkeys(task_ids) if t not in known]
        if unknown:
            sample = ", ".join(t.id for t in tasks[:5])
            raise click.UsageError(
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
        raise click.UsageError(f"no run {run_id!r} in {output_dir} (no {artifacts.config_path})")
    return artifacts


def read_run_config(artifacts: RunArtifacts) -> RunConfig:
    raw = artifacts.read_config()
    assert raw is not None
    try:
        return parse_stored_config(raw, str(artifacts.config_path))
    except ConfigMismatch as exc:
        raise FatalError(str(exc)) from exc


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
    runner_cls = adapter_cls
    rows = artifacts.read_task_rows()
    try:
        return [runner_cls.TASK_MODEL.model_validate(r) for r in rows]
    except ValueError as exc:
        raise FatalError(
            f"{artifacts.tasks.path}: a stored task no longer matches {runner_cls.TASK_MODEL.__name__}: {exc}"
        ) from exc


def print_score(score: ScoreResult, artifacts: RunArtifacts, extra: dict[str, Any] | None = None) -> None:
    """The summary table on stdout (progress went to stderr, so stdout stays scriptable)."""
    table = Table(title=f"{artifacts.run_id}: {score.model} ({score.n_tasks} tasks)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in score.metrics.items():
        table.add_row(key, f"{value:.4g}")
    for key, value in (extra or {}).items():
        table.add_row(key, str(value))
    console = Console(file=sys.stdout, width=max(80, shutil.get_terminal_size((100, 20)).columns))
    console.print(table)
    for group, metrics in score.groups.items():
        console.print(f"{group}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    console.print(f"artifacts: {artifacts.run_dir}")


def _run_async(fn: Callable[[], Awaitable[R]]) -> R:
    """Run a coroutine, turning framework errors into the documented exit codes."""
    try:
        return anyio.run(fn)
    except FatalRunError as exc:
        raise FatalError(str(exc)) from exc
    except (ConfigMismatch, RunLockedError) as exc:
        raise RunRefused(str(exc)) from exc
    except ArtifactError as exc:
        raise FatalError(str(exc)) from exc
    except ServiceError as exc:
        raise FatalError(str(exc)) from exc
    except OSError as exc:  # disk full while writing the run, and the like
        raise FatalError(f"{type(exc).__name__}: {exc}") from exc


# ---- option groups -----------------------------------------------------------------------------


class DatasetFile(click.ParamType):
    """An existing file or directory, or one of the runner's named sources (``hub:NAME``)."""

    name = "path"

    def __init__(self, adapter_cls: type[BenchmarkRunner]) -> None:
        self.adapter_cls = adapter_cls
        self.path = click.Path(exists=True, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if self.adapter_cls.is_dataset_source(value):
            return Path(str(value))
        return self.path.convert(value, param, ctx)


def _dataset_options(
    adapter_cls: type[BenchmarkRunner],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--dataset-file`` (a file, a directory, or one of the runner's named sources), ``--dataset-name``
    and ``--problem``."""
    sources = ", ".join(f"{s}[:NAME]" for s in adapter_cls.DATASET_SOURCES)
    help_file = "load tasks from this file or directory" + (f" or {sources}" if sources else "")

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option(
            "--problem",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="run one problem file (never touches the dataset API)",
        )(f)
        f = click.option("--dataset-name", help="load tasks from the benchmark service's dataset NAME")(f)
        f = click.option(
            "--dataset-file",
            # A directory is passed through too: some runners read a dataset checkout (e.g. KernelBench/).
            type=DatasetFile(adapter_cls),
            help=f"{help_file} (default: the runner's bundled data)",
        )(f)
        return f

    return decorate


def _service_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--service-url",
        envvar=SERVICE_URL_ENV,
        show_envvar=True,
        help="benchmark service base URL (default: the runner's embedded service, if it has one)",
    )(f)


def _run_dir_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--output-dir`` and the run id, given as ``RUN_ID`` or ``--run-id RUN_ID`` (not both)."""

    @functools.wraps(f)
    def merged(*args: Any, run_id: str | None, run_id_arg: str | None, **kwargs: Any) -> Any:
        if run_id and run_id_arg and run_id != run_id_arg:
            raise click.UsageError(f"two run ids: RUN_ID {run_id_arg!r} and --run-id {run_id!r}; give one")
        chosen = run_id or run_id_arg
        if chosen is None:
            raise click.UsageError("missing the run id: give RUN_ID or --run-id RUN_ID")
        return f(*args, run_id=chosen, **kwargs)

    g: Callable[..., Any] = click.option(
        "--output-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("runs"),
        show_default=True,
        help="where run directories live",
    )(merged)
    g = click.option(
        "--run-id", callback=_check_run_id, help="the run's directory name (or give it as RUN_ID)"
    )(g)
    return click.argument("run_id_arg", metavar="RUN_ID", required=False, callback=_check_run_id)(g)


# ---- the group -----------------------------------------------------------------------------------


@dataclass
class RunArgs:
    model: str
    run_id: str | None
    dataset_file: Path | None
    dataset_name: str | None
    problem: Path | None
    service_url: str | None
    concurrency: int | None
    limit: int | None
    task_id: tuple[str, ...]
    output_dir: Path
    overwrite: bool
    base_url: str | None
    api_key_env: str
    temperature: float
    max_tokens: int
    max_turns: int
    timeout: float
    extra: dict[str, Any]


def make_cli(adapter_cls: type[BenchmarkRunner], default_dataset_file: Path | None = None) -> BenchmarkCLI:
    """Build the runner's click group. Add commands with ``@cli.command()`` on the returned group."""
    extra_options = adapter_cls.cli_options()
    extra_names = [o.name for o in extra_options if o.name]

    @click.group(
        cls=BenchmarkCLI,
        adapter_cls=adapter_cls,
        help=f"Run the {adapter_cls.NAME} benchmark: generate with a model, evaluate, score.",
        epilog=EXIT_CODES_HELP,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    )
    def cli() -> None:
        pass

    @cli.command(epilog=EXIT_CODES_HELP)
    @click.option(
        "--model",
        required=True,
        help="model name, or an offline model: " + (", ".join(adapter_cls.OFFLINE_MODELS) or "none"),
    )
    @click.option("--run-id", callback=_check_run_id, help="run directory name [default: <runner>-<model>]")
    @_dataset_options(adapter_cls)
    @_service_option
    @click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        help=f"tasks in flight [default: {DEFAULT_CONCURRENCY}; an offline model: the runner's choice]",
    )
    @click.option("--limit", type=click.IntRange(min=1), help="only the first N (selected) tasks")
    @click.option("--task-id", multiple=True, help="only this task (repeatable)")
    @click.option(
        "--output-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("runs"),
        show_default=True,
    )
    @click.option(
        "--overwrite", is_flag=True, help="DELETE an existing run directory of this id and start over"
    )
    @click.option("--base-url", help="OpenAI-compatible API base URL of the model")
    @click.option(
        "--api-key-env", default="OPENAI_API_KEY", show_default=True, help="env var holding the API key"
    )
    @click.option("--temperature", type=click.FloatRange(0.0, 2.0), default=0.0, show_default=True)
    @click.option("--max-tokens", type=click.IntRange(min=1), default=4096, show_default=True)
    @click.option("--max-turns", type=click.IntRange(min=1), default=5, show_default=True)
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=300.0,
        show_default=True,
        help="seconds per model request",
    )
    def run(**kwargs: Any) -> None:
        """Generate and evaluate every selected task, then score. Rerun the same command to resume."""
        extra = {name: kwargs.pop(name) for name in extra_names}
        args = RunArgs(**kwargs, extra=extra)
        _exclusive_dataset(args.dataset_file, args.dataset_name, args.problem)
        sys.exit(execute_run(adapter_cls, args, default_dataset_file))

    run.params.extend(extra_options)

    @cli.command(epilog=EXIT_CODES_HELP)
    @_run_dir_options
    @_service_option
    @click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        help=f"evaluations in flight [default: the runner's choice, {DEFAULT_CONCURRENCY} unless it says]",
    )
    @click.option("--task-id", multiple=True, help="only this task (repeatable)")
    def evaluate(
        run_id: str,
        output_dir: Path,
        service_url: str | None,
        concurrency: int | None,
        task_id: tuple[str, ...],
    ) -> None:
        """Re-evaluate the stored generations of a run (e.g. after a service fix), then re-score."""
        sys.exit(execute_evaluate(adapter_cls, output_dir, run_id, service_url, concurrency, task_id))

    @cli.command(epilog=EXIT_CODES_HELP)
    @_run_dir_options
    @_service_option
    def score(run_id: str, output_dir: Path, service_url: str | None) -> None:
        """Re-score the stored evaluations of a run; rewrites score.json."""
        artifacts = open_run(output_dir, run_id)
        config = read_run_config(artifacts)
        dataset_name = config.dataset.name if config.dataset.kind == "name" else None
        task_ids = [t.id for t in stored_tasks(adapter_cls, artifacts)]

        async def body(runner: BenchmarkRunner) -> ScoreResult:
            return await score_run(runner, artifacts, task_ids, config.model)

        options = stored_options(adapter_cls, config)
        result = _run_async(
            lambda: _with_runner(
                adapter_cls, service_url, needs_service(adapter_cls), dataset_name, body, options, run_id
            )
        )
        print_score(result, artifacts)

    @cli.command("list-tasks")
    @_dataset_options(adapter_cls)
    @_service_option
    @click.option("--json", "as_json", is_flag=True, help="one JSON task per line")
    def list_tasks(
        dataset_file: Path | None,
        dataset_name: str | None,
        problem: Path | None,
        service_url: str | None,
        as_json: bool,
        **extra: Any,
    ) -> None:
        """Print the tasks a run would see (id and question); takes the runner's own flags too."""
        _exclusive_dataset(dataset_file, dataset_name, problem)

        async def body(runner: BenchmarkRunner) -> list[Task]:
            tasks, _ = await load_dataset(runner, dataset_file, dataset_name, problem, default_dataset_file)
            return tasks

        url = service_url if dataset_name else None  # only a service dataset needs the service
        tasks = _run_async(
            lambda: _with_runner(adapter_cls, url, dataset_name is not None, dataset_name, body, extra)
        )
        for t in tasks:
            if as_json:
                click.echo(t.model_dump_json())
            else:
                first = t.question.strip().splitlines()[0] if t.question.strip() else ""
                click.echo(f"{t.id}\t{first[:100]}")

    list_tasks.params.extend(adapter_cls.cli_options())

    @cli.command()
    @_run_dir_options
    def status(run_id: str, output_dir: Path) -> None:
        """Progress of a run, read from its files (safe while the run is going)."""
        artifacts = open_run(output_dir, run_id)
        config = read_run_config(artifacts)
        try:
            tasks = [r.get("id") for r in artifacts.read_task_rows()]
            gens = artifacts.read_generations()
            evals = artifacts.read_evaluations()
        except ArtifactError as exc:
            raise FatalError(str(exc)) from exc
        finished = failed = 0
        for t in tasks:
            g, e = gens.get(str(t)), evals.get(str(t))
            if is_failed(g, e):
                failed += 1
            elif e is not None:
                finished += 1
        table = Table(title=f"run {run_id} ({config.runner}, model {config.model})")
        table.add_column("item")
        table.add_column("value", justify="right")
        rows: list[tuple[str, Any]] = [
            ("dataset", f"{config.dataset.kind}:{config.dataset.name}"),
            ("tasks", len(tasks)),
            ("generated", sum(1 for t in tasks if t in gens)),
            ("evaluated", sum(1 for t in tasks if t in evals)),
            ("finished", finished),
            ("failed", failed),
            ("pending", len(tasks) - finished - failed),
        ]
        torn = {f.path.name: f.torn_tail_bytes() for f in (artifacts.generations, artifacts.evaluations)}
        rows += [(f"torn tail in {k}", f"{v} bytes (dropped on resume)") for k, v in torn.items() if v]
        score_result = artifacts.read_score()
        if score_result is not None:
            rows += [(f"score.{k}", f"{v:.4g}") for k, v in score_result.metrics.items()]
        for k, v in rows:
            table.add_row(k, str(v))
        Console(file=sys.stdout).print(table)

    report_hook = getattr(adapter_cls, "report", None)
    if callable(report_hook):

        @cli.command()
        @_run_dir_options
        def report(run_id: str, output_dir: Path) -> None:
            """The runner's report of a run."""
            artifacts = open_run(output_dir, run_id)
            click.echo(report_hook(artifacts.run_dir))

    return cli


# ---- the commands' bodies (plain functions, so a runner's own commands can reuse them) ----------


def execute_run(adapter_cls: type[BenchmarkRunner], args: RunArgs, default_dataset_file: Path | None) -> int:
    """The ``run`` command; returns the exit code."""
    offline = adapter_cls.OFFLINE_MODELS.get(args.model)
    llm_config = LLMConfig(
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        max_turns=args.max_turns,
        timeout=args.timeout,
        extra=args.extra,
    )
    run_id = args.run_id or default_run_id(adapter_cls.NAME, args.model)
    required = needs_service(adapter_cls, args.dataset_name)

    async def body(runner: BenchmarkRunner) -> int:
        tasks, dataset = await load_dataset(
            runner, args.dataset_file, args.dataset_name, args.problem, default_dataset_file
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
                **args.extra,
            },
            info={"base_url": args.base_url, "offline_model": offline is not None, "argv": sys.argv[1:]},
        )
        artifacts = RunArtifacts(args.output_dir / run_id)
        if args.overwrite and artifacts.run_dir.exists():
            artifacts.create()  # take the lock first: never delete a run another process is writing
            artifacts.delete()
            click.echo(f"--overwrite: deleted the old run directory {artifacts.run_dir}", err=True)
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

                async def generate(task: Task, log_dir: Path) -> GenerationResult:
                    return await offline(runner, task, llm_config, log_dir)

            else:

                async def generate(task: Task, log_dir: Path) -> GenerationResult:
                    return await runner.generate(task, args.model, llm_config, log_dir)

            engine = RunEngine(
                runner,
                artifacts,
                generate,
                model=args.model,
                concurrency=args.concurrency or runner.default_concurrency(model_calls=offline is None),
                progress=make_progress(),
            )
            stats = await engine.run(plan)
            score = await score_run(runner, artifacts, run_task_ids, args.model)
        print_score(
            score,
            artifacts,
            {
                "selected": len(selected),
                "resumed (skipped)": len(plan.finished),
                "generated now": stats.generated,
                "evaluated now": stats.evaluated,
                "failed": len(stats.failed_ids),
                "wall time": f"{stats.wall_s:.2f}s",
            },
        )
        if stats.failed_ids:
            shown = ", ".join(stats.failed_ids[:10]) + (" ..." if len(stats.failed_ids) > 10 else "")
            click.echo(
                f"{len(stats.failed_ids)} task(s) failed: {shown} (details in {artifacts.run_dir}/logs/<task>/; "
                "rerun the same command to retry them)",
                err=True,
            )
            return EXIT_TASKS_FAILED
        return EXIT_OK

    return _run_async(
        lambda: _with_runner(
            adapter_cls, args.service_url, required, args.dataset_name, body, args.extra, run_id
        )
    )


def execute_evaluate(
    adapter_cls: type[BenchmarkRunner],
    output_dir: Path,
    run_id: str,
    service_url: str | None,
    concurrency: int | None,
    task_ids: tuple[str, ...],
) -> int:
    """The ``evaluate`` command: evaluate stored generations again (appended; the latest wins)."""
    artifacts = open_run(output_dir, run_id)
    config = read_run_config(artifacts)
    dataset_name = config.dataset.name if config.dataset.kind == "name" else None
    tasks = stored_tasks(adapter_cls, artifacts)
    selected = select_tasks(tasks, task_ids, None)

    async def body(runner: BenchmarkRunner) -> int:
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
                progress=make_progress(),
            )
            stats = await engine.run(plan)
            score = await score_run(runner, artifacts, [t.id for t in tasks], config.model)
        print_score(score, artifacts, {"re-evaluated": stats.evaluated, "failed": len(stats.failed_ids)})
        return EXIT_TASKS_FAILED if stats.failed_ids else EXIT_OK

    required = needs_service(adapter_cls, dataset_name)
    options = stored_options(adapter_cls, config)
    return _run_async(
        lambda: _with_runner(adapter_cls, service_url, required, dataset_name, body, options, run_id)
    )


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
