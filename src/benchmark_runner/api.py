"""The Python API of a run: ``run``, ``evaluate`` and ``score``, what ``NAME-runner run|evaluate|score`` do.

::

    from benchmark_runner import run
    from benchmark_runner.examples.arithmetic import ArithmeticRunner

    result = run(ArithmeticRunner, model="oracle", run_id="r1", output_dir="runs")
    result.score.metrics["correct_rate"]     # 1.0
    result.run_dir                           # runs/r1: the same files the CLI writes

Each function takes the command's options as keyword arguments under the flags' names
(``--task-id`` is ``task_id``, ``--max-tokens`` is ``max_tokens``) with the same defaults; a runner's
own flags (``cli_options``, e.g. KernelBench's ``--backend``) are further keyword arguments, checked and
completed with their defaults by the flags' own click types, so a run started here and one started by
the CLI have the same identity and resume each other. Both call the same bodies (:mod:`.runs`); the
command line (:mod:`.cli`) only parses flags, prints and maps errors to exit codes.

They return a :class:`RunResult` (the score, the run's :class:`~benchmark_runner.artifacts.RunArtifacts`
and what this call did) and raise a :class:`RunError` for what the CLI turns into an exit code: a
:class:`RunUsageError` (2: bad arguments, unknown task ids, an unreadable dataset), a
:class:`RunRefusedError` (3: the run directory holds another configuration, or is in use) or a
:class:`RunFatalError` (4: no service, scoring failed, corrupt run files). Tasks whose generate or
evaluate raised are not an exception: they are recorded and listed in ``RunResult.failed_ids``.

``run``/``evaluate``/``score`` block; ``arun``/``aevaluate``/``ascore`` are the same for async code.
Called where an event loop is already running (a Jupyter cell), the blocking ones run theirs in a
worker thread. Progress and notes go to stderr, as the CLI's do (``quiet=True``: nothing).

:func:`open_runner` is the other shape, for hosts that do their own loop over tasks (the RL
environments): a configured runner bound to a service for one unit of work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click

from .base import BenchmarkRunner
from .client import SERVICE_URL_ENV
from .runs import (
    EXIT_FATAL,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TASKS_FAILED,
    EXIT_USAGE,
    RunError,
    RunFatalError,
    RunRefusedError,
    RunRequest,
    RunResult,
    RunUsageError,
    check_run_id,
    exclusive_dataset,
    execute_evaluate,
    execute_run,
    execute_score,
)

__all__ = [
    "EXIT_FATAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TASKS_FAILED",
    "EXIT_USAGE",
    "RunError",
    "RunFatalError",
    "RunRefusedError",
    "RunRequest",
    "RunResult",
    "RunUsageError",
    "aevaluate",
    "arun",
    "ascore",
    "evaluate",
    "open_runner",
    "run",
    "runner_options",
    "score",
]

R = TypeVar("R")
RunnerT = TypeVar("RunnerT", bound=BenchmarkRunner)
PathLike = str | os.PathLike[str]


# ---- checking the keyword arguments -----------------------------------------------------------


def runner_options(adapter_cls: type[BenchmarkRunner], given: Mapping[str, Any]) -> dict[str, Any]:
    """The runner's own flags from Python values: each converted and checked by its click type, the
    ones not given filled with their defaults, as the CLI hands them to ``configure``. A scalar is
    accepted for a repeatable flag (``level=1`` for ``--level 1``)."""
    params = [p for p in adapter_cls.cli_options() if p.name]
    names = [p.name for p in params if p.name]
    unknown = sorted(set(given) - set(names))
    if unknown:
        own = ", ".join(names) or "none"
        raise RunUsageError(
            f"unknown option(s) {', '.join(unknown)} for {adapter_cls.NAME}: "
            f"see the keyword arguments of run(); the runner's own options: {own}"
        )
    ctx = click.Context(click.Command("run", params=list(params)), info_name="run")
    values: dict[str, Any] = {}
    for param in params:
        assert param.name is not None
        opts: dict[str, Any] = {}
        if param.name in given:
            value = given[param.name]
            if param.multiple and (isinstance(value, str | bytes) or not isinstance(value, Iterable)):
                value = (value,)
            opts[param.name] = value
        try:
            values[param.name], _ = param.handle_parse_result(ctx, opts, [])
        except click.BadParameter as exc:
            raise RunUsageError(exc.format_message()) from exc
    return values


def _at_least(name: str, value: float | None, low: float, *, open_low: bool = False) -> None:
    if value is not None and (value < low or (open_low and value == low)):
        raise RunUsageError(f"{name}: {value!r} is not {'>' if open_low else '>='} {low}")


def _as_path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)


def _as_ids(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _env_service_url(service_url: str | None) -> str | None:
    """``service_url``, else ``$BENCHMARK_SERVICE_URL`` (an empty one counts as unset, as for click)."""
    return service_url or os.environ.get(SERVICE_URL_ENV) or None


# ---- the entry points ----------------------------------------------------------------------------


async def arun(
    runner_cls: type[BenchmarkRunner],
    *,
    model: str,
    run_id: str | None = None,
    dataset_file: PathLike | None = None,
    dataset_name: str | None = None,
    problem: PathLike | None = None,
    service_url: str | None = None,
    concurrency: int | None = None,
    limit: int | None = None,
    task_id: str | Iterable[str] = (),
    output_dir: PathLike = "runs",
    overwrite: bool = False,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    temperature: float = 0.0,
    max_tokens: int = 4096,
    max_turns: int = 5,
    timeout: float = 300.0,
    quiet: bool = False,
    **options: Any,
) -> RunResult:
    """``NAME-runner run`` from async code: see :func:`run`."""
    if not model:
        raise RunUsageError("model is required: a model name, or an offline model of the runner")
    check_run_id(run_id)
    _at_least("concurrency", concurrency, 1)
    _at_least("limit", limit, 1)
    _at_least("max_tokens", max_tokens, 1)
    _at_least("max_turns", max_turns, 1)
    _at_least("timeout", timeout, 0, open_low=True)
    if not 0.0 <= temperature <= 2.0:
        raise RunUsageError(f"temperature: {temperature!r} is not in the range 0<=x<=2")
    request = RunRequest(
        model=model,
        run_id=run_id,
        dataset_file=_as_path(dataset_file),
        dataset_name=dataset_name,
        problem=_as_path(problem),
        service_url=_env_service_url(service_url),
        concurrency=concurrency,
        limit=limit,
        task_id=_as_ids(task_id),
        output_dir=Path(output_dir),
        overwrite=overwrite,
        base_url=base_url,
        api_key_env=api_key_env,
        temperature=float(temperature),
        max_tokens=max_tokens,
        max_turns=max_turns,
        timeout=float(timeout),
        options=runner_options(runner_cls, options),
    )
    exclusive_dataset(request.dataset_file, request.dataset_name, request.problem)
    return await execute_run(runner_cls, request, quiet=quiet)


def run(
    runner_cls: type[BenchmarkRunner],
    *,
    model: str,
    run_id: str | None = None,
    dataset_file: PathLike | None = None,
    dataset_name: str | None = None,
    problem: PathLike | None = None,
    service_url: str | None = None,
    concurrency: int | None = None,
    limit: int | None = None,
    task_id: str | Iterable[str] = (),
    output_dir: PathLike = "runs",
    overwrite: bool = False,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    temperature: float = 0.0,
    max_tokens: int = 4096,
    max_turns: int = 5,
    timeout: float = 300.0,
    quiet: bool = False,
    **options: Any,
) -> RunResult:
    """Generate and evaluate every selected task, then score: ``NAME-runner run``. Calling it again
    with the same arguments resumes the run (finished tasks are skipped, failed ones retried).

    ``model``: a model name (asked through ``base_url``, key in ``$api_key_env``) or one of the
    runner's ``OFFLINE_MODELS``. ``run_id``: the run directory's name under ``output_dir`` (default:
    ``<runner>-<model>``). The dataset: ``dataset_file`` (a file, a directory, or one of the runner's
    ``DATASET_SOURCES``), ``dataset_name`` (the service's) or ``problem`` (one problem file); none of
    them: the runner's ``DEFAULT_DATASET_FILE``. ``task_id`` (one id or several) and ``limit`` select
    tasks; ``service_url`` (default ``$BENCHMARK_SERVICE_URL``, else the runner's embedded service);
    ``concurrency``: tasks in flight; ``overwrite``: DELETE a stored run of this id and start over.
    ``temperature``, ``max_tokens``, ``max_turns``, ``timeout``: the model's. Any other keyword is one
    of the runner's own flags (``backend="torch"`` for ``--backend torch``).

    Raises :class:`RunUsageError`, :class:`RunRefusedError` or :class:`RunFatalError` where the CLI
    exits 2, 3 or 4; tasks that failed are in the result's ``failed_ids``.
    """
    given = dict(locals())  # every keyword above, by name (first: before anything else is bound)
    kwargs = {k: v for k, v in given.items() if k not in ("runner_cls", "options")}
    return _blocking(lambda: arun(runner_cls, **kwargs, **options))


async def aevaluate(
    runner_cls: type[BenchmarkRunner],
    *,
    run_id: str,
    output_dir: PathLike = "runs",
    service_url: str | None = None,
    concurrency: int | None = None,
    task_id: str | Iterable[str] = (),
    quiet: bool = False,
) -> RunResult:
    """``NAME-runner evaluate`` from async code: see :func:`evaluate`."""
    check_run_id(run_id)
    _at_least("concurrency", concurrency, 1)
    return await execute_evaluate(
        runner_cls,
        Path(output_dir),
        run_id,
        _env_service_url(service_url),
        concurrency,
        _as_ids(task_id),
        quiet=quiet,
    )


def evaluate(
    runner_cls: type[BenchmarkRunner],
    *,
    run_id: str,
    output_dir: PathLike = "runs",
    service_url: str | None = None,
    concurrency: int | None = None,
    task_id: str | Iterable[str] = (),
    quiet: bool = False,
) -> RunResult:
    """Evaluate the stored generations of run ``run_id`` again (e.g. after a service fix), then
    re-score: ``NAME-runner evaluate``. The runner's options are the ones the run was started with."""
    return _blocking(
        lambda: aevaluate(
            runner_cls,
            run_id=run_id,
            output_dir=output_dir,
            service_url=service_url,
            concurrency=concurrency,
            task_id=task_id,
            quiet=quiet,
        )
    )


async def ascore(
    runner_cls: type[BenchmarkRunner],
    *,
    run_id: str,
    output_dir: PathLike = "runs",
    service_url: str | None = None,
    quiet: bool = False,
) -> RunResult:
    """``NAME-runner score`` from async code: see :func:`score`."""
    check_run_id(run_id)
    return await execute_score(
        runner_cls, Path(output_dir), run_id, _env_service_url(service_url), quiet=quiet
    )


def score(
    runner_cls: type[BenchmarkRunner],
    *,
    run_id: str,
    output_dir: PathLike = "runs",
    service_url: str | None = None,
    quiet: bool = False,
) -> RunResult:
    """Score the stored evaluations of run ``run_id`` again and rewrite its ``score.json``:
    ``NAME-runner score``."""
    return _blocking(
        lambda: ascore(runner_cls, run_id=run_id, output_dir=output_dir, service_url=service_url, quiet=quiet)
    )


def _blocking(fn: Callable[[], Awaitable[R]]) -> R:
    """Run ``fn`` to completion on an event loop of its own: this thread's, or (where this thread
    already runs a loop, as in a notebook) a worker thread's."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="benchmark-run") as pool:
        return pool.submit(anyio.run, fn).result()


@asynccontextmanager
async def open_runner(
    runner_cls: type[RunnerT],
    *,
    service_url: str | None = None,
    run_id: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> AsyncIterator[RunnerT]:
    """A runner configured with ``options`` (what its ``configure`` takes) and bound to a service, for
    one unit of work of a host that drives tasks itself (an RL environment's rollout): the service at
    ``service_url``, else the runner's embedded service, started once per process and shared
    (``embedded.shared_service_url``). Every request names ``run_id``; the runner is closed after."""
    from .embedded import open_runner_service

    async with open_runner_service(runner_cls, service_url, run_id) as client:
        runner = runner_cls(service=client)
        try:
            runner.configure(dict(options or {}))
            yield runner
        finally:
            await runner.aclose()
