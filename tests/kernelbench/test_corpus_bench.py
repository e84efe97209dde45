"""``bench/corpus.py``: a corpus of solutions judged through the real runner, and its summary.

A tiny CUDA-L1-style corpus (JSON lines with ``score_default``) on small CPU references is judged by
``python bench/corpus.py`` as on a GPU machine: the runner as a subprocess, its embedded kernel service
(CPU workers here), the summary read back from the run's artifacts. The families of the verdicts are
checked on their own, from the messages the kernel service writes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
HEADER = "import torch\nimport torch.nn as nn\n\n"


@pytest.fixture
def corpus(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/corpus.py as a module (its imports need bench/ on the path; PYTHONPATH restored after)."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    spec = importlib.util.spec_from_file_location("bench_corpus", BENCH / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("outcome", "message", "max_abs", "expected"),
    [
        ("correct", "", 0.0, "correct"),
        (
            "incorrect",
            "a timed call's output differs from the reference: call 3",
            1e-6,
            "cached_across_calls",
        ),
        (
            "execution_failure",
            "GPU work of the submission was still running after forward returned",
            None,
            "side_stream_work",
        ),  # fmt: skip
        ("incorrect", "correctness trial 1/5: output: 3 of 32 elements outside atol", 4e-3, "tolerance"),
        (
            "incorrect",
            "correctness trial 1/5: output: 32 of 32 elements outside atol",
            4.7,
            "incorrect_other",
        ),
        ("incorrect", "correctness trial 1/5: output shape (4,) differs", None, "incorrect_other"),
        ("execution_failure", "RuntimeError: CUDA error: an illegal memory access", None, "faults"),
        ("execution_failure", "CUDA kernel errors: device-side assert triggered", None, "faults"),
        ("execution_failure", "TypeError: forward() takes 2 positional arguments", None, "execution_other"),
        ("compilation_failure", "ninja: build stopped", None, "build_failures"),
        ("initialization_failure", "ModelNew() failed", None, "init_failures"),
        ("timeout", "", None, "timeouts"),
        ("unknown_error", "", None, "unknown_error"),
        ("requires_gpu", "", None, "requires_gpu"),
    ],
)
def test_each_verdict_has_its_family(
    corpus: ModuleType, outcome: str, message: str, max_abs: float | None, expected: str
) -> None:
    assert corpus.family(outcome, message, max_abs) == expected


def test_a_correct_answer_to_a_degenerate_problem_has_its_own_family(corpus: ModuleType) -> None:
    """A reference whose output never changes (``reference_constant``): a constant is correct, and its
    speedup (21,000-32,000x in CUDA-L1's first release) is kept apart from the kernels'."""
    assert corpus.family("correct", "", 0.0, True) == "constant_reference"
    assert corpus.family("incorrect", "output: 3 of 32 elements outside atol", 4.7, True) == "incorrect_other"


def test_a_tasks_worker_time_keeps_the_eval_workers_load(corpus: ModuleType) -> None:
    """The answer's ``compile_s`` is the compile pool's time plus the eval worker's load phase; a load
    that builds on the GPU (61 s for one task of the first corpus run) is the worker's time."""
    from benchmark_runner.schemas import EvalResult

    details = {
        "outcome": "correct",
        "elapsed": {"queue_s": 50.0, "compile_s": 61.6, "total_s": 240.0},
        "phases": {"load": 61.5, "correctness": 0.1, "timing": 123.5, "worker_build": 61.5},
    }
    ev = EvalResult.model_validate(
        {"task_id": "L1_27", "model": "solutions", "data": {"status": "correct", "details": details}}
    )
    row = corpus._row(ev)
    assert row["worker_s"] == pytest.approx(240.0 - 50.0 - 0.1)
    assert row["build_s"] == 61.5
    assert row["pairs"] is None  # one pair: no short-call accounting
    gate = {"process_pairs": 8.0, "pair_start_s": 0.65, "pair_time_s": 0.87}
    paired = EvalResult.model_validate(
        {"task_id": "L1_28", "model": "solutions",
         "data": {"status": "correct", "details": {**details, "timing_gate": gate}}}
    )  # fmt: skip
    assert corpus._row(paired)["pairs"] == [8.0, 0.65, 0.87]


def ref(body: str, n_inputs: int) -> str:
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


@pytest.mark.slow  # the embedded service in a subprocess: ~18 s CPU; 67-85 s wall on 2 busy cores (load 6-8)
def test_a_tiny_corpus_is_judged_through_the_runner_and_summarized(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"level_id": 1, "task_id": 1, "ref_code": ref("a + b", 2), "custom_code": sol("torch.add(a, b)", 2),
         "score_default": 1.5},
        {"level_id": 1, "task_id": 2, "ref_code": ref("torch.relu(a)", 1), "custom_code": sol("a * 2", 1),
         "score_default": 3.0},  # wrong
        {"level_id": 2, "task_id": 5, "ref_code": ref("torch.relu(a)", 1),
         "custom_code": sol("a.clamp(min=0) + 1e-3", 1), "score_default": 2.0},  # close, over the tolerance
        {"level_id": 2, "task_id": 6, "ref_code": ref("a", 1), "custom_code": None, "score_default": None},
    ]  # fmt: skip
    path = tmp_path / "h100.json"  # CUDA-L1's revision: JSON lines named .json
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "summary.json"
    cmd = [
        sys.executable,
        str(BENCH / "corpus.py"),
        "--solutions",
        str(path),
        "--corpus-name",
        "tiny@0 h100.json",
    ]
    cmd += [
        "--output-dir",
        str(tmp_path / "runs"),
        "--run-id",
        "tiny",
        "--budget-s",
        "300",
        "--out",
        str(out),
    ]
    done = subprocess.run([*cmd, "--concurrency", "2"], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "family" in done.stdout and "level1" in done.stdout  # the human table

    s = json.loads(out.read_text())
    assert s["bench"] == "corpus" and s["corpus"] == "tiny@0 h100.json" and s["complete"]
    assert (s["tasks"], s["done"]) == (3, 3)  # the row without custom_code is not a task
    (call,) = s["calls"]
    assert call["evaluated"] == 3 and s["wall_s"] == call["wall_s"] > 0
    assert s["per_min"] == pytest.approx(3 / (s["wall_s"] / 60))
    assert s["gpu_worker_s"] > 0 and s["gpu_build_s"] == 0.0
    assert s["gpu_busy_share"] is None if s["gpus"] == 0 else 0 < s["gpu_busy_share"] <= 1
    assert {k: v for k, v in s["outcomes"].items() if v} == {
        "correct": 1,
        "tolerance": 1,
        "incorrect_other": 1,
    }
    assert set(s["outcomes"]) >= {"cached_across_calls", "side_stream_work", "faults", "build_failures"}
    assert set(s["by_level"]) == {"level1", "level2"}
    assert s["by_level"]["level1"]["correct_rate"] == 0.5 and s["by_level"]["level1"]["geomean_speedup"] > 0
    assert {"fast_1", "geomean_speedup"} <= set(s["by_level"]["level2"])
    assert {"load", "correctness", "worker_build"} <= set(s["phase_s_mean"])

    reported = s["reported"]
    pairs = {p["task_id"]: p for p in reported["tasks"]}
    assert {t: p["theirs"] for t, p in pairs.items()} == {"L1_1": 1.5, "L1_2": 3.0, "L2_5": 2.0}
    assert pairs["L1_1"]["ours"] > 0 and pairs["L1_1"]["ratio"] == pytest.approx(pairs["L1_1"]["ours"] / 1.5)
    assert pairs["L1_2"]["ours"] is None and pairs["L1_2"]["ratio"] is None
    differ = reported["differ_by_family"]
    assert [d["task_id"] for d in differ["tolerance"]] == ["L2_5"]
    assert [d["task_id"] for d in differ["incorrect_other"]] == ["L1_2"]
    assert set(differ) <= {"correct", "tolerance", "incorrect_other"}
    # the authors' numbers as the runner's own score reads them
    score = json.loads((tmp_path / "runs" / "tiny" / "score.json").read_text())
    assert {t["task_id"]: t["details"]["reported_speedup"] for t in score["per_task"]} == {
        t: p["theirs"] for t, p in pairs.items()
    }
    assert json.loads((tmp_path / "runs" / "tiny.calls.json").read_text()) == s["calls"]


def test_a_subset_of_the_corpus_is_asked_of_the_runner_by_task_id(corpus: ModuleType) -> None:
    """``--tasks``: the solutions a fix is about judged again in a run of their own (the runner's
    ``--task-id``), not the whole corpus."""
    import argparse

    args = argparse.Namespace(
        solutions=Path("h100_xsm.json"),
        output_dir=Path("runs"),
        tasks=["L1_34", "L2_20"],
        tolerance=None,
        module_mode="train",
    )
    cmd = corpus.run_command(args, "subset", 16)
    assert cmd[cmd.index("--task-id") :] == ["--task-id", "L1_34", "--task-id", "L2_20"]
    assert "--task-id" not in corpus.run_command(argparse.Namespace(**{**vars(args), "tasks": []}), "all", 16)
    # the authors' own rules: their judge's tolerance and module mode, passed on to the runner
    rules = corpus.run_command(
        argparse.Namespace(**{**vars(args), "tolerance": 0.01, "module_mode": "eval"}), "r", 8
    )
    assert rules[-4:] == ["--tolerance", "0.01", "--module-mode", "eval"]


def _report_row(
    task_id: str, outcome: str, family: str, speedup: float | None, theirs: float
) -> dict[str, Any]:
    return {
        "task_id": task_id, "level": int(task_id[1]), "outcome": outcome, "family": family,
        "speedup": speedup, "reported_speedup": theirs, "max_abs_error": None, "backend": "torch",
        "worker_s": 2.0, "build_s": 0.0, "pairs": None, "elapsed": {}, "phases": {}, "message": "wrong",
    }  # fmt: skip


def test_tasks_judged_again_replace_the_first_runs_verdicts(tmp_path: Path) -> None:
    """``bench/corpus_merge.py``: a subset judged again after a fix takes the place of those tasks'
    verdicts in the whole run's report; rows the corpus no longer yields are dropped; the throughput stays
    the whole run's."""
    rows = [
        {"level_id": 1, "task_id": t, "ref_code": ref("a + b", 2), "custom_code": sol("a + b", 2)}
        for t in (1, 2)
    ] + [{"level_id": 1, "task_id": 3, "ref_code": ref("a + b", 2), "custom_code": "None"}]
    corpus_file = tmp_path / "h100.json"
    corpus_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = {
        "corpus": "tiny@0", "gpus": 2, "wall_s": 60.0, "per_min": 3.0, "gpu_worker_s": 6.0, "gpu_build_s": 1.0,
        "command": "kernelbench-runner run ...", "done": 3, "device": "NVIDIA H200", "calls": [{"wall_s": 60.0}],
        "per_task": [
            _report_row("L1_1", "incorrect", "incorrect_other", None, 2.0),
            _report_row("L1_2", "correct", "correct", 1.2, 1.0),
            _report_row("L1_3", "incorrect", "incorrect_other", None, 1.0),  # "None": no longer a task
        ],
    }  # fmt: skip
    again = {"device": "NVIDIA H200", "gpus": 1, "done": 1, "wall_s": 9.0, "gpu_build_s": 0.0,
             "per_task": [{**_report_row("L1_1", "correct", "correct", 1.9, 2.0), "timing_degraded": False}]}  # fmt: skip
    paths = {name: tmp_path / f"{name}.json" for name in ("base", "again", "out")}
    paths["base"].write_text(json.dumps(base))
    paths["again"].write_text(json.dumps(again))
    done = subprocess.run(
        [sys.executable, str(BENCH / "corpus_merge.py"), "--solutions", str(corpus_file)]
        + ["--base-report", str(paths["base"]), "--rejudged-report", str(paths["again"]), "--out", str(paths["out"])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    m = json.loads(paths["out"].read_text())
    assert (m["tasks"], m["done"]) == (2, 2)
    assert {k: v for k, v in m["outcomes"].items() if v} == {"correct": 2}
    assert {r["task_id"]: r["speedup"] for r in m["per_task"]} == {"L1_1": 1.9, "L1_2": 1.2}
    assert (m["wall_s"], m["per_min"], m["gpus"], m["gpu_build_s"]) == (60.0, 3.0, 2, 1.0)  # the whole run's
    assert m["merged"]["rejudged"]["task_ids"] == ["L1_1"] and m["merged"]["dropped_from_base"] == ["L1_3"]
    assert m["merged"]["rows_without_timing_degraded"] == 1
    assert m["reported"]["within_2x"] == 2 and m["by_level"]["level1"]["fast_1"] == 1.0
