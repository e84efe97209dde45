"""Run identity and resume planning."""

from __future__ import annotations

import pytest

from benchmark_runner.checkpoint import (
    ConfigMismatch,
    DatasetIdentity,
    RunConfig,
    check_compatible,
    hash_tasks,
    parse_stored_config,
    plan_resume,
)
from benchmark_runner.schemas import (
    EvalResult,
    EvalResultData,
    EvalStatus,
    GenerationResult,
    GenerationStatus,
    Task,
)


def _config(**kw: object) -> RunConfig:
    base: dict[str, object] = {
        "runner": "arith",
        "model": "m1",
        "dataset": DatasetIdentity(kind="file", name="d.jsonl", sha256="abc", path="/a/d.jsonl", n_tasks=3),
        "generation_version": "1",
        "payload_type": "text",
        "payload_schema_version": 1,
        "generation_options": {"temperature": 0.0, "backend": "cuda"},
        "info": {"base_url": "http://x"},
    }
    base.update(kw)
    return RunConfig.model_validate(base)


def test_same_identity_with_other_path_info_and_time_is_compatible() -> None:
    a = _config()
    b = _config(
        dataset=DatasetIdentity(kind="file", name="d.jsonl", sha256="abc", path="/moved/d.jsonl", n_tasks=3),
        info={"base_url": "http://other"},
        created_at="2000-01-01",
    )
    check_compatible(a, b, "runs/r")


def test_mismatch_lists_every_differing_key() -> None:
    a = _config()
    b = _config(
        model="m2", generation_version="2", generation_options={"temperature": 0.0, "backend": "triton"}
    )
    with pytest.raises(ConfigMismatch) as err:
        check_compatible(a, b, "runs/r")
    assert err.value.keys == ["generation_options.backend", "generation_version", "model"]
    msg = str(err.value)
    assert "model: stored 'm1', now 'm2'" in msg and "--overwrite" in msg


def test_an_option_added_later_compares_as_its_default() -> None:
    """A run stored before an option existed ran as its default: it resumes under it, and only under it."""
    old = _config()
    now = _config(generation_options={"temperature": 0.0, "backend": "cuda", "precision": "fp32"})
    defaults = {"generation_options.precision": "fp32"}
    check_compatible(old, now, "r", defaults)
    with pytest.raises(ConfigMismatch, match="precision: stored 'fp32', now 'bf16'"):
        bf16 = _config(generation_options={"temperature": 0.0, "backend": "cuda", "precision": "bf16"})
        check_compatible(old, bf16, "r", defaults)
    with pytest.raises(ConfigMismatch, match="precision: stored 'bf16', now 'fp32'"):
        check_compatible(bf16, now, "r", defaults)
    with pytest.raises(ConfigMismatch):  # without the defaults, the absent key differs
        check_compatible(old, now, "r")


def test_dataset_content_change_is_a_mismatch() -> None:
    b = _config(dataset=DatasetIdentity(kind="file", name="d.jsonl", sha256="def"))
    with pytest.raises(ConfigMismatch, match=r"dataset\.sha256"):
        check_compatible(_config(), b, "r")


def test_stored_config_roundtrip_and_garbage() -> None:
    a = _config()
    assert parse_stored_config(a.model_dump(mode="json"), "c.json").identity() == a.identity()
    with pytest.raises(ConfigMismatch, match=r"c\.json is not a run config.*model"):
        parse_stored_config({"runner": "x"}, "c.json")


def test_hash_tasks_ignores_key_order_but_not_content() -> None:
    t1 = [Task(id="a", question="q"), Task(id="b", question="r")]
    same = [Task.model_validate({"question": "q", "id": "a"}), Task(id="b", question="r")]
    assert hash_tasks(t1) == hash_tasks(same)
    assert hash_tasks(t1) != hash_tasks([Task(id="a", question="q"), Task(id="b", question="R")])


def test_plan_resume_splits_by_what_is_on_disk() -> None:
    tasks = [Task(id=i, question="q") for i in "abcdef"]
    ok = EvalResultData(status=EvalStatus.INCORRECT)  # a verdict, even a bad one, finishes a task
    gens = {
        "a": GenerationResult(task_id="a", model="m"),
        "b": GenerationResult(task_id="b", model="m"),
        "c": GenerationResult(task_id="c", model="m", status=GenerationStatus.ERROR, error="boom"),
        "e": GenerationResult(task_id="e", model="m"),
    }
    evals = {
        "a": EvalResult(task_id="a", model="m", data=ok),
        "c": EvalResult(task_id="c", model="m", data=EvalResultData(status=EvalStatus.SKIPPED)),
        "e": EvalResult(
            task_id="e", model="m", data=EvalResultData(status=EvalStatus.ERROR), error="HTTP 500"
        ),
    }
    plan = plan_resume(tasks, gens, evals)
    assert plan.finished == ["a"]
    assert [t.id for t, _ in plan.to_evaluate] == ["b", "e"]  # never re-generated
    assert [t.id for t in plan.to_generate] == ["c", "d", "f"]  # failed generation is retried
    assert plan.n_todo == 5


def test_option_defaults_are_the_declared_plain_values() -> None:
    import click

    from benchmark_runner.runs import option_defaults

    class Runner:
        @classmethod
        def cli_options(cls) -> list[click.Option]:
            return [
                click.Option(["--a"]),  # no default: click's sentinel, never a value to compare
                click.Option(["--b"], default="x"),
                click.Option(["--c"], is_flag=True),
                click.Option(["--d"], multiple=True, default=["1"]),
                click.Option(["--e"], default=None),
                click.Option(["--f"], type=int, default=3),
            ]

    assert option_defaults(Runner) == {"generation_options.b": "x", "generation_options.f": 3}  # type: ignore[arg-type]
