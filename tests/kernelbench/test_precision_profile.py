"""Issue 31 through ``kernelbench-runner``'s real CLI on the CPU: a bf16 run (answers, config, score,
report, refused resume) and ``--feedback profile`` (the profile table in the agent's next message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from kernelbench_runner import prompts
from kernelbench_runner.benchmark import KernelBenchOptions
from kernelbench_runner.cli import cli

from benchmark_runner.testing.fake_llm import FakeLLMServer

RELU = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n"
RELU_2 = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def run_kernel(python: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_kernel", "arguments": {"python": python}}]}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_options_carry_precision_and_profile_only_where_asked() -> None:
    assert KernelBenchOptions().eval_options() == {}  # fp32: requests as before precisions existed
    bf16 = KernelBenchOptions(precision="bf16", feedback="profile")
    assert bf16.eval_options() == {"precision": "bf16"}  # the final verdict: no profile
    assert bf16.agent_eval_options() == {"precision": "bf16", "profile": True}
    assert "profile" not in KernelBenchOptions(feedback="always").agent_eval_options()


def test_a_bf16_reference_run(kernel_service_url: str, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    base = ["run", "--model", "reference", "--run-id", "bf", "--output-dir", str(out)]
    base += ["--service-url", kernel_service_url, "--backend", "torch", "--limit", "3"]
    result = invoke(*base, "--precision", "bf16")
    assert result.exit_code == 0, result.output
    run = out / "bf"
    evals = [e["data"] for e in rows(run / "evaluations.jsonl")]
    assert len(evals) == 3 and all(e["outcome"] == "correct" for e in evals), evals
    assert all(e["details"]["precision"] == "bf16" and e["details"]["atol"] == 1e-2 for e in evals)
    config = json.loads((run / "config.json").read_text())
    assert config["generation_options"]["precision"] == "bf16"
    score = json.loads((run / "score.json").read_text())
    assert score["details"]["precision"] == ["bf16"]
    report = invoke("report", "--run-id", "bf", "--output-dir", str(out))
    assert "Precision: bf16" in Path(report.output.strip()).read_text()

    refused = invoke(*base, "--precision", "fp16")
    assert refused.exit_code == 3
    assert "generation_options.precision: stored 'bf16', now 'fp16'" in refused.output
    assert invoke(*base, "--precision", "bf16").exit_code == 0  # the same precision resumes

    fp32 = invoke(*[a if a != "bf" else "f32" for a in base])  # the default is stored as fp32
    assert fp32.exit_code == 0, fp32.output
    assert json.loads((out / "f32" / "config.json").read_text())["generation_options"]["precision"] == "fp32"


def test_an_older_run_without_a_precision_resumes_as_fp32(kernel_service_url: str, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    base = ["run", "--model", "reference", "--run-id", "old", "--output-dir", str(out)]
    base += ["--service-url", kernel_service_url, "--backend", "torch", "--limit", "1"]
    assert invoke(*base).exit_code == 0
    config_file = out / "old" / "config.json"
    config = json.loads(config_file.read_text())
    del config["generation_options"]["precision"]  # as a run made before the flag existed
    config_file.write_text(json.dumps(config))
    assert invoke(*base).exit_code == 0
    assert invoke(*base, "--precision", "bf16").exit_code == 3


def test_profile_feedback_reaches_the_second_turn(kernel_service_url: str, tmp_path: Path) -> None:
    """Two turns of ``--feedback profile``: the first kernel's profile table (ops with times, both sides)
    is in the conversation the model gets next, as stored in the run's generations."""
    script = {"(task L1_2_ReLU)": [run_kernel(RELU), run_kernel(RELU_2)]}
    out = tmp_path / "runs"
    with FakeLLMServer(script) as fake:
        args = [
            "run",
            "--model",
            "fake",
            "--run-id",
            "prof",
            "--output-dir",
            str(out),
            "--base-url",
            fake.url,
        ]
        args += ["--service-url", kernel_service_url, "--backend", "torch", "--task-id", "L1_2_ReLU"]
        result = invoke(*args, "--feedback", "profile", "--max-turns", "2")
        assert result.exit_code == 0, result.output
        assert len(fake.requests) == 2  # a correct first kernel does not stop a profile run

    (gen,) = rows(out / "prof" / "generations.jsonl")
    first, second = gen["turns"]
    system = first["messages"][0]["content"]
    assert "profile of one untimed call" in system and "outside kernels" in system
    tool = second["messages"][-1]
    assert tool["role"] == "tool"
    head, _, table = tool["content"].partition("\n\n")
    verdict = json.loads(head)
    assert verdict["outcome"] == "correct" and "profile" not in verdict
    assert table.startswith("Profile of one untimed call") and len(table) <= prompts.PROFILE_CHARS
    assert "yours (ModelNew):" in table and "reference (Model):" in table
    assert "aten::clamp_min" in table and "aten::relu" in table  # the candidate's op and the reference's
    assert "time_us" in table and " us a call" in table
    record = json.loads((out / "prof" / "logs" / "L1_2_ReLU" / "kernels" / "feedback_0.json").read_text())
    assert record["result"]["profile"]["candidate"]["kernels"] and record["feedback"]["profile"] == table
    # the final, independent evaluation is a verdict only: no profile asked
    (evaluation,) = rows(out / "prof" / "evaluations.jsonl")
    assert evaluation["data"]["outcome"] == "correct" and evaluation["data"]["details"]["profile"] is None


def _profile(kernels: int, name: str = "k") -> dict[str, Any]:
    side = {
        "call_us": 120.0,
        "kernel_us": 100.0,
        "outside_share": 0.17,
        "kernel_count": kernels,
        "kernels": [
            {"name": f"{name}{i}" * 20, "calls": 1, "time_us": 100.0 - i} for i in range(min(kernels, 15))
        ],
    }
    return {"device": "cuda:0", "source": "GPU kernels", "candidate": side, "reference": dict(side)}


def test_profile_table_fits_its_budget_and_keeps_the_heaviest() -> None:
    big = _profile(40)
    big["ncu"] = {
        "kernel": "k0",
        "metrics": {"sm_throughput_pct": 45.12, "dram_throughput_pct": 88.0, "registers_per_thread": 32.0},
    }
    table = prompts.profile_text(big, budget=900)
    assert table is not None and len(table) <= 900
    assert "k0" in table and "... " in table and "more" in table
    assert "SM throughput 45.1% of peak" in table and "registers/thread 32.0" in table
    full = prompts.profile_text(big)
    assert full is not None and full.count("\n  ") > table.count("\n  ")  # a larger budget keeps more rows
    assert prompts.profile_text({"device": "cpu", "note": "not profiled"}) is None
    denied = _profile(2)
    denied["ncu"] = {"error": "ERR_NVGPUCTRPERM"}
    assert "ncu: not run (ERR_NVGPUCTRPERM)" in (prompts.profile_text(denied) or "")
    reply = prompts.feedback_for({"outcome": "correct", "speedup": 1.2, "profile": big})
    assert prompts.render(reply).split("\n\n", 1)[1] == reply["profile"]
    plain = prompts.feedback_for({"outcome": "correct", "speedup": 1.2})
    assert prompts.render(plain) == json.dumps(plain)  # without a profile, what it always was
