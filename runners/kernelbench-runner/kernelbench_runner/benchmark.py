"""The KernelBench runner: tasks from KernelBench, kernels from a multi-turn agent, scores like the paper.

``generate`` runs the agent (agent.py) with every kernel checked by the kernel service; ``evaluate``
sends the final kernel to the service once more (a fresh, independent measurement); ``score`` is
computed here with ``kernel_service.kernelbench.metrics`` so any service (even one with a generic ``/v1/score``)
yields the same fast_p / geomean / reward numbers. Runner options (``--backend``, ``--feedback``...)
arrive in ``LLMConfig.extra`` and through ``configure`` (see ``cli_options``); ``report RUN_ID``
writes the run's self-contained HTML page (report.py). ``--model solutions --solutions PATH`` judges
existing solutions instead of asking a model (solutions.py: one task per solution, its reference with it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import click
from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import ChatClient, LLMConfig
from benchmark_runner.schemas import (
    EvalResult,
    EvalResultData,
    EvalStatus,
    GenerationResult,
    GenerationStatus,
    ScoreResult,
    StrictModel,
    Task,
    TaskScore,
    describe_validation_error,
)
from kernel_service.kernelbench.metrics import fast_p_curve, outcome_counts, reward_of, summarize
from pydantic import Field, ValidationError

from .agent import AgentOptions, ChatModel, FeedbackMode, KernelAgent, Strategy
from .baselines import reference_model, solutions_model, torch_compile_model
from .problems import KernelBenchTask, load_problems, select, task_id_for
from .records import outcomes_from_evaluations, reported_fields
from .report import write_report
from .solutions import load_solutions

if TYPE_CHECKING:
    from benchmark_runner.service import BenchmarkService

DEFAULT_DATASET_FILE = Path(__file__).parent / "data" / "sample.jsonl"

log = logging.getLogger(__name__)

BackendName = Literal["cuda", "triton", "cpp", "torch"]
PrecisionName = Literal["fp32", "fp16", "bf16"]

_STATUS_OF_OUTCOME: dict[str, EvalStatus] = {
    "correct": EvalStatus.CORRECT,
    "incorrect": EvalStatus.INCORRECT,
    "compiled": EvalStatus.INCORRECT,
    "timeout": EvalStatus.TIMEOUT,
}


class KernelBenchOptions(StrictModel):
    """Runner options; the CLI puts them in ``LLMConfig.extra`` under these names."""

    backend: BackendName = "cuda"
    feedback: FeedbackMode = "until_correct"
    strategy: Strategy = "best-of-n"
    samples: int = Field(default=1, ge=1, le=64)
    level: list[int] = Field(default_factory=list, description="keep only these levels (empty: all)")
    tolerance: float | None = Field(default=None, gt=0, description="atol = rtol; None: upstream defaults")
    tf32: Literal["default", "off", "on"] = "default"
    precision: PrecisionName = Field(
        default="fp32", description="dtype both sides run at (inputs, init inputs, parameters and buffers)"
    )
    module_mode: Literal["train", "eval"] = Field(
        default="train", description="the mode both models are called in (eval: CUDA-L1's judge's)"
    )
    price_in: float | None = Field(default=None, ge=0, description="$ per 1M prompt tokens")
    price_out: float | None = Field(default=None, ge=0, description="$ per 1M completion tokens")
    prompt_source: Literal["full", "model"] = "full"
    solutions: str | None = Field(
        default=None, description="a folder or JSON/JSONL file of existing solutions to judge (solutions.py)"
    )

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None) -> KernelBenchOptions:
        """Pick our keys out of ``extra`` (None values mean 'not given'); bad values name the option."""
        data = {k: v for k, v in (extra or {}).items() if k in cls.model_fields and v is not None}
        if isinstance(data.get("level"), int | str):
            data["level"] = [data["level"]]
        if "level" in data:
            data["level"] = [int(x) for x in data["level"]]
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise click.BadParameter(describe_validation_error(exc)) from exc

    def eval_options(self) -> dict[str, Any]:
        """``KernelEvalRequest.options`` for every evaluation of this run (the verdict's options: the
        agent's own calls add ``profile`` with ``--feedback profile``, ``agent_eval_options``)."""
        options: dict[str, Any] = {"tf32": self.tf32} if self.tf32 != "default" else {}
        if self.tolerance is not None:
            options["tolerance"] = self.tolerance
        if self.precision != "fp32":  # fp32 is every service's default: requests stay as they were
            options["precision"] = self.precision
        if self.module_mode != "train":
            options["module_mode"] = self.module_mode
        return options

    def agent_eval_options(self) -> dict[str, Any]:
        """The options of the kernels the agent runs: ``eval_options``, with a profile of each one when
        the feedback is ``profile``."""
        return {**self.eval_options(), **({"profile": True} if self.feedback == "profile" else {})}


def _option(*decls: str, **kwargs: Any) -> click.Option:
    return click.Option(list(decls), **kwargs)


def make_cli_options() -> list[click.Option]:
    """Runner-specific flags for ``run`` (fresh objects per CLI; values land in ``LLMConfig.extra``)."""
    return [
        _option(
            "--backend",
            type=click.Choice(["cuda", "triton", "cpp", "torch"]),
            default=None,
            help="kernel language the model writes and the service compiles [default: cuda]",
        ),
        _option(
            "--feedback",
            type=click.Choice(["until_correct", "none", "always", "profile"]),
            default=None,
            help="until_correct: stop at the first correct kernel; none: single-shot, no tools; "
            "always: keep optimising for --max-turns; profile: as always, each correct kernel's feedback "
            "with a profile of its kernels and the reference's [default: until_correct]",
        ),
        _option(
            "--strategy",
            type=click.Choice(["best-of-n", "tree"]),
            default=None,
            help="best-of-n: --samples independent agents; tree: sample, keep the best half, refine [default: best-of-n]",
        ),
        _option(
            "--samples",
            type=click.IntRange(1, 64),
            default=None,
            help="parallel samples per task [default: 1]",
        ),
        _option(
            "--level",
            type=click.IntRange(1, 4),
            multiple=True,
            help="keep only this KernelBench level (repeatable)",
        ),
        _option(
            "--tolerance",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="atol = rtol for correctness [default: upstream's 1e-4 fp32, 1e-2 fp16/bf16]",
        ),
        _option(
            "--tf32",
            type=click.Choice(["default", "off", "on"]),
            default=None,
            help="TF32 for fp32 matmuls and convolutions, reference and kernel alike: default keeps "
            "PyTorch's (cuDNN convolutions may use it; as upstream), off checks against IEEE fp32 "
            "[default: default]",
        ),
        _option(
            "--precision",
            type=click.Choice(["fp32", "fp16", "bf16"]),
            default="fp32",
            show_default=True,
            help="dtype of the reference and the kernel alike: floating inputs, init inputs and the models' "
            "parameters and buffers cast to it, as upstream KernelBench's precision (default tolerance "
            "1e-4 fp32, 1e-2 fp16/bf16); part of the run's identity",
        ),
        _option(
            "--module-mode",
            type=click.Choice(["train", "eval"]),
            default=None,
            help="the mode both models are called in: train, as built (upstream KernelBench's: BatchNorm by "
            "each batch's statistics, dropout on); eval calls each model's eval() first, as CUDA-L1's judge "
            "does (to compare with its published speedups) [default: train]",
        ),
        _option(
            "--price-in", type=click.FloatRange(min=0), default=None, help="$ per 1M prompt tokens (for cost)"
        ),
        _option("--price-out", type=click.FloatRange(min=0), default=None, help="$ per 1M completion tokens"),
        _option(
            "--prompt-source",
            type=click.Choice(["full", "model"]),
            default=None,
            help="full: the whole problem file as upstream prompts; model: Model and imports only [default: full]",
        ),
        _option(
            "--solutions",
            type=click.Path(exists=True, resolve_path=True),
            default=None,
            help="judge existing solutions, one task each (with --model solutions, which asks no model): a "
            "folder of upstream's level_L_problem_P_sample_S_kernel.py files (references: the dataset's "
            "problems), or a JSON/JSONL file of rows with their own ref_code and custom_code (CUDA-L1's "
            "layouts); backend inferred from each source unless --backend",
        ),
    ]


def response_to_eval_data(body: Any, task: KernelBenchTask, generation: GenerationResult) -> EvalResultData:
    """Read a kernel service answer leniently (a KernelEvalResponse, or a generic EvalResultData)."""
    if not isinstance(body, dict):
        raise ValueError(f"kernel service answered {type(body).__name__}, expected a JSON object")
    details: dict[str, Any]
    if "outcome" in body and "status" not in body:
        outcome = str(body["outcome"])
        speedup = body.get("speedup")
        reward = body.get("reward")
        score = float(reward) if isinstance(reward, int | float) else reward_of(outcome, speedup)
        status = _STATUS_OF_OUTCOME.get(outcome, EvalStatus.ERROR)
        details = dict(body)
    else:
        generic = EvalResultData.model_validate(body)
        status, score, outcome = generic.status, generic.score, generic.outcome or generic.status.value
        details = dict(generic.details)
    details["level"] = task.level
    details["usage"] = generation.usage.model_dump()
    return EvalResultData(status=status, score=score, outcome=outcome, details=details)


class KernelBenchRunner(BenchmarkRunner):
    """KernelBench levels 1-4 through the kernel service."""

    NAME: ClassVar[str] = "kernelbench"
    PAYLOAD_TYPE: ClassVar[str] = "code"
    PAYLOAD_SCHEMA_VERSION: ClassVar[int] = 1
    GENERATION_VERSION_ENV: ClassVar[str] = "KERNELBENCH_GENERATION_VERSION"
    TASK_MODEL: ClassVar[type[Task]] = KernelBenchTask
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {
        "reference": reference_model,
        "torch-compile": torch_compile_model,
        "solutions": solutions_model,
    }
    DATASET_SOURCES: ClassVar[tuple[str, ...]] = ("hub",)  # --dataset-file hub[:NAME]: the public dataset
    DEFAULT_DATASET_FILE: ClassVar[Path | None] = DEFAULT_DATASET_FILE  # the bundled sample

    def __init__(
        self, service: Any = None, dataset_name: str | None = None, options: dict[str, Any] | None = None
    ):
        super().__init__(service, dataset_name)
        self.settings = KernelBenchOptions()
        self.solutions_skipped: list[str] = []
        self.configure(options or {})

    @classmethod
    def cli_options(cls) -> list[click.Option]:
        return make_cli_options()

    def configure(self, options: dict[str, Any]) -> None:
        """Take the run's runner options (the CLI calls this before ``load_tasks``); validated here so a
        bad value names its option. ``self.options`` keeps the raw dict, ``self.settings`` the typed view."""
        self.settings = KernelBenchOptions.from_extra(options)
        super().configure(options)

    @staticmethod
    def report(run_dir: Path) -> str:
        """``report RUN_ID``: write ``<run dir>/report.html`` (prices as the run was started) and return
        its path, which the CLI prints."""
        config_file = run_dir / "config.json"
        stored: dict[str, Any] = {}
        if config_file.is_file():
            try:
                raw = json.loads(config_file.read_text(encoding="utf-8"))
                stored = dict(raw.get("generation_options") or {})
            except (json.JSONDecodeError, AttributeError) as exc:
                raise click.ClickException(f"{config_file}: not a run config ({exc})") from exc
        settings = KernelBenchOptions.from_extra(stored)
        return str(write_report(run_dir, None, settings.price_in, settings.price_out).resolve())

    # ---- the service -----------------------------------------------------------------------------

    def kernel_service(self) -> ServiceClient:
        """The kernel service client the CLI opened (``--service-url`` or the embedded service)."""
        if self.service is None:
            raise RuntimeError(
                f"{self.NAME} checks kernels through a kernel service: construct it with a ServiceClient "
                "(the CLI passes --service-url or starts the embedded service)"
            )
        return self.service

    # ---- tasks -------------------------------------------------------------------------------------

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        source = dataset_file if dataset_file is not None else DEFAULT_DATASET_FILE
        if self.settings.solutions is not None:
            return list(self.load_solutions(Path(self.settings.solutions), source))
        tasks = load_problems(source)
        return list(select(tasks, levels=self.settings.level or None))

    def load_solutions(self, path: Path, dataset_file: Path) -> list[KernelBenchTask]:
        """``--solutions PATH``: one task per stored solution (solutions.py); a folder's references are
        ``dataset_file``'s problems. Bad input is a usage error of ``--solutions`` naming file, row and
        field; rows without solution code are skipped and counted (logged, and in ``solutions_skipped``)."""
        forced = self.options.get("backend")  # None: not given, inferred from each solution
        try:
            loaded = load_solutions(
                path, lambda: load_problems(dataset_file), levels=self.settings.level, backend=forced
            )
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="'--solutions'") from exc
        self.solutions_skipped = loaded.skipped
        if loaded.skipped:
            shown = "; ".join(loaded.skipped[:3]) + ("; ..." if len(loaded.skipped) > 3 else "")
            log.warning(
                "%s: %d solution(s) to judge, %d without solution code skipped (%s)",
                path,
                len(loaded.tasks),
                len(loaded.skipped),
                shown,
            )
        return loaded.tasks

    def load_problem(self, path: Path) -> Task:
        """``--problem FILE``: a KernelBench problem file (``level1/19_ReLU.py``) or one JSON task."""
        if path.suffix == ".py":
            (task,) = load_problems(path)
            return task
        return super().load_problem(path)

    async def load_tasks_from_service(self, dataset_name: str) -> list[Task]:
        """Tasks a kernel service hosts (``--dataset-name level1``...), re-keyed to this runner's ids
        (``level1/19_ReLU`` -> ``L1_19_ReLU``) so ids, filters and resume agree whatever the source."""
        tasks = await super().load_tasks_from_service(dataset_name)
        levels = set(self.settings.level)
        out: list[Task] = []
        for t in tasks:
            if isinstance(t, KernelBenchTask) and (not levels or t.level in levels):
                out.append(t.model_copy(update={"id": task_id_for(t.level, t.problem_id, t.name)}))
        return out

    # ---- generation ----------------------------------------------------------------------------------

    def evaluate_fn(self, task: KernelBenchTask, options: KernelBenchOptions) -> Any:
        """The agent's ``evaluate_fn``: one kernel of ``task`` through the kernel service's /v1/evaluate."""

        async def evaluate(solution: str, backend: str) -> dict[str, Any]:
            body = self._request(task, solution, backend, options.agent_eval_options())
            answer = await self.kernel_service().post("/v1/evaluate", body)
            if not isinstance(answer, dict):
                raise ValueError(f"kernel service answered {type(answer).__name__}, expected a JSON object")
            return answer

        return evaluate

    def _request(
        self, task: KernelBenchTask, solution: str, backend: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "dataset": self.dataset_name,
            "reference": task.reference_code,
            "solution": solution,
            "backend": backend,
            "options": options,
        }

    async def generate(
        self, task: Task, model: str, llm_config: LLMConfig, log_dir: Path
    ) -> GenerationResult:
        async with ChatClient(llm_config) as client:
            generation, _ = await self.generate_with(client, task, model, llm_config, log_dir)
        return generation

    async def generate_with(
        self,
        chat: ChatModel,
        task: Task,
        model: str,
        llm_config: LLMConfig,
        log_dir: Path | None,
        messages: list[dict[str, Any]] | None = None,
    ) -> tuple[GenerationResult, KernelAgent]:
        """``generate`` with the model client given: the one agent run both front ends share (the
        ``run`` command, and the RL environment, whose client is its trainer's model proxy). Returns the
        agent too: its ``records`` are the per-kernel feedback files ``log_dir`` gets (none if ``None``),
        its ``failure`` what ended the run early. ``messages`` opens the conversation (``KernelAgent.run``)."""
        if not isinstance(task, KernelBenchTask):
            raise TypeError(f"expected a KernelBenchTask, got {type(task).__name__}")
        given = {k: v for k, v in llm_config.extra.items() if v is not None}  # None: flag not given
        options = KernelBenchOptions.from_extra({**self.settings.model_dump(), **given})
        agent_options = AgentOptions(
            backend=options.backend,
            max_turns=llm_config.max_turns,
            feedback=options.feedback,
            strategy=options.strategy,
            samples=options.samples,
            prompt_source=options.prompt_source,
        )
        agent = KernelAgent(chat, self.evaluate_fn(task, options), agent_options, log_dir)
        result = await agent.run(task, messages)
        if result.payload is not None and log_dir is not None:
            final = log_dir / "kernels" / "final.py"
            final.parent.mkdir(parents=True, exist_ok=True)
            final.write_text(result.payload, encoding="utf-8")
        generation = GenerationResult(
            task_id=task.id,
            model=model,
            payload=result.payload,
            payload_type=self.PAYLOAD_TYPE,
            payload_schema_version=self.PAYLOAD_SCHEMA_VERSION,
            generation_version=self.generation_version(),
            status=GenerationStatus.OK if result.payload is not None else GenerationStatus.ERROR,
            turns=result.turns,
            usage=result.usage,
            latency_s=result.latency_s,
            error=result.error,
            metadata={
                "backend": options.backend,
                "eval_options": options.eval_options(),
                "agent": agent_options.model_dump(),
                "final_file": "kernels/final.py" if result.payload is not None else None,
                "best": result.best.summary() if result.best else None,
                "best_result": result.best.result if result.best else None,
                "candidates": [c.summary() for c in result.candidates],
                "stop_reasons": result.stop_reasons,
            },
        )
        return generation, agent

    # ---- evaluation and score --------------------------------------------------------------------

    def build_evaluate_request(self, task: Task, generation: GenerationResult) -> dict[str, Any]:
        """A ``KernelEvalRequest``: reference by source (works with any service), the final kernel."""
        assert isinstance(task, KernelBenchTask)
        backend = str(generation.metadata.get("backend") or self.settings.backend)
        options = generation.metadata.get("eval_options")
        return self._request(
            task,
            str(generation.payload),
            backend,
            options if isinstance(options, dict) else self.settings.eval_options(),
        )

    async def evaluate(self, task: Task, generation: GenerationResult) -> EvalResult:
        if generation.payload is None:
            data = EvalResultData(
                status=EvalStatus.SKIPPED,
                score=reward_of("no_kernel", None),
                outcome="no_kernel",
                details={
                    "reason": generation.error or "no kernel",
                    "level": getattr(task, "level", None),
                    "usage": generation.usage.model_dump(),
                },
            )
            return EvalResult(task_id=task.id, model=generation.model, data=data)
        assert isinstance(task, KernelBenchTask)
        service = self.kernel_service()
        body = await service.post("/v1/evaluate", self.build_evaluate_request(task, generation))
        data = response_to_eval_data(body, task, generation)
        solution = generation.metadata.get("solution")
        if isinstance(solution, dict):  # a stored solution's origin and fields (score_default...)
            data.details["solution"] = solution
        return EvalResult(task_id=task.id, model=generation.model, data=data)

    async def score(self, evaluations: list[EvalResult], model: str) -> ScoreResult:
        """Computed locally (``kernel_service.kernelbench.metrics``): the same numbers whatever service evaluated."""
        records = outcomes_from_evaluations(evaluations)
        overall, groups = summarize(records, self.settings.price_in, self.settings.price_out)
        tolerances = sorted(
            {
                f"atol={e.data.details.get('atol'):g} rtol={e.data.details.get('rtol'):g}"
                for e in evaluations
                if isinstance(e.data.details.get("atol"), int | float)
                and isinstance(e.data.details.get("rtol"), int | float)
            }
        )
        tf32 = sorted(
            {
                ", ".join(f"{k} {'on' if v else 'off'}" for k, v in sorted(t.items()))
                for e in evaluations
                if isinstance(t := e.data.details.get("tf32"), dict)
            }
        )
        precisions = sorted(
            {str(e.data.details["precision"]) for e in evaluations if e.data.details.get("precision")}
        )
        modes = sorted({str(m) for e in evaluations if (m := e.data.details.get("module_mode"))})
        return ScoreResult(
            model=model,
            n_tasks=len(evaluations),
            metrics=overall,
            groups=groups,
            per_task=[
                TaskScore(
                    task_id=r.task_id,
                    status=e.data.status,
                    score=r.reward,
                    outcome=r.outcome,
                    details={"speedup": r.speedup, "level": r.level, **reported_fields(e)},
                )
                for r, e in zip(records, evaluations, strict=True)
            ],
            details={
                "outcomes": outcome_counts(records),
                "tolerance": tolerances,
                "tf32": tf32,
                "precision": precisions or [self.settings.precision],
                "module_mode": modes or [self.settings.module_mode],
                "fast_p_curve": fast_p_curve(records, [i / 10 for i in range(31)]),
                "price_in": self.settings.price_in,
                "price_out": self.settings.price_out,
            },
        )

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:
        """The kernel service in-process: every visible GPU, or CPU (torch/cpp backends) when none."""
        from .service import make_service  # imported late: starting the CLI stays fast

        return make_service(gpus=None, cpu_workers=1)
