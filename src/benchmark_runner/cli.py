"""The command line every runner gets from ``make_cli(RunnerClass)``: a thin shell over the Python API.

Commands: ``run`` (generate + evaluate + score, resumable), ``evaluate`` (re-evaluate the stored
generations of a run), ``score`` (re-score its stored evaluations), ``list-tasks``, ``status``
(progress of a run, read from its files), and ``report`` when the runner defines ``report(run_dir)``.
The group is a plain :class:`click.Group`: a runner adds its own commands with ``@cli.command()``.

Each command parses its flags, calls the body that the Python API calls too (:mod:`.runs`:
``run`` does what ``benchmark_runner.run`` does with the flags as keyword arguments), prints the result
and turns the API's errors into exit codes (also in ``--help``):

* 0 - every selected task was generated and evaluated (whatever the verdicts);
* 1 - some tasks failed: generate or evaluate raised (recorded as errors; a rerun retries them);
* 2 - usage error: bad flags, unknown task ids, an unreadable dataset file (click's default);
* 3 - run refused: the run directory holds another configuration (use ``--overwrite``) or is in use;
* 4 - fatal: the benchmark service is unreachable or missing, scoring failed, a run file is corrupt.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click
from rich.console import Console
from rich.table import Table

from . import runs
from .artifacts import ArtifactError, RunArtifacts
from .base import DEFAULT_CONCURRENCY, BenchmarkRunner
from .checkpoint import is_failed
from .client import SERVICE_URL_ENV
from .runs import (
    EXIT_FATAL,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TASKS_FAILED,
    EXIT_USAGE,
    RunRequest,
    RunResult,
    check_run_id,
    open_run,
    read_run_config,
)
from .schemas import ScoreResult, Task

__all__ = [
    "EXIT_FATAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TASKS_FAILED",
    "EXIT_USAGE",
    "BenchmarkCLI",
    "execute_evaluate",
    "execute_run",
    "make_cli",
    "parse_run_args",
    "print_run_summary",
    "print_score",
]

EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0  all selected tasks generated and evaluated\n"
    "  1  some tasks failed (generate or evaluate raised; rerun to retry them)\n"
    "  2  usage error (bad flags, unknown task id, unreadable dataset)\n"
    "  3  run refused (stored config differs: use --overwrite; or run in use)\n"
    "  4  fatal (benchmark service unreachable or missing, scoring failed, corrupt run files)"
)

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
    try:
        return check_run_id(value)
    except runs.RunUsageError as exc:
        raise click.BadParameter(str(exc)) from exc


@contextmanager
def cli_errors() -> Iterator[None]:
    """The API's errors as click exceptions with the documented exit codes (a click exception a
    runner's hook raised comes back as itself)."""
    try:
        yield
    except runs.RunError as exc:
        if isinstance(exc.__cause__, click.ClickException):
            raise exc.__cause__ from None
        if isinstance(exc, runs.RunUsageError):
            raise click.UsageError(str(exc)) from exc
        if isinstance(exc, runs.RunRefusedError):
            raise RunRefused(str(exc)) from exc
        raise FatalError(str(exc)) from exc


def _run_async(fn: Callable[[], Awaitable[R]]) -> R:
    """Run a coroutine of the API, turning its errors into the documented exit codes."""
    with cli_errors():
        return anyio.run(fn)


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


def print_run_summary(result: RunResult) -> int:
    """What ``run`` prints for a result (the table on stdout, failed tasks on stderr); its exit code."""
    print_score(
        result.score,
        result.artifacts,
        {
            "selected": result.selected,
            "resumed (skipped)": result.resumed,
            "generated now": result.generated,
            "evaluated now": result.evaluated,
            "failed": len(result.failed_ids),
            "wall time": f"{result.wall_s:.2f}s",
        },
    )
    failed = result.failed_ids
    if failed:
        shown = ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else "")
        click.echo(
            f"{len(failed)} task(s) failed: {shown} (details in {result.run_dir}/logs/<task>/; "
            "rerun the same command to retry them)",
            err=True,
        )
    return result.exit_code


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


def make_cli(adapter_cls: type[BenchmarkRunner], default_dataset_file: Path | None = None) -> BenchmarkCLI:
    """Build the runner's click group. Add commands with ``@cli.command()`` on the returned group.

    ``default_dataset_file``: what ``run`` loads when no dataset is named (default: the runner's
    ``DEFAULT_DATASET_FILE``, which is also what ``benchmark_runner.run`` loads)."""
    if default_dataset_file is None:
        default_dataset_file = adapter_cls.DEFAULT_DATASET_FILE
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
        options = {name: kwargs.pop(name) for name in extra_names}
        request = RunRequest(**kwargs, options=options)
        with cli_errors():
            runs.exclusive_dataset(request.dataset_file, request.dataset_name, request.problem)
        sys.exit(execute_run(adapter_cls, request, default_dataset_file))

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
        result = _run_async(lambda: runs.execute_score(adapter_cls, output_dir, run_id, service_url))
        print_score(result.score, result.artifacts)

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
        with cli_errors():
            runs.exclusive_dataset(dataset_file, dataset_name, problem)

        async def load() -> list[Task]:
            url = service_url if dataset_name else None  # only a service dataset needs the service
            with runs.run_errors():
                async with runs.runner_session(
                    adapter_cls, url, dataset_name is not None, dataset_name, extra
                ) as runner:
                    tasks, _ = await runs.load_dataset(
                        runner, dataset_file, dataset_name, problem, default_dataset_file
                    )
            return tasks

        tasks = _run_async(load)
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
        with cli_errors():
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
            with cli_errors():
                artifacts = open_run(output_dir, run_id)
            click.echo(report_hook(artifacts.run_dir))

    return cli


# ---- the commands' bodies (plain functions, so a runner's own commands can reuse them) ----------


def execute_run(
    adapter_cls: type[BenchmarkRunner], args: RunRequest, default_dataset_file: Path | None
) -> int:
    """The ``run`` command: :func:`.runs.execute_run`, the summary printed; returns the exit code."""
    result = _run_async(
        lambda: runs.execute_run(
            adapter_cls, args, default_dataset_file=default_dataset_file, argv=sys.argv[1:]
        )
    )
    return print_run_summary(result)


def execute_evaluate(
    adapter_cls: type[BenchmarkRunner],
    output_dir: Path,
    run_id: str,
    service_url: str | None,
    concurrency: int | None,
    task_ids: tuple[str, ...],
) -> int:
    """The ``evaluate`` command: evaluate stored generations again (appended; the latest wins)."""
    result = _run_async(
        lambda: runs.execute_evaluate(adapter_cls, output_dir, run_id, service_url, concurrency, task_ids)
    )
    print_score(
        result.score, result.artifacts, {"re-evaluated": result.evaluated, "failed": len(result.failed_ids)}
    )
    return result.exit_code


def parse_run_args(adapter_cls: type[BenchmarkRunner], argv: list[str]) -> dict[str, Any]:
    """``NAME-runner run`` flags as the keyword arguments of ``benchmark_runner.run`` (the runner's own
    flags included; flags not given take their defaults), e.g. for a script that passes its command
    line on. A bad flag raises click's ``UsageError``."""
    command = make_cli(adapter_cls).commands["run"]
    ctx = command.make_context("run", list(argv))
    params = dict(ctx.params)
    params["task_id"] = tuple(params.get("task_id") or ())
    return params


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
