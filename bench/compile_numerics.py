"""Why a torch.compile baseline fails KernelBench's fp32 check: its numerics against a float64 truth.

The harness compares a submission with the eager reference at atol = rtol = 1e-4 (upstream's fp32
tolerance) under PyTorch's default numeric settings, where cuDNN convolutions may use TF32. When
``--model torch-compile`` is judged incorrect on a problem, this script tells apart the two causes that
are not a broken kernel: TF32 rounding (inductor picks another layout and cuDNN algorithm, so the two
TF32 results differ by more than 1e-4 although both are as close to the float64 truth) and random ops
(dropout in training mode draws other numbers under inductor). For each problem it prints the largest
error, and the share of elements outside the tolerance, of eager and compiled fp32 against the model run
in float64, with cuDNN TF32 on (PyTorch's default) and off.

    python bench/compile_numerics.py --dataset-file problems.jsonl --level 2 \\
        --name 73_Conv2d_BatchNorm_Scaling --out bench/results/compile_numerics_h100.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import torch
from _report import save_report


def _load(code: str) -> tuple[Any, Any, Any]:
    scope: dict[str, Any] = {"__name__": "kernelbench_problem"}
    exec(compile(code, "<problem>", "exec"), scope)
    return scope["Model"], scope["get_inputs"], scope["get_init_inputs"]


def _errors(got: torch.Tensor, truth: torch.Tensor, tol: float) -> dict[str, float]:
    diff = (got.double() - truth).abs()
    outside = diff > tol + tol * truth.abs()
    return {"max_abs": diff.max().item(), "share_outside": outside.double().mean().item()}


def probe(code: str, tol: float, device: str) -> dict[str, Any]:
    model_cls, get_inputs, get_init_inputs = _load(code)
    torch.manual_seed(0)
    eager = model_cls(*get_init_inputs()).to(device)
    truth_model = copy.deepcopy(eager).double()
    compiled = torch.compile(copy.deepcopy(eager))
    torch.manual_seed(1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in get_inputs()]
    inputs64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    result: dict[str, Any] = {}
    with torch.no_grad():
        torch.manual_seed(2)
        truth = truth_model(*inputs64)
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            torch.manual_seed(2)
            ref = eager(*inputs)
            torch.manual_seed(2)
            new = compiled(*inputs)
            result[f"tf32_{'on' if tf32 else 'off'}"] = {
                "eager_vs_fp64": _errors(ref, truth, tol),
                "compiled_vs_fp64": _errors(new, truth, tol),
                "compiled_vs_eager": _errors(new, ref.double(), tol),
            }
            del ref, new
    torch.backends.cudnn.allow_tf32 = True
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset-file", type=Path, required=True, help="JSONL rows: level, name, code")
    parser.add_argument("--level", default="2")
    parser.add_argument("--name", action="append", required=True, help="problem name (repeatable)")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.dataset_file.read_text().splitlines() if line.strip()]
    codes = {r["name"]: r["code"] for r in rows if str(r["level"]) == str(args.level)}
    report: dict[str, Any] = {
        "bench": "compile_numerics",
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "tolerance": args.tolerance,
        "problems": {},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.name:
        try:
            report["problems"][name] = probe(codes[name], args.tolerance, args.device)
        except Exception as exc:  # one problem's failure should not lose the others
            report["problems"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        torch.cuda.empty_cache()
        print(name, json.dumps(report["problems"][name]), flush=True)
        save_report(args.out, report)  # after each: a time limit keeps the rest
    return 0


if __name__ == "__main__":
    sys.exit(main())
