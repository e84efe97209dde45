"""``--model solutions --solutions PATH``: a corpus of existing solutions judged through the real CLI.

The three layouts (upstream's run folder, CUDA-L1's object of levels, CUDA-L1's JSON lines) are small
fixtures written here, judged by a real kernel service with CPU workers (started once for the module;
the CLI reaches it through ``--service-url``), then run again under the same run id, which judges
nothing. Malformed input goes through ``list-tasks``, which loads tasks without any service.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from benchmark_runner.service import make_app, start_server
from click.testing import CliRunner, Result

from kernelbench_runner.cli import cli
from kernelbench_runner.problems import KernelBenchTask, make_task
from kernelbench_runner.service import make_service
from kernelbench_runner.solutions import infer_backend

HEADER = "import torch\nimport torch.nn as nn\n\n"


def ref(body: str, n_inputs: int) -> str:
    """A tiny reference problem on 4x8 CPU tensors."""
    args = ", ".join("abcd"[:n_inputs])
    inputs = ", ".join(["torch.randn(4, 8)"] * n_inputs)
    return (
        f"{HEADER}class Model(nn.Module):\n    def forward(self, {args}):\n        return {body}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def sol(body: str, n_inputs: int) -> str:
    args = ", ".join("abcd"[:n_inputs])
    return (
        f"{HEADER}class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        f"    def forward(self, {args}):\n        return {body}\n"
    )


REF_ADD, REF_RELU = ref("a + b", 2), ref("torch.relu(a)", 1)
ADD, RELU, WRONG_RELU = sol("torch.add(a, b)", 2), sol("a.clamp(min=0)", 1), sol("a * 2", 1)


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    """The runner's embedded kernel service (CPU workers), started once for the module's runs."""
    with start_server(make_app(make_service(gpus=[]))) as server:
        yield server.url


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def run_args(run_id: str, solutions: Path, url: str, *extra: str) -> list[str]:
    return [
        "run",
        "--model",
        "solutions",
        "--solutions",
        str(solutions),
        "--run-id",
        run_id,
        "--service-url",
        url,
        *extra,
    ]


def verdicts(run_dir: Path) -> dict[str, str]:
    score = json.loads((run_dir / "score.json").read_text())
    return {t["task_id"]: t["outcome"] for t in score["per_task"]}


def judged_lines(run_dir: Path) -> int:
    return len((run_dir / "evaluations.jsonl").read_text().splitlines())


def assert_resumes_without_judging(args: list[str], run_dir: Path, n: int) -> None:
    before = judged_lines(run_dir)
    again = invoke(args)
    assert again.exit_code == 0, again.output
    assert judged_lines(run_dir) == before  # nothing judged again
    assert re.search(rf"resumed \(skipped\)\s*│\s*{n}\s*│", again.output), again.output
    assert re.search(r"evaluated now\s*│\s*0\s*│", again.output), again.output


# ---- the three layouts, judged ----------------------------------------------------------------------


def test_upstream_run_folder_is_judged_against_the_datasets_problems_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_url: str
) -> None:
    """Upstream's layout: references from the runner's dataset (the bundled sample); one task a sample."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "generations"
    folder.mkdir()
    (folder / "level_1_problem_1_sample_0_kernel.py").write_text(ADD)
    (folder / "level_1_problem_2_sample_0_kernel.py").write_text(RELU)
    (folder / "level_1_problem_2_sample_1_kernel.py").write_text(WRONG_RELU)
    (folder / "level_1_problem_3_sample_0_kernel.py").write_text("")  # no kernel: skipped
    (folder / "eval_results.json").write_text("{}")  # not a solution: ignored
    args = run_args("folder", folder, service_url, "--backend", "torch")

    first = invoke([*args, "--limit", "1"])  # a run stopped after one task...
    assert first.exit_code == 0, first.output
    run_dir = tmp_path / "runs" / "folder"
    assert judged_lines(run_dir) == 1
    result = invoke(args)  # ...resumed: judges the other two only
    assert result.exit_code == 0, result.output
    assert re.search(r"resumed \(skipped\)\s*│\s*1\s*│", result.output), result.output
    assert judged_lines(run_dir) == 3
    assert verdicts(run_dir) == {
        "L1_1_Elementwise_add_s0": "correct",
        "L1_2_ReLU_s0": "correct",
        "L1_2_ReLU_s1": "incorrect",
    }
    tasks = [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text().splitlines()]
    assert {t["solution"]["source"] for t in tasks} == {
        "level_1_problem_1_sample_0_kernel.py",
        "level_1_problem_2_sample_0_kernel.py",
        "level_1_problem_2_sample_1_kernel.py",
    }
    assert all(
        "def get_inputs" in t["reference_code"] and "torch.randn(batch_size" in t["reference_code"]
        for t in tasks
        if "ReLU" in t["id"]
    )
    final = run_dir / "logs" / "L1_2_ReLU_s1" / "kernels" / "final.py"
    assert final.read_text() == WRONG_RELU  # the stored solution, unchanged

    assert_resumes_without_judging(args, run_dir, 3)


def test_cuda_l1_levels_object_is_judged_against_its_own_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """CUDA-L1's first release: {"1": [...], ...} of {task_id, ref_code, custom_code}; backend inferred."""
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "h100_xsm.json"
    corpus.write_text(
        json.dumps(
            {
                "1": [
                    {"task_id": 1, "ref_code": REF_ADD, "custom_code": ADD},
                    {"task_id": 2, "ref_code": REF_RELU, "custom_code": WRONG_RELU},
                ],
                "2": [{"task_id": 7, "ref_code": REF_RELU, "custom_code": ""}],
            },
            indent=2,
        )
    )
    args = run_args("levels", corpus, service_url)
    with caplog.at_level(logging.WARNING):
        result = invoke(args)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "levels"
    assert verdicts(run_dir) == {"L1_1": "correct", "L1_2": "incorrect"}
    assert "2 solution(s) to judge, 1 without solution code skipped" in caplog.text
    assert f'{corpus.name}: level "2" row 0' in caplog.text
    generations = [json.loads(line) for line in (run_dir / "generations.jsonl").read_text().splitlines()]
    assert {g["metadata"]["backend"] for g in generations} == {"torch"}

    assert_resumes_without_judging(args, run_dir, 2)


#: A degenerate problem (CUDA-L1's L2_66: a softmax over a dimension of size 1 is all ones) and the
#: constant that answers it.
REF_CONSTANT = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.mean(dim=1, keepdim=True), dim=1)

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
"""
ONES = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
"""


#: A cell that carries its state across calls (KernelBench's vanilla RNNs), and the same cell as its solution.
REF_STATEFUL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.randn(4, 8)
        self.fc = nn.Linear(16, 8)
    def forward(self, x):
        self.hidden = torch.tanh(self.fc(torch.cat((x, self.hidden.to(x.device)), dim=1)))
        return self.hidden

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
"""
STATEFUL = REF_STATEFUL.replace("class Model(", "class ModelNew(")


def test_cuda_l1_json_lines_keep_their_fields_and_the_report_shows_the_reported_speedup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_url: str
) -> None:
    """CUDA-L1's revision: JSON lines in a file named .json; null or "None" custom_code skipped; score_default
    kept."""
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "h100.json"
    rows: list[dict[str, Any]] = [
        {"level_id": 1, "task_id": 1, "ref_code": REF_ADD, "custom_code": ADD, "score_default": 1.5},
        {"level_id": 1, "task_id": 9, "ref_code": REF_ADD, "custom_code": None, "score_default": None},
        # the revision writes 17 missing solutions as the text "None" (valid Python that defines nothing)
        {"level_id": 1, "task_id": 30, "ref_code": REF_ADD, "custom_code": "None", "score_default": 1.157},
        {
            "level_id": 2,
            "task_id": 5,
            "ref_code": REF_RELU,
            "custom_code": RELU,
            "score_default": 3.25,
            "cudnn_code": ADD,
        },
        {"level_id": 2, "task_id": 66, "ref_code": REF_CONSTANT, "custom_code": ONES, "score_default": 1.0},
        {
            "level_id": 3,
            "task_id": 34,
            "ref_code": REF_STATEFUL,
            "custom_code": STATEFUL,
            "score_default": 1.6,
        },
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = run_args("lines", corpus, service_url)
    result = invoke(args)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "lines"
    assert verdicts(run_dir) == {"L1_1": "correct", "L2_5": "correct", "L2_66": "correct", "L3_34": "correct"}
    task = json.loads((run_dir / "tasks.jsonl").read_text().splitlines()[1])
    assert task["solution"]["fields"] == {"score_default": 3.25, "cudnn_code": ADD}  # all kept on the task
    assert task["solution"]["source"] == "h100.json:4" and task["reference_code"] == REF_RELU
    score = json.loads((run_dir / "score.json").read_text())
    evaluations = [json.loads(x) for x in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    (relu,) = [e for e in evaluations if e["task_id"] == "L2_5"]
    assert relu["data"]["details"]["solution"]["fields"] == {"score_default": 3.25}  # numbers only
    reported = {t["task_id"]: t["details"].get("reported_speedup") for t in score["per_task"]}
    assert reported == {"L1_1": 1.5, "L2_5": 3.25, "L2_66": 1.0, "L3_34": 1.6}
    assert set(score["groups"]) == {"level1", "level2", "level3"}

    assert_resumes_without_judging(args, run_dir, 4)
    rescored = invoke(["score", "--run-id", "lines", "--service-url", service_url])  # stored tasks read back
    assert rescored.exit_code == 0, rescored.output

    report = invoke(["report", "--run-id", "lines"])
    assert report.exit_code == 0, report.output
    html = Path(report.output.strip()).read_text()
    assert "reported speedup</th>" in html and '<td class="num reported">3.250</td>' in html
    # a degenerate problem (its reference's output is constant) is marked, the others are not
    assert html.count('class="num constant"') == 1 and "1 task(s) marked &dagger;" in html
    # and a reference that keeps state across calls (only the lock-step trials checked its outputs)
    assert html.count('class="num stateful"') == 1 and "1 task(s) marked &Dagger;" in html


#: BatchNorm over a linear layer, and a solution normalizing by the running statistics (CUDA-L1's folds).
REF_BN = (
    f"{HEADER}class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.fc = nn.Linear(8, 8)\n        self.bn = nn.BatchNorm1d(8)\n\n"
    "    def forward(self, a):\n        return self.bn(self.fc(a))\n\n\n"
    "def get_inputs():\n    return [torch.randn(4, 8) * 3 + 1]\n\n\ndef get_init_inputs():\n    return []\n"
)
BN_RUNNING = REF_BN.replace("class Model(", "class ModelNew(").replace(
    "return self.bn(self.fc(a))",
    "b = self.bn\n        return torch.nn.functional.batch_norm(self.fc(a), b.running_mean, b.running_var, "
    "b.weight, b.bias, False, 0.0, b.eps)",
)


def test_module_mode_eval_judges_as_cuda_l1s_judge_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_url: str
) -> None:
    """``--module-mode eval``: both models called after ``eval()``, so a BatchNorm folded to its running
    statistics is correct; as built (training mode, the default) it is not. The score names the mode."""
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "h100.json"
    corpus.write_text(
        json.dumps({"level_id": 3, "task_id": 19, "ref_code": REF_BN, "custom_code": BN_RUNNING}) + "\n"
    )
    for run_id, extra, want in (("train", (), "incorrect"), ("eval", ("--module-mode", "eval"), "correct")):
        result = invoke(run_args(run_id, corpus, service_url, *extra))
        assert result.exit_code == 0, result.output
        assert verdicts(tmp_path / "runs" / run_id) == {"L3_19": want}
        score = json.loads((tmp_path / "runs" / run_id / "score.json").read_text())
        assert score["details"]["module_mode"] == [run_id]


def test_model_solutions_without_a_solutions_file_fails_each_task_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(
        ["run", "--model", "solutions", "--run-id", "none", "--limit", "1", "--service-url", service_url]
    )
    assert result.exit_code == 1, result.output
    error = (tmp_path / "runs" / "none" / "logs" / "L1_1_Elementwise_add" / "generate_error.txt").read_text()
    assert "carries no stored solution" in error and "--solutions PATH" in error


# ---- bad input -----------------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def line(**row: Any) -> str:
    return json.dumps(row) + "\n"


GOOD = line(level_id=1, task_id=1, ref_code=REF_ADD, custom_code=ADD)

BAD_INPUT: list[tuple[str, str, str, str]] = [
    # (id, file name, content, expected message after the path)
    ("malformed line", "c.jsonl", GOOD + "{not json\n", ":2: not valid JSON"),
    ("malformed line in .json", "c.json", GOOD + "\n" + '{"level_id": 1,\n', ":3: not valid JSON"),
    ("malformed object", "c.json", '{\n  "1": [\n', ": not valid JSON (Expecting value at line 3 column 1)"),
    (
        "no ref_code",
        "c.jsonl",
        GOOD + line(level_id=1, task_id=2, custom_code=ADD),
        ":2: missing field `ref_code`",
    ),
    (
        "empty ref_code",
        "c.jsonl",
        line(level_id=1, task_id=2, ref_code=" ", custom_code=ADD),
        ":1: field `ref_code` must be",
    ),
    (
        "no level_id",
        "c.jsonl",
        line(task_id=2, ref_code=REF_ADD, custom_code=ADD),
        ":1: missing field `level_id`",
    ),
    (
        "task_id not an int",
        "c.jsonl",
        line(level_id=1, task_id="two", ref_code=REF_ADD, custom_code=ADD),
        ":1: field `task_id` must be the problem id (an integer >= 0), got 'two'",
    ),
    (
        "custom_code not text",
        "c.jsonl",
        line(level_id=1, task_id=2, ref_code=REF_ADD, custom_code=3),
        ":1: field `custom_code` must be the solution's source",
    ),
    ("row not an object", "c.jsonl", "[1, 2]\n", ":1: expected a JSON object"),
    ("duplicate problem", "c.jsonl", GOOD + GOOD, ":2: level 1 task 1 again (first at"),
    ("bad level key", "c.json", json.dumps({"one": []}), ': key "one" is not a level'),
    ("level not a list", "c.json", json.dumps({"1": {"task_id": 1}}), ': level "1" holds a JSON dict'),
    (
        "row of a level",
        "c.json",
        json.dumps({"1": [{"task_id": 1, "custom_code": ADD}]}),
        ': level "1" row 0: missing field `ref_code` (a row has task_id, ref_code, custom_code)',
    ),
    (
        "nothing to judge",
        "c.jsonl",
        line(level_id=1, task_id=1, ref_code=REF_ADD, custom_code=None),
        ": no solution to judge (1 without solution code skipped)",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "expected"), [b[1:] for b in BAD_INPUT], ids=[b[0] for b in BAD_INPUT]
)
def test_malformed_input_is_a_usage_error_naming_file_row_and_field(
    tmp_path: Path, name: str, content: str, expected: str
) -> None:
    path = write(tmp_path / name, content)
    result = invoke(["list-tasks", "--solutions", str(path)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())  # click wraps long messages
    assert "Invalid value for '--solutions'" in text
    assert f"{path}{expected}" in text, text


def test_folder_errors_name_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write(empty / "kernel.py", "x = 1\n")
    result = invoke(["list-tasks", "--solutions", str(empty)])
    assert (
        result.exit_code == 2
        and "no solution files (expected level_{L}_problem_{P}_sample_{S}_kernel.py"
        in " ".join(result.output.split())
    )

    unknown = tmp_path / "unknown"
    unknown.mkdir()
    path = write(unknown / "level_1_problem_99_sample_0_kernel.py", RELU)
    result = invoke(["list-tasks", "--solutions", str(unknown)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"{path}: the dataset has no level 1 problem 99" in text, text


def test_a_malformed_file_stops_run_before_anything_is_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "c.jsonl", GOOD + "{\n")
    result = invoke(run_args("bad", path, service_url))
    assert result.exit_code == 2, result.output
    assert f"{path}:2: not valid JSON" in " ".join(result.output.split())
    assert not (tmp_path / "runs" / "bad").exists()


# ---- listing, ids, backends ------------------------------------------------------------------------


def test_list_tasks_shows_one_task_a_solution_and_level_filters(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.jsonl",
        GOOD + line(level_id=2, task_id=3, ref_code=REF_RELU, custom_code=RELU, score_default=2.0),
    )
    listed = invoke(["list-tasks", "--solutions", str(path), "--json"])
    assert listed.exit_code == 0, listed.output
    tasks = [KernelBenchTask.model_validate_json(x) for x in listed.output.splitlines()]
    assert [t.id for t in tasks] == ["L1_1", "L2_3"]
    assert tasks[1].solution is not None and tasks[1].solution.fields == {"score_default": 2.0}
    level2 = invoke(["list-tasks", "--solutions", str(path), "--level", "2"])
    assert [row.split("\t")[0] for row in level2.output.splitlines()] == ["L2_3"]


def test_a_problem_dumps_as_before_so_earlier_runs_resume() -> None:
    """``solution`` is left out of a problem's dump: its hash, a run's identity, is unchanged."""
    task = make_task(1, 2, "2_ReLU", REF_RELU)
    assert "solution" not in task.model_dump(mode="json") and "solution" not in task.model_dump_json()


@pytest.mark.parametrize(
    ("source", "backend"),
    [
        (RELU, "torch"),
        ("import triton\nimport triton.language as tl\n", "triton"),
        (
            "from torch.utils.cpp_extension import load_inline\nm = load_inline('m', cpp_sources=s, cuda_sources=c)\n",
            "cuda",
        ),
        ("import torch.utils.cpp_extension\nsrc = '__global__ void k() {}'\n", "cuda"),
        ("from torch.utils.cpp_extension import load_inline\nm = load_inline('m', cpp_sources=s)\n", "cpp"),
    ],
)
def test_backend_is_inferred_from_the_source(source: str, backend: str) -> None:
    assert infer_backend(source) == backend


def test_backend_flag_overrides_the_inference(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", GOOD)
    listed = invoke(["list-tasks", "--solutions", str(path), "--json", "--backend", "cpp"])
    (task,) = [KernelBenchTask.model_validate_json(x) for x in listed.output.splitlines()]
    assert task.solution is not None and task.solution.backend == "cpp"
