"""Prompt text, code extraction from plain-text replies, solution assembly and feedback trimming."""

from __future__ import annotations

import json
from pathlib import Path

from kernelbench_runner import prompts
from kernelbench_runner.problems import load_problems


def test_prompt_shows_the_problem_as_upstream_or_stripped(sample_file: Path) -> None:
    task = next(t for t in load_problems(sample_file) if t.id == "L1_2_ReLU")
    full = prompts.initial_messages(task, "cuda", max_turns=3)
    assert (
        full[0]["role"] == "system" and "run_kernel" in full[0]["content"] and "3 turns" in full[0]["content"]
    )
    assert "CUDA" in full[0]["content"] and "ModelNew" in full[1]["content"]
    assert "def get_inputs" in full[1]["content"] and "L1_2_ReLU" in full[1]["content"]
    stripped = prompts.user_prompt(task, "triton", source_mode="model")
    assert "get_inputs" not in stripped and "class Model" in stripped and "Triton" in stripped
    single = prompts.initial_messages(task, "cuda", max_turns=3, use_tools=False)
    assert "run_kernel" not in single[0]["content"] and "```python" in single[0]["content"]


def test_extract_code_prefers_the_last_modelnew_python_block() -> None:
    text = (
        "Plan:\n```cpp\n__global__ void k() {}\n```\n"
        "```python\nclass ModelNew: pass  # first\n```\n"
        "```python\nprint('helper only')\n```\n"
        "```python\nclass ModelNew: pass  # second\n```\nthanks"
    )
    assert prompts.extract_code(text) == "class ModelNew: pass  # second\n"
    assert prompts.extract_code("```\nclass ModelNew: pass\n```") == "class ModelNew: pass\n"
    assert prompts.extract_code("no code here") is None
    assert prompts.extract_code(None) is None
    assert prompts.extract_code("import torch\nclass ModelNew(torch.nn.Module): pass") is not None


def test_assemble_solution_binds_sources_as_strings() -> None:
    cuda = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n"""tricky"""'
    source = prompts.assemble_solution("print(len(cuda_source), cpp_source)", cuda=cuda, cpp="int f();")
    ns: dict[str, object] = {}
    exec(source, ns)
    assert ns["cuda_source"] == cuda and ns["cpp_source"] == "int f();"
    assert prompts.assemble_solution("x = 1") == "x = 1"


def test_feedback_is_trimmed_and_outcome_specific() -> None:
    log = "line\n" * 5000 + "error: expected ';'"
    fb = prompts.feedback_for({"outcome": "compilation_failure", "compile_log": log, "reward": -5})
    assert fb["correct"] is False and fb["error"].endswith("error: expected ';'")
    assert len(fb["error"]) <= prompts.FEEDBACK_CHARS + 10
    ok = prompts.feedback_for(
        {"outcome": "correct", "speedup": 0.8, "ref_timing": {"median": 1.0}, "new_timing": {"median": 1.25}}
    )
    assert ok["speedup"] == 0.8 and ok["yours_ms"] == 1.25 and "not faster" in ok["hint"]
    bad = prompts.feedback_for(
        {
            "outcome": "incorrect",
            "max_abs_error": 0.5,
            "atol": 1e-4,
            "correctness_trials": 5,
            "correctness_trials_passed": 0,
        }
    )
    assert bad["max_abs_error"] == 0.5 and bad["trials_passed"] == "0/5"
    assert json.loads(prompts.feedback_text({"outcome": "timeout", "message": "killed after 300 s"}))[
        "message"
    ]
