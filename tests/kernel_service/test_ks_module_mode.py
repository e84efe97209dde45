"""``module_mode``: both models called as built (training mode, upstream KernelBench's) or after their
``eval()`` (CUDA-L1's judge's). 27 of CUDA-L1's revised solutions fold BatchNorm into its running statistics
or call ``self.eval()``: wrong against a reference in training mode, which normalizes by each batch's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from ks_sources import evaluate

#: BatchNorm after a linear layer; its running statistics (0 and 1, fresh) differ from any batch's.
REF_BN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.bn = nn.BatchNorm1d(n)
    def forward(self, x):
        return self.bn(self.fc(x))

def get_inputs():
    return [torch.randn(32, 16) * 3 + 1]

def get_init_inputs():
    return [16]
"""

#: The linear layer, then BatchNorm by its running statistics whatever the mode (a fold of the model's).
SOL_RUNNING_STATS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.bn = nn.BatchNorm1d(n)
    def forward(self, x):
        bn = self.bn
        return F.batch_norm(self.fc(x), bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
"""


def test_a_batchnorm_folded_to_running_statistics_is_judged_in_the_mode_asked(client: httpx.Client) -> None:
    as_built = evaluate(client, REF_BN, SOL_RUNNING_STATS)
    assert as_built.outcome == "incorrect" and as_built.module_mode == "train", as_built.message
    in_eval = evaluate(client, REF_BN, SOL_RUNNING_STATS, module_mode="eval")
    assert in_eval.outcome == "correct" and in_eval.module_mode == "eval", in_eval.message
    # the reference itself runs in that mode: its own solution is correct either way
    for mode in ("train", "eval"):
        assert (
            evaluate(
                client, REF_BN, REF_BN.replace("class Model(", "class ModelNew("), module_mode=mode
            ).outcome
            == "correct"
        )


def test_a_mode_other_than_train_or_eval_is_refused_naming_the_field(client: httpx.Client) -> None:
    r = client.post("/v1/evaluate", json={"reference": REF_BN, "solution": SOL_RUNNING_STATS,
                                          "options": {"module_mode": "inference"}})  # fmt: skip
    assert r.status_code == 422 and "module_mode" in r.text


def test_cli_eval_takes_the_module_mode(tmp_path: Path) -> None:
    """``kernel-service eval --module-mode eval``: the folded BatchNorm correct, and the text answer names
    the mode."""
    ref, sol = tmp_path / "ref.py", tmp_path / "sol.py"
    ref.write_text(REF_BN)
    sol.write_text(SOL_RUNNING_STATS)
    exe = Path(sys.executable).parent / "kernel-service"
    args = [str(exe), "eval", str(ref), str(sol), "--gpus", "none", "--perf-trials", "5", "--warmup", "1"]
    done = subprocess.run(
        [*args, "--module-mode", "eval"], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0 and "models in eval mode" in done.stdout, done.stdout + done.stderr
    as_built = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
    assert as_built.returncode == 1 and "outcome: incorrect" in as_built.stdout.lower(), as_built.stdout
