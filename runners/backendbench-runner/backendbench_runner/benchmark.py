"""BackendBench runner: one task per PyTorch operator; the model writes ``<op>_kernel_impl``.

Tasks are the ops of a suite the kernel service defines (``--suite smoke|opinfo|torchbench|facto``,
``--ops`` to pick some) or rows ``{"id", "question", "op", "suite"}`` of a ``--dataset-file``.
Evaluation is the kernel service's (POST /v1/evaluate with a BackendBench request, run by its sandboxed
workers); scoring is local: per op correctness x performance, weighted by ``--weights``, per suite.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

import click
from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.batching import BatchingClient
from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import EvalResult, GenerationResult, ScoreResult, Task
from kernel_service.backendbench.catalog import UnknownOpError, index_provenance
from kernel_service.backendbench.listing import suite_ops
from kernel_service.backendbench.schemas import (
    BackendBenchEvalRequest,
    BackendBenchEvalResponse,
    BackendBenchOptions,
)
from pydantic import Field

from . import scoring
from .agent import run_agent
from .baselines import aten_model, reference_model
from .options import RunOptions, cli_options

if TYPE_CHECKING:  # a runner that talks to a remote service imports neither FastAPI nor torch
    from benchmark_runner.service import BenchmarkService

#: Tasks in flight for an offline model when ``--concurrency`` is not given.
OFFLINE_CONCURRENCY = 1024
#: ``make_cli``'s default dataset file; loading it means "the tasks of ``--suite``".
BUNDLED_DATASET = Path(__file__).parent / "data" / "sample.jsonl"


@functools.lru_cache(maxsize=8)
def _say_once(text: str) -> None:
    """A note on stderr, once per process (the op list itself goes to stdout)."""
    click.echo(text, err=True)


class BackendBenchTask(Task):
    op: str = Field(min_length=1, description="aten op (``add``) or overload (``add.Tensor``)")
    suite: Literal["smoke", "opinfo", "torchbench", "facto"] = "smoke"


def _read_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of tasks")
        return rows
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
    return rows


def as_eval_result_data(answer: Any) -> dict[str, Any]:
    """A kernel-service answer to a BackendBench request as EvalResultData JSON.

    The service may answer the framework's generic ``EvalResultData`` (score = overall, the verdict in
    ``details``) or the bare :class:`BackendBenchEvalResponse`; both become the former.
    """
    if not isinstance(answer, dict):
        raise ValueError(f"the service answered {type(answer).__name__}, expected a JSON object")
    if "status" in answer:
        return answer
    return BackendBenchEvalResponse.model_validate(answer).to_eval_result_data().model_dump(mode="json")


def request_body(request: BackendBenchEvalRequest) -> dict[str, Any]:
    """``request`` as JSON, ``options.profile`` left out unless asked for: a request without a profile
    stays as it was (a service from before the option accepts it, and its cached verdicts still match)."""
    body = request.model_dump(mode="json")
    if not body["options"].get("profile"):
        body["options"].pop("profile", None)
    return body


class VerdictClient:
    """The service client, with ``POST /v1/evaluate`` answers normalised by :func:`as_eval_result_data`,
    and evaluations in flight together sent as one ``POST /v1/evaluate-batch`` (:class:`BatchingClient`:
    the kernel service judges a batch in a few worker jobs instead of one job per op).

    So the base class's ``evaluate`` (kept, so ``run`` starts the embedded service) reads either shape.
    """

    def __init__(self, inner: ServiceClient) -> None:
        self.inner = inner
        self.batching = BatchingClient(inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def post(self, path: str, body: Any) -> Any:
        answer = await self.batching.post(path, body)
        return as_eval_result_data(answer) if path == "/v1/evaluate" else answer


class BackendBenchRunner(BenchmarkRunner):
    NAME: ClassVar[str] = "backendbench"
    PAYLOAD_TYPE: ClassVar[str] = "code"
    GENERATION_VERSION_ENV: ClassVar[str] = "BACKENDBENCH_GENERATION_VERSION"
    TASK_MODEL: ClassVar[type[Task]] = BackendBenchTask
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {"reference": reference_model, "aten": aten_model}
    DEFAULT_DATASET_FILE: ClassVar[Path | None] = BUNDLED_DATASET

    def __init__(self, service: ServiceClient | None = None, dataset_name: str | None = None) -> None:
        wrapped = cast(ServiceClient, VerdictClient(service)) if service is not None else None
        super().__init__(wrapped, dataset_name)
        self.run_options = RunOptions()

    @classmethod
    def cli_options(cls) -> list[click.Option]:
        return cli_options()

    def configure(self, options: dict[str, Any]) -> None:
        """The ``run`` flags (also used by ``evaluate``/``score`` with the run's stored values)."""
        super().configure(options)
        self.run_options = RunOptions.parse(options)

    def default_concurrency(self, model_calls: bool) -> int:
        """Every task in flight for an offline model (and ``evaluate``): its kernels cost nothing to
        write, so they reach the service together and are judged as a few batches (see VerdictClient)."""
        return super().default_concurrency(model_calls) if model_calls else OFFLINE_CONCURRENCY

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:
        from .service import make_service

        return make_service()

    # ---- tasks --------------------------------------------------------------------------------

    def suite_tasks(self) -> list[Task]:
        opts = self.run_options
        try:
            ops = suite_ops(opts.suite, opts.trace_file)
        except UnknownOpError as exc:
            raise ValueError(str(exc)) from exc
        if opts.ops:
            unknown = [o for o in opts.ops if o not in ops]
            if unknown:
                raise ValueError(
                    f"--ops: {', '.join(unknown)} not in the {opts.suite} suite; its ops are: {', '.join(ops)}"
                )
            ops = opts.ops
        if opts.suite == "opinfo":
            _say_once(f"backendbench-runner: {index_provenance()}")
        rows = [{"id": f"{opts.suite}/{op}", "question": op, "op": op, "suite": opts.suite} for op in ops]
        return self.parse_tasks(rows, f"suite {opts.suite}")

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        if dataset_file is None or Path(dataset_file).resolve() == BUNDLED_DATASET.resolve():
            return self.suite_tasks()
        tasks = self.parse_tasks(_read_rows(Path(dataset_file)), str(dataset_file))
        if self.run_options.ops:
            wanted = set(self.run_options.ops)
            tasks = [t for t in tasks if t.op in wanted]  # type: ignore[attr-defined]
        return tasks

    # ---- generation ---------------------------------------------------------------------------

    async def generate(
        self, task: Task, model: str, llm_config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        assert isinstance(task, BackendBenchTask)

        async def evaluate_fn(source: str) -> dict[str, Any]:
            return await self.evaluate_source(task, source)

        return await run_agent(
            task.op,
            task.suite,
            task.id,
            model,
            llm_config,
            self.run_options,
            log_dir,
            evaluate_fn if self.service is not None else None,
        )

    # ---- evaluation -----------------------------------------------------------------------------

    def eval_request(self, task: Task, source: str, profile: bool = False) -> BackendBenchEvalRequest:
        """``profile``: ``options.profile`` (the agent's own evaluations with ``--feedback profile``; the
        run's verdict never asks for one)."""
        assert isinstance(task, BackendBenchTask)
        return BackendBenchEvalRequest(
            dataset=f"backendbench-{task.suite}",
            op=task.op,
            suite=task.suite,
            source=source,
            task_id=task.id,
            options=BackendBenchOptions(
                trace=self._trace_inputs(task),
                timeout_s=task.timeout,
                perf_processes=self.run_options.perf_processes,
                profile=profile,
            ),
        )

    def _trace_inputs(self, task: BackendBenchTask) -> dict[str, list[dict[str, Any]]] | None:
        """torchbench with ``--trace-file``: the op's inputs from the trace, sent with the request (the
        service's sandboxed workers read no file of the caller's); None: the service's bundled trace."""
        if task.suite != "torchbench" or not self.run_options.trace_file:
            return None
        from kernel_service.backendbench.traces import read_op_entries  # imports torch

        return read_op_entries(Path(self.run_options.trace_file), task.op)

    def build_evaluate_request(self, task: Task, generation: GenerationResult) -> dict[str, Any]:
        return request_body(self.eval_request(task, str(generation.payload)))

    async def evaluate_source(self, task: Task, source: str) -> dict[str, Any]:
        """One mid-generation evaluation (feedback for the next turn): the verdict's details, with a
        profile of a correct kernel when the feedback is ``profile``."""
        request = self.eval_request(task, source, profile=self.run_options.feedback == "profile")
        body = await self._require_service().post("/v1/evaluate", request_body(request))
        data = as_eval_result_data(body)
        details = dict(data.get("details") or {})
        details.setdefault("outcome", data.get("outcome"))
        return details

    # ``evaluate`` is the base class's: POST /v1/evaluate, read through VerdictClient.

    async def score(self, evaluations: list[EvalResult], model: str) -> ScoreResult:
        """Local: weights are the runner's, and the numbers do not depend on which service evaluated."""
        suites = {e.task_id: e.task_id.split("/")[0] for e in evaluations}
        return scoring.score(evaluations, model, self.run_options.weights, suites)

    # ---- report -------------------------------------------------------------------------------

    @classmethod
    def report(cls, run_dir: Path) -> str:
        """``backendbench-runner report RUN_ID``: per-suite summary and per-op table (markdown)."""
        from .report import render_report

        return render_report(run_dir)
