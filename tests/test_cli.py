"""The CLI's flags, in-process with click's CliRunner (the subprocess paths are in test_run_*.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import click
import pytest
from click.testing import CliRunner, Result

from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.cli import make_cli
from benchmark_runner.examples.arithmetic import DATA_FILE, ArithmeticRunner, ArithmeticService
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import (
    EvalResult,
    EvalResultData,
    EvaluateRequest,
    GenerationResult,
    ScoreResult,
    Task,
)
from benchmark_runner.service import BenchmarkService, current_caller


async def _record(runner: BenchmarkRunner, task: Task, cfg: LLMConfig, log_dir: Path) -> GenerationResult:
    """An offline model that keeps the LLMConfig it was given, so tests can check every flag landed."""
    (log_dir / "llm_config.json").write_text(cfg.model_dump_json())
    return GenerationResult(task_id=task.id, model=cfg.model, payload="0")


class ExtraRunner(ArithmeticRunner):
    NAME = "extra"
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {**ArithmeticRunner.OFFLINE_MODELS, "record": _record}

    @classmethod
    def cli_options(cls) -> list[click.Option]:
        return [
            click.Option(
                ["--backend"], type=click.Choice(["cuda", "triton"]), default="cuda", help="kernel backend"
            ),
            click.Option(["--feedback/--no-feedback"], default=True),
        ]

    @classmethod
    def report(cls, run_dir: Path) -> str:
        return f"REPORT of {run_dir.name}"

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        SEEN_OPTIONS.append(("load_tasks", dict(self.options)))
        return super().load_tasks(dataset_file)

    async def score(self, evaluations: list[EvalResult], model: str) -> ScoreResult:
        SEEN_OPTIONS.append(("score", dict(self.options)))
        return await super().score(evaluations, model)


SEEN_OPTIONS: list[tuple[str, dict[str, object]]] = []


class NoServiceRunner(ArithmeticRunner):
    NAME = "noservice"

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:  # type: ignore[override]
        return None


cli = make_cli(ArithmeticRunner, default_dataset_file=DATA_FILE)
extra_cli = make_cli(ExtraRunner, default_dataset_file=DATA_FILE)


def invoke(group: click.Group, *args: str, tmp: Path) -> Result:
    return CliRunner().invoke(
        group, ["run", "--output-dir", str(tmp / "runs"), *args], catch_exceptions=False
    )


def test_help_documents_flags_and_exit_codes() -> None:
    out = CliRunner().invoke(extra_cli, ["run", "--help"]).output
    for flag in [
        "--model", "--run-id", "--dataset-file", "--dataset-name", "--problem", "--service-url", "--concurrency",
        "--limit", "--task-id", "--output-dir", "--overwrite", "--base-url", "--api-key-env", "--temperature",
        "--max-tokens", "--max-turns", "--timeout", "--backend", "--feedback",
        "BENCHMARK_SERVICE_URL",
    ]:  # fmt: skip
        assert flag in out, flag
    for code in ["0  all selected", "1  some tasks failed", "2  usage error", "3  run refused", "4  fatal"]:
        assert code in out
    top = CliRunner().invoke(extra_cli, ["--help"]).output
    assert all(c in top for c in ["run", "evaluate", "score", "list-tasks", "status", "report"])
    assert "report" not in CliRunner().invoke(cli, ["--help"]).output  # only when the runner defines it


@pytest.mark.parametrize(
    "flags",
    [
        ["--dataset-file", str(DATA_FILE), "--dataset-name", "arithmetic"],
        ["--dataset-file", str(DATA_FILE), "--problem", str(DATA_FILE)],
        ["--dataset-name", "arithmetic", "--problem", str(DATA_FILE)],
    ],
)
def test_dataset_flags_are_mutually_exclusive(flags: list[str], tmp_path: Path) -> None:
    res = invoke(cli, "--model", "oracle", *flags, tmp=tmp_path)
    assert res.exit_code == 2
    a, b = flags[0], flags[2]
    assert f"{a} and {b} are mutually exclusive" in res.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--limit", "0"], "--limit"),
        (["--temperature", "3"], "--temperature"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--timeout", "0"], "--timeout"),
        (["--run-id", "../evil"], "not a valid run id"),
        (["--task-id", "nope"], "unknown task id(s) 'nope'"),
        (["--dataset-file", "/does/not/exist"], "does not exist"),
    ],
)
def test_bad_flag_values_are_usage_errors(flags: list[str], message: str, tmp_path: Path) -> None:
    res = invoke(cli, "--model", "oracle", "--run-id", "r", *flags, tmp=tmp_path)
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_llm_flags_and_runner_options_reach_generate_and_the_config(tmp_path: Path) -> None:
    res = invoke(
        extra_cli,
        "--model", "record", "--run-id", "r", "--limit", "2", "--base-url", "http://127.0.0.1:9/v1",
        "--api-key-env", "MY_KEY", "--temperature", "0.7", "--max-tokens", "77", "--max-turns", "3",
        "--timeout", "12.5", "--backend", "triton", "--no-feedback",
        tmp=tmp_path,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "r"
    cfg = json.loads((run / "logs" / "arith-000" / "llm_config.json").read_text())
    assert cfg == {
        "model": "record", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_KEY", "temperature": 0.7,
        "max_tokens": 77, "max_turns": 3, "timeout": 12.5, "extra": {"backend": "triton", "feedback": False},
    }  # fmt: skip
    stored = json.loads((run / "config.json").read_text())
    assert stored["generation_options"] == {
        "temperature": 0.7, "max_tokens": 77, "max_turns": 3, "backend": "triton", "feedback": False,
    }  # fmt: skip
    # a runner option is part of the identity: another backend is refused (3) ...
    res = invoke(extra_cli, "--model", "record", "--run-id", "r", "--backend", "cuda", "--temperature", "0.7",
                 "--max-tokens", "77", "--max-turns", "3", "--no-feedback", tmp=tmp_path)  # fmt: skip
    assert res.exit_code == 3
    assert "generation_options.backend: stored 'triton', now 'cuda'" in res.output
    # ... while plumbing (timeout, base URL, concurrency) is not
    res = invoke(extra_cli, "--model", "record", "--run-id", "r", "--backend", "triton", "--temperature", "0.7",
                 "--max-tokens", "77", "--max-turns", "3", "--no-feedback", "--timeout", "99", "--concurrency", "1",
                 tmp=tmp_path)  # fmt: skip
    assert res.exit_code == 0, res.output


def test_limit_and_task_id_select_tasks(tmp_path: Path) -> None:
    res = invoke(cli, "--model", "oracle", "--run-id", "a", "--limit", "3", tmp=tmp_path)
    assert res.exit_code == 0, res.output
    rows = (tmp_path / "runs" / "a" / "tasks.jsonl").read_text().splitlines()
    assert [json.loads(r)["id"] for r in rows] == ["arith-000", "arith-001", "arith-002"]

    res = invoke(cli, "--model", "oracle", "--run-id", "b", "--task-id", "arith-007", "--task-id", "arith-004",
                 "--task-id", "arith-011", "--limit", "2", tmp=tmp_path)  # fmt: skip
    assert res.exit_code == 0, res.output
    gens = (tmp_path / "runs" / "b" / "generations.jsonl").read_text().splitlines()
    assert sorted(json.loads(g)["task_id"] for g in gens) == [
        "arith-004",
        "arith-007",
    ]  # dataset order, then limit
    # the same run continued with more tasks: only the new ones are done
    res = invoke(cli, "--model", "oracle", "--run-id", "b", "--limit", "5", tmp=tmp_path)
    assert res.exit_code == 0, res.output
    gens = (tmp_path / "runs" / "b" / "generations.jsonl").read_text().splitlines()
    ids = [json.loads(g)["task_id"] for g in gens]
    assert sorted(ids) == [
        "arith-000",
        "arith-001",
        "arith-002",
        "arith-003",
        "arith-004",
        "arith-007",
    ]  # 004 once
    score = json.loads((tmp_path / "runs" / "b" / "score.json").read_text())
    assert score["n_tasks"] == 6  # the score covers every task of the run


def test_problem_file_runs_one_task(tmp_path: Path) -> None:
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps({"id": "p1", "question": "What is 6 * 7?"}))
    res = invoke(cli, "--model", "oracle", "--run-id", "p", "--problem", str(problem), tmp=tmp_path)
    assert res.exit_code == 0, res.output
    cfg = json.loads((tmp_path / "runs" / "p" / "config.json").read_text())
    assert cfg["dataset"]["kind"] == "problem" and cfg["dataset"]["n_tasks"] == 1
    assert json.loads((tmp_path / "runs" / "p" / "score.json").read_text())["metrics"]["correct_rate"] == 1.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "p1"}))
    res = invoke(cli, "--model", "oracle", "--run-id", "q", "--problem", str(bad), tmp=tmp_path)
    assert res.exit_code == 2 and "question: Field required" in res.output


def test_config_mismatch_is_refused_then_overwrite_deletes(tmp_path: Path) -> None:
    assert invoke(cli, "--model", "oracle", "--run-id", "r", "--limit", "2", tmp=tmp_path).exit_code == 0
    res = invoke(cli, "--model", "wrong", "--run-id", "r", "--limit", "2", tmp=tmp_path)
    assert res.exit_code == 3
    assert "model: stored 'oracle', now 'wrong'" in res.output and "--overwrite" in res.output
    res = invoke(cli, "--model", "wrong", "--run-id", "r", "--limit", "2", "--overwrite", tmp=tmp_path)
    assert res.exit_code == 0, res.output
    assert "deleted the old run directory" in res.output
    score = json.loads((tmp_path / "runs" / "r" / "score.json").read_text())
    assert score["model"] == "wrong" and score["metrics"]["correct_rate"] == 0.0


def test_no_service_and_no_embedded_service_exits_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCHMARK_SERVICE_URL", raising=False)
    res = invoke(make_cli(NoServiceRunner, DATA_FILE), "--model", "oracle", "--run-id", "r", tmp=tmp_path)
    assert res.exit_code == 4
    assert "needs a benchmark service: pass --service-url" in res.output


def test_status_score_evaluate_list_tasks_and_report(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    assert invoke(extra_cli, "--model", "wrong", "--run-id", "r", "--limit", "4", tmp=tmp_path).exit_code == 0
    runner = CliRunner()
    out = runner.invoke(extra_cli, ["status", "--run-id", "r", "--output-dir", runs]).output
    assert "finished" in out and "4" in out and "score.correct_rate" in out

    res = runner.invoke(
        extra_cli, ["evaluate", "--run-id", "r", "--output-dir", runs, "--task-id", "arith-001"]
    )
    assert res.exit_code == 0, res.output
    evals = (tmp_path / "runs" / "r" / "evaluations.jsonl").read_text().splitlines()
    assert [json.loads(e)["task_id"] for e in evals][-1] == "arith-001" and len(evals) == 5

    res = runner.invoke(extra_cli, ["score", "--run-id", "r", "--output-dir", runs])
    assert res.exit_code == 0 and "correct_rate" in res.output

    res = runner.invoke(extra_cli, ["status", "--run-id", "nope", "--output-dir", runs])
    assert res.exit_code == 2 and "no run 'nope'" in res.output

    res = runner.invoke(extra_cli, ["list-tasks"])
    assert res.exit_code == 0 and res.stdout.splitlines()[0] == "arith-000\tWhat is 43 + 21?"
    SEEN_OPTIONS.clear()
    res = runner.invoke(extra_cli, ["list-tasks", "--backend", "triton"])  # the runner's own flag
    assert res.exit_code == 0, res.output
    assert SEEN_OPTIONS == [("load_tasks", {"backend": "triton", "feedback": True})]
    res = runner.invoke(extra_cli, ["list-tasks", "--dataset-name", "arithmetic", "--json"])
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == 20

    res = runner.invoke(extra_cli, ["report", "--run-id", "r", "--output-dir", runs])
    assert res.output.strip() == "REPORT of r"
    res = runner.invoke(extra_cli, ["report", "r", "--output-dir", runs])  # RUN_ID positional
    assert res.exit_code == 0 and res.output.strip() == "REPORT of r"
    res = runner.invoke(extra_cli, ["status", "r", "--run-id", "s", "--output-dir", runs])
    assert res.exit_code == 2 and "two run ids" in res.output
    res = runner.invoke(extra_cli, ["status", "--output-dir", runs])
    assert res.exit_code == 2 and "missing the run id" in res.output
    res = runner.invoke(extra_cli, ["status", "../x", "--output-dir", runs])
    assert res.exit_code == 2 and "not a valid run id" in res.output


def test_a_runner_adds_its_own_command() -> None:
    group = make_cli(ArithmeticRunner, DATA_FILE)

    @group.command()
    def hello() -> None:
        click.echo(f"hello from {group.adapter_cls.NAME}")

    assert CliRunner().invoke(group, ["hello"]).output == "hello from arithmetic\n"


class LegacyRunner(ArithmeticRunner):
    NAME = "legacy"
    LEGACY_API = True


def test_legacy_text_api_path(tmp_path: Path) -> None:
    """A text runner on the legacy /evaluate-response/ + /final-score/ routes of the embedded service."""
    res = invoke(
        make_cli(LegacyRunner, DATA_FILE), "--model", "oracle", "--run-id", "l", "--limit", "4", tmp=tmp_path
    )
    assert res.exit_code == 0, res.output
    score = json.loads((tmp_path / "runs" / "l" / "score.json").read_text())
    assert score["metrics"] == {"score": 1.0} and score["n_tasks"] == 4


def test_runner_options_reach_load_tasks_and_a_later_score(tmp_path: Path) -> None:
    SEEN_OPTIONS.clear()
    assert (
        invoke(
            extra_cli,
            "--model",
            "wrong",
            "--run-id",
            "r",
            "--limit",
            "2",
            "--backend",
            "triton",
            "--no-feedback",
            tmp=tmp_path,
        ).exit_code
        == 0
    )
    want = {"backend": "triton", "feedback": False}
    assert ("load_tasks", want) in SEEN_OPTIONS and ("score", want) in SEEN_OPTIONS
    SEEN_OPTIONS.clear()
    res = CliRunner().invoke(extra_cli, ["score", "--run-id", "r", "--output-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert SEEN_OPTIONS == [("score", want)]  # re-scoring sees the flags the run was started with


class SelfScoringRunner(ArithmeticRunner):
    """Scores locally (overrides evaluate and score) yet ships a service its agent calls while generating."""

    NAME = "selfscoring"

    async def evaluate(self, task: Task, generation: GenerationResult) -> EvalResult:
        SEEN_SERVICE.append(self.service.base_url if self.service else None)
        return await super().evaluate(task, generation)

    async def score(self, evaluations: list[EvalResult], model: str) -> ScoreResult:
        return await super().score(evaluations, model)


SEEN_SERVICE: list[str | None] = []


def test_a_runner_with_its_own_service_gets_it_even_when_it_scores_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BENCHMARK_SERVICE_URL", raising=False)
    SEEN_SERVICE.clear()
    res = invoke(
        make_cli(SelfScoringRunner, DATA_FILE),
        "--model",
        "oracle",
        "--run-id",
        "r",
        "--limit",
        "2",
        tmp=tmp_path,
    )
    assert res.exit_code == 0, res.output
    assert "started embedded" in res.output
    assert len(SEEN_SERVICE) == 2 and all(u and u.startswith("http://127.0.0.1:") for u in SEEN_SERVICE)


class SourceRunner(ArithmeticRunner):
    """Understands ``--dataset-file mem:N`` (the first N bundled tasks), as a hub-backed runner would ``hub:NAME``."""

    NAME = "source"
    DATASET_SOURCES = ("mem",)

    def load_tasks(self, dataset_file: Path | None) -> list[Task]:
        if dataset_file is not None and str(dataset_file).startswith("mem:"):
            return super().load_tasks(None)[: int(str(dataset_file).split(":", 1)[1])]
        return super().load_tasks(dataset_file)


def test_dataset_file_accepts_the_runners_named_sources(tmp_path: Path) -> None:
    group = make_cli(SourceRunner, DATA_FILE)
    res = invoke(group, "--model", "oracle", "--run-id", "m", "--dataset-file", "mem:3", tmp=tmp_path)
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "runs" / "m" / "config.json").read_text())
    assert config["dataset"]["name"] == "mem:3" and config["dataset"]["path"] is None
    assert config["dataset"]["n_tasks"] == 3
    res = invoke(group, "--model", "oracle", "--run-id", "n", "--dataset-file", "memo", tmp=tmp_path)
    assert res.exit_code == 2 and "does not exist" in res.output  # only the declared source gets through
    assert "mem[:NAME]" in CliRunner().invoke(group, ["run", "--help"]).output


CALLERS: list[str] = []


class CallerRecordingService(ArithmeticService):
    async def evaluate(self, request: EvaluateRequest) -> EvalResultData:
        CALLERS.append(current_caller())
        return await super().evaluate(request)


class CallerRunner(ArithmeticRunner):
    NAME = "callers"

    @classmethod
    def embedded_service(cls) -> BenchmarkService:
        return CallerRecordingService()


def test_the_service_knows_which_run_each_request_belongs_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's client names its run (X-Run-Id); the service sees it per request (fair turns use it)."""
    monkeypatch.delenv("BENCHMARK_SERVICE_URL", raising=False)
    monkeypatch.delenv("BENCHMARK_SERVICE_API_KEY", raising=False)
    CALLERS.clear()
    res = invoke(
        make_cli(CallerRunner, DATA_FILE),
        "--model",
        "oracle",
        "--run-id",
        "run-7",
        "--limit",
        "3",
        tmp=tmp_path,
    )
    assert res.exit_code == 0, res.output
    assert CALLERS == ["-/run-7"] * 3
