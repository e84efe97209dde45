"""BackendBench runner: one task per PyTorch operator; the model writes ``<op>_kernel_impl``.

Tasks come from the suites the kernel service defines (smoke, opinfo, torchbench, facto) or from a
JSON/JSONL file of ``{"id", "question", "op", "suite"}`` rows. Evaluation goes to the kernel service
(its sandboxed workers run ``kernel_service.backendbench.evaluator``); scoring is local (weights).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import click
from kernel_service.backendbench.schemas import BackendBenchEvalRequest, BackendBenchOptions
from kernel_service.backendbench.suites import suite_ops
from pydantic import Field

from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import EvalResult, GenerationResult, ScoreResult, Task
from benchmark_runner.service import BenchmarkService

from . import scoring
from .agent import run_agent
from .baselines import aten_model, reference_model


class BackendBenchTask(Task):
    op: str = Field(min_length=1, description="aten op (``add``) or overload (``add.Tensor``)")
    suite: Literal["smoke", "opinfo", "torchbench", "facto"] = "smoke"


CLI_OPTIONS: list[click.Option] = [
    click.Option(
        ["--suite"],
        type=click.Choice(["smoke", "opinfo", "torchbench", "facto"]),
        default="smoke",
        show_default=True,
        help="BackendBench suite",
    ),
    click.Option(
        ["--ops"], default=None, help="comma-separated ops overriding the suite's list, e.g. add,mul"
    ),
    click.Option(
        ["--feedback"],
        type=click.Choice(["until_correct", "none"]),
        default="until_correct",
        show_default=True,
    ),
    click.Option(
        ["--weights"],
        default=None,
        help="score weights, e.g. correctness=0.5,overall=0.5 (default overall=1)",
    ),
    click.Option(
        ["--trace-file"], default=None, help="torchbench: a larger trace file (path on the service host)"
    ),
    click.Option(
        ["--kernel-dir"], default=None, help="where kernels/<op>/turn_<n>.py go (default: the task's log dir)"
    ),
]


class BackendBenchRunner(BenchmarkRunner):
    NAME: ClassVar[str] = "backendbench"
    PAYLOAD_TYPE: ClassVar[str] = "code"
    GENERATION_VERSION_ENV: ClassVar[str] = "BACKENDBENCH_GENERATION_VERSION"
    TASK_MODEL: ClassVar[type[Task]] = BackendBenchTask
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {"reference": reference_model, "aten": aten_model}  # type: ignore[dict-item]
    CLI_OPTIONS: ClassVar[list[click.Option]] = CLI_OPTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.extra: dict[str, Any] = {}
        self.eval_options: dict[str, Any] = {}

    def configure(self, extra: dict[str, Any]) -> None:
        """Runner options from the CLI (the same dict that lands in ``LLMConfig.extra``)."""
        self.extra = dict(extra)
        scoring.parse_weights(self.extra.get("weights"))  # fail early on a bad --weights
        if self.extra.get("trace_file"):
            self.eval_options["trace_file"] = self.extra["trace_file"]

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:
        from kernel_service.backendbench.service import BackendBenchService

        return BackendBenchService()

    # ---- tasks --------------------------------------------------------------------------------

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        suite = self.extra.get("suite") or "smoke"
        if dataset_file is not None:
            text = Path(dataset_file).read_text()
            rows = (
                json.loads(text)
                if text.lstrip().startswith("[")
                else [json.loads(line) for line in text.splitlines() if line.strip()]
            )
            tasks = self.parse_tasks(rows, str(dataset_file))
        else:
            ops = suite_ops(suite, self.extra.get("trace_file"))
            tasks = self.parse_tasks(
                [{"id": f"{suite}/{op}", "question": op, "op": op, "suite": suite} for op in ops],
                f"suite {suite}",
            )
        if self.extra.get("ops"):
            wanted = [o.strip() for o in str(self.extra["ops"]).split(",") if o.strip()]
            known = {t.op for t in tasks}  # type: ignore[attr-defined]
            tasks = [t for t in tasks if t.op in wanted]  # type: ignore[attr-defined]
            extra_ops = [o for o in wanted if o not in known]
            tasks += self.parse_tasks(
                [{"id": f"{suite}/{op}", "question": op, "op": op, "suite": suite} for op in extra_ops],
                "--ops",
            )
        return tasks

    # ---- generation ---------------------------------------------------------------------------

    async def generate(
        self, task: Task, model: str, llm_config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        if not self.extra:
            self.configure(llm_config.extra)
        return await run_agent(self, task, model, llm_config, log_dir)

    # ---- evaluation -----------------------------------------------------------------------------

    def eval_request(self, task: Task, source: str) -> BackendBenchEvalRequest:
        suite = task.suite  # type: ignore[attr-defined]
        return BackendBenchEvalRequest(
            dataset=f"backendbench-{suite}",
            op=task.op,  # type: ignore[attr-defined]
            suite=suite,
            source=source,
            task_id=task.id,
            options=BackendBenchOptions(**self.eval_options, timeout_s=task.timeout),
        )

    def build_evaluate_request(self, task: Task, generation: GenerationResult) -> dict[str, Any]:
        return self.eval_request(task, str(generation.payload)).model_dump(mode="json")

    async def evaluate_source(self, task: Task, source: str) -> dict[str, Any]:
        """One mid-generation evaluation (feedback for the next turn): the verdict's details."""
        service = self._require_service()
        body = await service.post("/v1/evaluate", self.eval_request(task, source).model_dump(mode="json"))
        details = dict(body.get("details") or {})
        details.setdefault("outcome", body.get("outcome"))
        return details

    async def score(self, evaluations: list[EvalResult], model: str) -> ScoreResult:
        weights = scoring.parse_weights(self.extra.get("weights"))
        suites = {e.task_id: e.task_id.split("/")[0] for e in evaluations}
        return scoring.score(evaluations, model, weights, suites)
