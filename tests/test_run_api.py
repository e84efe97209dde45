"""``benchmark_runner.run`` / ``evaluate`` / ``score``: the Python API of ``NAME-runner run|evaluate|score``.

The central check: the CLI and ``run()`` given the same setup write the same run directory (the same
files, the same content but for timestamps, durations, the lock's pid and the command line kept in
``config.json``), so a run started one way resumes the other way.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import click
import pytest
from click.testing import CliRunner

from benchmark_runner import (
    RunFatalError,
    RunRefusedError,
    RunResult,
    RunUsageError,
    ScoreResult,
    api,
    evaluate,
    run,
    score,
)
from benchmark_runner.base import BenchmarkRunner, OfflineModel
from benchmark_runner.cli import make_cli, parse_run_args
from benchmark_runner.examples.arithmetic import ArithmeticRunner, solve
from benchmark_runner.llm import LLMConfig
from benchmark_runner.schemas import GenerationResult, Task
from benchmark_runner.service import BenchmarkService

#: Fields that differ between any two runs, whoever starts them.
VOLATILE = {"latency_s", "created_at", "wall_s"}


def normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def snapshot(run_dir: Path) -> dict[str, Any]:
    """Every file and directory of a run, its content normalized (JSON parsed, volatile fields out)."""
    out: dict[str, Any] = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_dir():
            out[rel + "/"] = None
        elif path.name == ".lock":
            out[rel] = "<pid>"  # the pid of whoever ran last
        elif path.suffix == ".jsonl":
            out[rel] = [normalized(json.loads(line)) for line in path.read_text().splitlines()]
        elif path.suffix == ".json":
            data = normalized(json.loads(path.read_text()))
            if rel == "config.json":
                data["info"].pop("argv")  # the command line, for the reader; run() has none
            out[rel] = data
        else:
            out[rel] = path.read_text()
    return out


def cli_run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BENCHMARK_SERVICE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "benchmark_runner.examples.arithmetic", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp,
    )


def test_the_readme_example(tmp_path: Path) -> None:
    result = run(ArithmeticRunner, model="oracle", run_id="r1", output_dir=tmp_path)
    assert isinstance(result, RunResult) and isinstance(result.score, ScoreResult)
    assert result.score.metrics["correct_rate"] == 1.0 and result.score.n_tasks == 20
    assert result.run_dir == tmp_path / "r1" == result.artifacts.run_dir and result.run_id == "r1"
    assert (result.selected, result.resumed, result.generated, result.evaluated) == (20, 0, 20, 20)
    assert result.ok and result.exit_code == 0 and result.failed_ids == ()
    assert len(result.artifacts.read_generations()) == 20
    assert json.loads((result.run_dir / "score.json").read_text())["metrics"]["correct_rate"] == 1.0

    again = run(ArithmeticRunner, model="oracle", run_id="r1", output_dir=tmp_path, quiet=True)
    assert (again.resumed, again.generated) == (20, 0) and again.score == result.score


def test_cli_and_run_write_the_same_run_directory(tmp_path: Path) -> None:
    args = ["--model", "wrong", "--limit", "7", "--task-id", "arith-003", "--task-id", "arith-011"]
    res = cli_run(tmp_path, "--run-id", "cli", "--output-dir", "runs", "--concurrency", "1", *args)
    assert res.returncode == 0, res.stderr
    result = run(
        ArithmeticRunner,
        model="wrong",
        limit=7,
        task_id=["arith-003", "arith-011"],
        run_id="api",
        output_dir=tmp_path / "runs",
        concurrency=1,
        quiet=True,
    )
    cli_dir, api_dir = tmp_path / "runs" / "cli", tmp_path / "runs" / "api"
    assert snapshot(api_dir) == snapshot(cli_dir)
    assert sorted(p.name for p in cli_dir.iterdir()) == [
        ".lock", "config.json", "evaluations.jsonl", "generations.jsonl", "logs", "score.json", "tasks.jsonl",
    ]  # fmt: skip
    assert result.score.metrics["correct_rate"] == 0.0 and result.selected == 2

    # either way, the run resumes the other way: same identity
    res = cli_run(tmp_path, "--run-id", "api", "--output-dir", "runs", *args)
    assert res.returncode == 0, res.stderr
    assert "resumed (skipped) │ 2" in " ".join(res.stdout.split()).replace("│ │", "│")
    resumed = run(ArithmeticRunner, model="wrong", run_id="cli", output_dir=tmp_path / "runs", quiet=True,
                  limit=7, task_id=("arith-003", "arith-011"))  # fmt: skip
    assert (resumed.resumed, resumed.generated) == (2, 0)


async def _boom(runner: BenchmarkRunner, task: Task, cfg: LLMConfig, log_dir: Path) -> GenerationResult:
    """An offline model that writes a log, answers most tasks right and raises on one."""
    (log_dir / "options.json").write_text(json.dumps(cfg.extra, sort_keys=True))
    if task.id == "arith-002":
        raise RuntimeError("model exploded")
    return GenerationResult(task_id=task.id, model="boom", payload=str(solve(task.question)))


class OptionsRunner(ArithmeticRunner):
    """A runner with flags of its own (a choice, an on/off flag, a repeatable int) and a failing model."""

    NAME = "options"
    OFFLINE_MODELS: ClassVar[dict[str, OfflineModel]] = {"boom": _boom}

    @classmethod
    def cli_options(cls) -> list[click.Option]:
        return [
            click.Option(["--backend"], type=click.Choice(["cuda", "triton"]), default="cuda"),
            click.Option(["--feedback/--no-feedback"], default=True),
            click.Option(["--level"], type=click.IntRange(1, 4), multiple=True),
        ]


def test_a_runner_s_own_options_failures_and_logs_match_too(tmp_path: Path) -> None:
    cli = make_cli(OptionsRunner)  # the dataset default comes from the class, as for run()
    out = tmp_path / "runs"
    common = ["--model", "boom", "--limit", "4", "--concurrency", "1", "--output-dir", str(out)]
    res = CliRunner().invoke(cli, ["run", "--run-id", "cli", "--no-feedback", "--level", "2", *common])
    assert res.exit_code == 1, res.output  # one task failed
    result = run(OptionsRunner, model="boom", run_id="api", limit=4, concurrency=1, output_dir=out,
                 feedback=False, level=2, quiet=True)  # fmt: skip
    assert result.failed_ids == ("arith-002",) and result.exit_code == 1
    cli_snap, api_snap = snapshot(out / "cli"), snapshot(out / "api")
    # the traceback names the same frames; only the exception's text is compared
    for snap in (cli_snap, api_snap):
        tb = snap.pop("logs/arith-002/generate_error.txt")
        assert tb.rstrip().endswith("RuntimeError: model exploded")
    assert api_snap == cli_snap
    config = api_snap["config.json"]
    assert config["generation_options"] == {
        "temperature": 0.0, "max_tokens": 4096, "max_turns": 5, "backend": "cuda", "feedback": False, "level": [2],
    }  # fmt: skip
    assert api_snap["logs/arith-000/options.json"] == {"backend": "cuda", "feedback": False, "level": [2]}


def test_parse_run_args_turns_flags_into_run_keywords(tmp_path: Path) -> None:
    kwargs = parse_run_args(OptionsRunner, ["--model", "boom", "--level", "1", "--level", "3", "--limit", "2",
                                           "--output-dir", str(tmp_path), "--run-id", "p"])  # fmt: skip
    assert kwargs["level"] == (1, 3) and kwargs["feedback"] is True and kwargs["limit"] == 2
    result = run(OptionsRunner, **kwargs, quiet=True)
    assert result.selected == 2 and result.run_dir == tmp_path / "p"


def test_run_keywords_have_the_cli_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each keyword of run() is a flag of ``run`` under the same name, with the value the command gets
    when the flag is not given."""
    monkeypatch.delenv("BENCHMARK_SERVICE_URL", raising=False)
    cli_values = parse_run_args(ArithmeticRunner, ["--model", "m"])
    for fn in (api.run, api.arun):
        params = inspect.signature(fn).parameters
        names = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "quiet"}
        assert names == set(cli_values), fn.__name__
        assert params["model"].default is inspect.Parameter.empty
        for name in names - {"model"}:
            default = params[name].default
            default = Path(default) if name == "output_dir" else default
            assert default == cli_values[name], name
    for fn, command_name in ((api.evaluate, "evaluate"), (api.score, "score")):
        cmd_flags = {p.name for p in make_cli(ArithmeticRunner).commands[command_name].params} - {
            "run_id_arg"
        }
        params = inspect.signature(fn).parameters
        assert {n for n in params if n not in ("runner_cls", "quiet")} == cmd_flags


def test_evaluate_and_score_reuse_the_stored_run(tmp_path: Path) -> None:
    first = run(ArithmeticRunner, model="wrong", run_id="e", limit=3, output_dir=tmp_path, quiet=True)
    again = evaluate(ArithmeticRunner, run_id="e", output_dir=tmp_path, task_id="arith-001", quiet=True)
    assert (again.selected, again.evaluated, again.generated) == (1, 1, 0)
    assert again.score == first.score
    assert len(again.artifacts.evaluations.read()) == 4  # appended; the latest wins
    rescored = score(ArithmeticRunner, run_id="e", output_dir=tmp_path, quiet=True)
    assert rescored.score == first.score and rescored.evaluated == 0


class NoServiceRunner(ArithmeticRunner):
    NAME = "noservice"

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:  # type: ignore[override]
        return None


def test_errors_are_typed_and_carry_the_cli_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BENCHMARK_SERVICE_URL", raising=False)
    kw: dict[str, Any] = {"model": "oracle", "output_dir": tmp_path, "quiet": True}
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"task_id": "nope"}, RunUsageError, "unknown task id(s) 'nope'"),
        ({"run_id": "../x"}, RunUsageError, "not a valid run id"),
        ({"limit": 0}, RunUsageError, "limit"),
        ({"temperature": 3.0}, RunUsageError, "temperature"),
        ({"backend": "cuda"}, RunUsageError, "unknown option(s) backend for arithmetic"),
        ({"dataset_file": tmp_path / "missing.jsonl"}, RunUsageError, "cannot load tasks"),
        ({"dataset_file": tmp_path, "dataset_name": "x"}, RunUsageError, "mutually exclusive"),
    ]
    for extra, error, text in cases:
        with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")) as caught:
            run(ArithmeticRunner, **{**kw, **extra})
        assert caught.value.exit_code == 2
    with pytest.raises(RunUsageError, match="is not one of"):
        run(OptionsRunner, **{**kw, "model": "boom"}, backend="rust")
    with pytest.raises(RunFatalError, match="needs a benchmark service") as fatal:
        run(NoServiceRunner, **kw)
    assert fatal.value.exit_code == 4
    run(ArithmeticRunner, **kw, run_id="x", limit=1)
    with pytest.raises(RunRefusedError, match="different configuration") as refused:
        run(ArithmeticRunner, **kw, run_id="x", limit=1, max_turns=2)
    assert refused.value.exit_code == 3
    assert run(ArithmeticRunner, **kw, run_id="x", limit=1, max_turns=2, overwrite=True).generated == 1
    with pytest.raises(RunUsageError, match="no run 'y'"):
        score(ArithmeticRunner, run_id="y", output_dir=tmp_path)


class CountingServiceRunner(ArithmeticRunner):
    """Counts the starts of its embedded service."""

    NAME = "counting"
    STARTS: ClassVar[list[int]] = []

    @classmethod
    def embedded_service(cls) -> BenchmarkService | None:
        cls.STARTS.append(1)
        return super().embedded_service()


_HOLD_LOCK = """
import sys, time
from pathlib import Path
from benchmark_runner.artifacts import RunArtifacts
with RunArtifacts(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_run_held_by_another_process_is_refused_before_its_service_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second ``run`` (or ``evaluate``) of a run another process is writing fails at once: on a GPU host
    the embedded service would start a worker on every GPU only to be given back (seen: 17 s)."""
    monkeypatch.delenv("BENCHMARK_SERVICE_URL", raising=False)
    kw: dict[str, Any] = {
        "model": "oracle",
        "output_dir": tmp_path,
        "quiet": True,
        "run_id": "held",
        "limit": 1,
    }
    run(ArithmeticRunner, **kw)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(tmp_path / "held")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        CountingServiceRunner.STARTS.clear()
        with pytest.raises(RunRefusedError, match=f"in use by pid {holder.pid}"):
            run(CountingServiceRunner, **{**kw, "run_id": "held"})
        with pytest.raises(RunRefusedError, match=f"in use by pid {holder.pid}"):
            evaluate(CountingServiceRunner, run_id="held", output_dir=tmp_path, quiet=True)
        assert CountingServiceRunner.STARTS == []
    finally:
        holder.kill()
        holder.wait()
    # released with its holder: the run resumes
    assert run(ArithmeticRunner, **kw).resumed == 1


def test_run_blocks_even_under_a_running_event_loop(tmp_path: Path) -> None:
    """A notebook cell runs inside an event loop: the blocking call still works (on a thread of its
    own), and the async twin works on the caller's loop."""

    async def cell() -> tuple[RunResult, RunResult]:
        blocking = run(
            ArithmeticRunner, model="oracle", run_id="nb", limit=2, output_dir=tmp_path, quiet=True
        )
        awaited = await api.arun(ArithmeticRunner, model="oracle", run_id="nb2", limit=2, output_dir=tmp_path,
                                 quiet=True)  # fmt: skip
        return blocking, awaited

    blocking, awaited = asyncio.run(cell())
    assert blocking.score.metrics["correct_rate"] == awaited.score.metrics["correct_rate"] == 1.0


def test_the_example_runs_in_a_fresh_interpreter(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from benchmark_runner import run\n"
        "from benchmark_runner.examples.arithmetic import ArithmeticRunner\n"
        "result = run(ArithmeticRunner, model='oracle', run_id='r1', output_dir=sys.argv[1])\n"
        "print(result.score.metrics['correct_rate'], result.run_dir)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["1.0", str(tmp_path / "r1")]
