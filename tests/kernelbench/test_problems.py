"""Loading KernelBench problems from a checkout, JSONL, hub-shaped data; filters; prompt stripping."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from kernelbench_runner.problems import (
    KernelBenchTask,
    ProblemLoadError,
    load_problems,
    model_only_source,
    select,
    task_id_for,
    tasks_from_hub_dataset,
)

FIXTURES = Path(__file__).parent / "fixtures"
ROWS = [json.loads(line) for line in (FIXTURES / "upstream_problems.jsonl").read_text().splitlines()]


def make_checkout(root: Path, nested: bool) -> Path:
    base = root / "KernelBench" if nested else root
    for row in ROWS:
        d = base / f"level{row['level']}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{row['name']}.py").write_text(row["code"])
    (base / "level1" / "__init__.py").write_text("")  # not a problem: ignored
    return root


@pytest.mark.parametrize("nested", [False, True])
def test_checkout_layout(tmp_path: Path, nested: bool) -> None:
    tasks = load_problems(make_checkout(tmp_path, nested))
    assert [t.id for t in tasks] == [
        "L1_19_ReLU",
        "L1_23_Softmax",
        "L2_1_Conv2D_ReLU_BiasAdd",
        "L3_1_MLP",
        "L4_1_EleutherAI-gpt-neo-2p7B_bs32_seq256",
    ]
    relu = tasks[0]
    assert (relu.level, relu.problem_id, relu.name) == (1, 19, "19_ReLU")
    assert relu.reference_code == ROWS[0]["code"] == relu.question  # upstream prompts show the whole file


def test_jsonl_and_service_shaped_rows(tmp_path: Path) -> None:
    from_file = load_problems(FIXTURES / "upstream_problems.jsonl")
    assert [t.id for t in from_file][:2] == ["L1_19_ReLU", "L1_23_Softmax"]
    service_rows = tmp_path / "svc.jsonl"
    service_rows.write_text(
        json.dumps(
            {
                "id": "level1/19_ReLU",
                "question": ROWS[0]["code"],
                "level": 1,
                "problem_id": 19,
                "name": "19_ReLU",
            }
        )
        + "\n"
    )
    (task,) = load_problems(service_rows)
    assert task.id == "level1/19_ReLU" and task.reference_code == ROWS[0]["code"]


def test_bad_rows_name_the_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"level": 1, "problem_id": 1, "code": "x = 1"}) + "\n")
    with pytest.raises(ProblemLoadError, match=r"bad.jsonl:1: missing field\(s\) name"):
        load_problems(bad)
    bad.write_text('{"level": 1,\n')
    with pytest.raises(ProblemLoadError, match="bad.jsonl:1: not valid JSON"):
        load_problems(bad)
    bad.write_text(json.dumps({"level": 0, "problem_id": 1, "name": "x", "code": "y"}) + "\n")
    with pytest.raises(ProblemLoadError, match="level"):
        load_problems(bad)
    with pytest.raises(ProblemLoadError, match="not a KernelBench checkout"):
        load_problems(tmp_path)
    with pytest.raises(ProblemLoadError, match="no such file"):
        load_problems(tmp_path / "missing.jsonl")


def test_hub_conversion() -> None:
    # The hub's DatasetDict: splits level_1.. whose rows have code, level, name (with .py), problem_id.
    hub = {
        "level_1": [
            {"code": r["code"], "level": 1, "name": r["name"] + ".py", "problem_id": r["problem_id"]}
            for r in ROWS
            if r["level"] == 1
        ],
        "level_2": [
            {"code": r["code"], "name": r["name"] + ".py", "problem_id": r["problem_id"]}
            for r in ROWS
            if r["level"] == 2
        ],
    }
    tasks = tasks_from_hub_dataset(hub)
    assert [t.id for t in tasks] == ["L1_19_ReLU", "L1_23_Softmax", "L2_1_Conv2D_ReLU_BiasAdd"]
    assert tasks[2].level == 2 and tasks[2].name == "1_Conv2D_ReLU_BiasAdd"


def test_hub_without_datasets_package_is_a_clear_error() -> None:
    pytest.importorskip("pytest")  # always present; the branch below depends on `datasets` absence
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ProblemLoadError, match="needs the `datasets` package"):
            load_problems("hub")
    else:
        pytest.skip("datasets is installed here; the missing-package message cannot be exercised")


def test_filters() -> None:
    tasks = load_problems(FIXTURES / "upstream_problems.jsonl")
    assert [t.level for t in select(tasks, levels=[2, 3])] == [2, 3]
    assert [t.id for t in select(tasks, task_ids=["L1_23", "level3/1_MLP"])] == ["L1_23_Softmax", "L3_1_MLP"]
    assert len(select(tasks, limit=2)) == 2
    with pytest.raises(ProblemLoadError, match="task id.*not found: L9_1"):
        select(tasks, task_ids=["L9_1"])
    assert task_id_for(1, 7, "Conv.py") == "L1_7_Conv"


def test_model_only_source_strips_the_harness() -> None:
    tasks = {t.id: t for t in load_problems(FIXTURES / "upstream_problems.jsonl")}
    relu = model_only_source(tasks["L1_19_ReLU"].question)
    assert "get_inputs" not in relu and "get_init_inputs" not in relu
    assert "batch_size" not in relu and "dim = 393216" not in relu
    assert relu.startswith("import torch\nimport torch.nn as nn") and "class Model(nn.Module)" in relu
    assert '"""' in relu  # docstrings and comments kept verbatim
    ast.parse(relu)
    # Level 4: module-level config only used by the harness goes; imports stay.
    hf = model_only_source(tasks["L4_1_EleutherAI-gpt-neo-2p7B_bs32_seq256"].question)
    assert "AutoConfig.from_pretrained" not in hf and "vocab_size" not in hf and "class Model" in hf
    # A constant the model itself uses is kept (and what it depends on).
    src = "import torch\nBASE = 2\nSCALE = BASE * 3\nN = 5\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * SCALE\n\ndef get_inputs():\n    return [torch.rand(N)]\n"
    kept = model_only_source(src)
    assert (
        "SCALE = BASE * 3" in kept and "BASE = 2" in kept and "N = 5" not in kept and "get_inputs" not in kept
    )


def test_bundled_sample_runs_on_cpu(sample_file: Path) -> None:
    import time

    import torch

    tasks = load_problems(sample_file)
    assert len(tasks) >= 10 and {t.level for t in tasks} == {1, 2}
    assert len({t.id for t in tasks}) == len(tasks)
    for task in tasks:
        assert isinstance(task, KernelBenchTask)
        ns: dict[str, object] = {}
        exec(compile(task.reference_code, task.id, "exec"), ns)
        model = ns["Model"](*ns["get_init_inputs"]())  # type: ignore[operator]
        inputs = ns["get_inputs"]()  # type: ignore[operator]
        start = time.perf_counter()
        out = model(*inputs)
        assert isinstance(out, torch.Tensor) and torch.isfinite(out).all()
        assert time.perf_counter() - start < 0.5, f"{task.id} is not CPU-sized"
