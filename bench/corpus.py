"""A published corpus of model-written solutions judged through the runner: ``--model solutions``.

Each row of the corpus (its own reference ``ref_code`` and the model's ``custom_code``) is one task of
``kernelbench-runner run --model solutions --solutions PATH``, the command users type, unchanged: the
runner starts its embedded kernel service (every visible GPU, the service's defaults; ``--mps`` sets
``KS_MPS``) and judges every row. The summary says how many were judged and how fast (``per_min``, the
eval workers' busy share of the GPUs), what became of them by family (a timed call's output differing:
``cached_across_calls``; GPU work left running: ``side_stream_work``; close but over the tolerance:
``tolerance``; CUDA faults...), fast_1 and geomean speedup per level, and, where the rows carry the
authors' own measured speedup (``score_default``: ``reported_speedup`` in score.json), ours against
theirs task by task, with the tasks where the two differ by more than 2x grouped by our verdict.

As ``kernelbench_gpu.py``: ``--budget-s`` stops the run (SIGINT, then the process group) and a later
call with the same ``--output-dir`` and ``--run-id`` resumes it (the runner's own resume); every call's
wall time is kept in ``<run-id>.calls.json`` beside the run, so the totals add up over device calls;
``--tar`` packs the run directory (and that file) so it can travel back and forth.

The corpus (CUDA-L1's solutions) is GPL-3: fetch it yourself and NEVER commit it (nor a run directory,
whose tasks.jsonl and logs hold its code) to this repository. Keep it outside the checkout, or in an
ignored path::

    # first release (the authors withdrew it; a fork keeps it): a JSON object {"1": [...], "2": [...],
    # "3": [...]} of {task_id, ref_code, custom_code}
    git clone https://github.com/sekstini/CUDA-L1 /data/cuda-l1-first
    git -C /data/cuda-l1-first rev-parse HEAD                  # the commit to name in --corpus-name
    #   -> /data/cuda-l1-first/optimized_cuda_code/h100_xsm.json
    # the authors' revision: JSON lines {level_id, task_id, ref_code, custom_code, score_default, ...}
    git clone https://github.com/deepreinforce-ai/CUDA-L1 /data/cuda-l1
    #   -> /data/cuda-l1/optimized_cuda_code/h100.json

    python bench/corpus.py --solutions /data/cuda-l1-first/optimized_cuda_code/h100_xsm.json \\
        --corpus-name "sekstini/CUDA-L1@<commit> optimized_cuda_code/h100_xsm.json" \\
        --output-dir .runs --run-id cudal1-xsm --budget-s 540 --out bench/results/corpus_cudal1_xsm_h100.json

``bench/corpus_probe.jsonl`` (ours, in the revision's format) is the corpus's cases in small: one ReLU
over 4096x4096 judged four ways: task 1 PyTorch, 2 a CUDA ``load_inline`` at import, 3 the same built in
``__init__``, 4 a ``load_inline`` whose compile fails inside ``try`` with PyTorch as the fallback (as 67 of
the first release's 73 extensions are written). Their ``timing_s`` side by side is what a ``load_inline``
candidate's timing costs against a PyTorch one's.

Per evaluation (the kernel service's answer in each EvalResult's details): worker seconds are
``elapsed.total_s - queue_s`` less the compile pool's time (``compile_s - phases.load``: the answer's
``compile_s`` includes the eval worker's load), the eval worker's time on the task; ``gpu_build_s``
sums ``phases.worker_build`` (an eval worker building a library itself, its GPU judging nothing
meanwhile); ``gpu_busy_share`` = worker seconds / (wall x GPUs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

from _budget import run_budgeted
from _report import save_report
from _sources import use_sources  # bench/ (the script's dir) is on sys.path

use_sources("kernelbench-runner")

from kernel_service.kernelbench.metrics import (  # noqa: E402
    TaskOutcome,
    kernelbench_metrics,
    metrics_by_level,
    reward_of,
)
from kernelbench_runner.records import reported_speedup  # noqa: E402
from kernelbench_runner.solutions import SolutionLoadError, load_solutions  # noqa: E402

from benchmark_runner.artifacts import TASKS_FILE, RunArtifacts  # noqa: E402
from benchmark_runner.schemas import EvalResult  # noqa: E402

#: Our verdicts by family, in the order the table shows them.
FAMILIES = (
    "correct",
    "constant_reference",
    "cached_across_calls",
    "side_stream_work",
    "tolerance",
    "incorrect_other",
    "faults",
    "execution_other",
    "build_failures",
    "init_failures",
    "timeouts",
    "unknown_error",
)
#: "close but over the tolerance": an incorrect answer whose max abs error is at most this.
NEAR_MISS_ABS = 1e-2
#: A task where ours and theirs differ by more than this factor (either way) is listed.
DIFFER_FACTOR = 2.0
FAULT_WORDS = ("cuda error", "illegal memory", "device-side assert")
ELAPSED_KEYS = ("queue_s", "compile_s", "init_s", "correctness_s", "timing_s", "total_s")


def family(outcome: str | None, message: str, max_abs_error: float | None, constant: bool = False) -> str:
    """Our verdict's family (``FAMILIES``; another outcome, e.g. ``requires_gpu``, keeps its own name).
    ``constant``: the answer's ``reference_constant`` (a degenerate problem: a constant is correct)."""
    text = message.lower()
    if outcome == "correct":
        return "constant_reference" if constant else "correct"
    if outcome == "incorrect" and "a timed call's output differs" in text:
        return "cached_across_calls"  # right in the checks, wrong when timed: output kept across calls
    if "still running after forward returned" in text:
        return "side_stream_work"
    if outcome == "incorrect":
        if max_abs_error is not None and max_abs_error <= NEAR_MISS_ABS:
            return "tolerance"
        return "incorrect_other"
    if outcome == "execution_failure":
        return "faults" if any(w in text for w in FAULT_WORDS) else "execution_other"
    named = {
        "compilation_failure": "build_failures",
        "initialization_failure": "init_failures",
        "timeout": "timeouts",
        "unknown_error": "unknown_error",
    }
    return named.get(outcome or "", outcome or "unknown_error")


def run_command(args: argparse.Namespace, run_id: str, concurrency: int) -> list[str]:
    """The runner's command line (after the interpreter)."""
    return [
        "-m",
        "kernelbench_runner.cli",
        "run",
        "--model",
        "solutions",
        "--solutions",
        str(args.solutions),
        "--run-id",
        run_id,
        "--output-dir",
        str(args.output_dir),
        "--concurrency",
        str(concurrency),
        *[arg for task in args.tasks for arg in ("--task-id", task)],
        *(["--tolerance", str(args.tolerance)] if args.tolerance else []),
        *(["--module-mode", args.module_mode] if args.module_mode != "train" else []),
    ]


def run_runner(args: argparse.Namespace, run_id: str, concurrency: int) -> tuple[int | None, float, str]:
    """One ``kernelbench-runner run`` subprocess, stopped at ``--budget-s``; (exit code or None, wall, tail)."""
    cmd = [sys.executable, *run_command(args, run_id, concurrency)]
    print(f"$ KS_MPS={args.mps}", " ".join(cmd[1:]), flush=True)
    env = {**os.environ, "KS_MPS": args.mps}
    return run_budgeted(cmd, args.output_dir / f"{run_id}.log", args.budget_s, env)


def task_count(run_dir: Path, solutions: Path) -> int | None:
    """The tasks the run was asked to judge (the corpus's rows with solution code): its tasks.jsonl, else
    (a run stopped before writing it) the corpus file read as the runner reads it."""
    path = run_dir / TASKS_FILE
    if path.is_file():
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    try:
        return len(load_solutions(solutions, problems=list).tasks)
    except SolutionLoadError:  # a folder, whose references are the runner's dataset: not counted here
        return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _row(ev: EvalResult) -> dict[str, Any]:
    """One evaluation: verdict, family, speedups (ours and the authors'), where the worker's time went."""
    d = ev.data.details or {}
    outcome = ev.data.outcome or d.get("outcome") or ev.data.status.value
    message = str(d.get("message") or ev.error or "")
    max_abs = _num(d.get("max_abs_error"))
    elapsed = d.get("elapsed") if isinstance(d.get("elapsed"), dict) else {}
    phases = d.get("phases") if isinstance(d.get("phases"), dict) else {}
    gate = d.get("timing_gate") if isinstance(d.get("timing_gate"), dict) else {}
    total = _num(elapsed.get("total_s"))
    # the answer's compile_s is the compile pool's time plus the eval worker's load phase (its own
    # imports and builds, on the GPU's clock): only the pool's is not the worker's
    pool_s = (_num(elapsed.get("compile_s")) or 0.0) - (_num(phases.get("load")) or 0.0)
    worker_s = total - (_num(elapsed.get("queue_s")) or 0.0) - pool_s if total is not None else None
    return {
        "task_id": ev.task_id,
        "level": d.get("level"),
        "outcome": outcome,
        "family": family(outcome, message, max_abs, d.get("reference_constant") is True),
        "speedup": _num(d.get("speedup")) if outcome == "correct" else None,
        "timing_degraded": bool(d.get("timing_degraded")),
        # the reference keeps state from call to call: the timed outputs were not checked
        "reference_stateful": d.get("reference_stateful") is True,
        "reported_speedup": reported_speedup(ev),
        "max_abs_error": max_abs,
        "backend": d.get("backend"),
        "worker_s": worker_s,
        "build_s": _num(phases.get("worker_build")) or 0.0,
        # a call under 10 us: timed in fresh process pairs, each this long to start and to time (s)
        "pairs": [_num(gate.get(k)) for k in ("process_pairs", "pair_start_s", "pair_time_s")]
        if gate.get("process_pairs")
        else None,
        "elapsed": {k: _num(elapsed.get(k)) for k in ELAPSED_KEYS if k in elapsed},
        "phases": {k: v for k, v in phases.items() if _num(v) is not None},
        "latency_s": ev.latency_s,
        "message": message[:300],
    }


def _means(dicts: list[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per key over the evaluations (0 where a key did not occur)."""
    names = sorted({k for p in dicts for k in p})
    return {k: round(sum(p.get(k) or 0.0 for p in dicts) / len(dicts), 4) for k in names} if dicts else {}


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def compare_reported(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ours against the authors' ``reported_speedup``, task by task. A task differs when the ratio (ours
    over theirs) is beyond ``DIFFER_FACTOR`` either way, or when we measured no speedup (not correct here)
    although they report one; the differing tasks are grouped by our verdict's family."""
    pairs = []
    differ: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        theirs = r["reported_speedup"]
        if theirs is None:
            continue
        ours = r["speedup"]
        ratio = ours / theirs if ours is not None and theirs > 0 else None
        pair = {"task_id": r["task_id"], "ours": ours, "theirs": theirs, "ratio": ratio}
        pairs.append({**pair, "family": r["family"]})
        if ratio is None or not 1 / DIFFER_FACTOR <= ratio <= DIFFER_FACTOR:
            entry = pair if r["family"] == "correct" else {**pair, "message": r["message"][:200]}
            differ.setdefault(r["family"], []).append(entry)
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    return {
        "n": len(pairs),
        "both_measured": len(ratios),
        "within_2x": sum(1 / DIFFER_FACTOR <= x <= DIFFER_FACTOR for x in ratios),
        "ratio_geomean": _geomean(ratios),
        "theirs_geomean": _geomean([p["theirs"] for p in pairs]),
        "theirs_geomean_where_ours_correct": _geomean([p["theirs"] for p in pairs if p["ratio"] is not None]),
        "differ_by_family": {f: differ[f] for f in sorted(differ, key=_family_order)},
        "differ_counts": {f: len(differ[f]) for f in sorted(differ, key=_family_order)},
        "tasks": pairs,
    }


def _family_order(name: str) -> tuple[int, str]:
    return (FAMILIES.index(name) if name in FAMILIES else len(FAMILIES), name)


def _record(row: dict[str, Any]) -> TaskOutcome:
    """What the KernelBench metrics need of one row (so that rows merged from two reports score alike)."""
    outcome = str(row["outcome"])
    return TaskOutcome(
        correct=outcome == "correct",
        speedup=row["speedup"],
        reward=reward_of(outcome, row["speedup"]),
        outcome=outcome,
        level=row["level"],
        task_id=row["task_id"],
        timing_degraded=bool(row.get("timing_degraded")),
    )


def summarize_run(run_dir: Path) -> dict[str, Any]:
    """What is judged so far in ``run_dir``: ``summarize_rows`` of its latest evaluations."""
    return summarize_rows([_row(ev) for _, ev in sorted(RunArtifacts(run_dir).read_evaluations().items())])


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Verdicts by family, fast_1 and geomean per level, time per phase, and the authors' reported
    speedups against ours."""
    records = [_record(r) for r in rows]
    families = Counter(r["family"] for r in rows)
    level_metrics = metrics_by_level(records) if records else {}
    keep = ("n", "correct_rate", "fast_1", "fast_2", "geomean_speedup")
    worker = [r["worker_s"] for r in rows if r["worker_s"] is not None]
    paired = [r for r in rows if r["pairs"] and (r["pairs"][0] or 0) > 1]  # calls under 10 us: several pairs
    return {
        "done": len(rows),
        "outcomes": {
            **{f: families.get(f, 0) for f in FAMILIES},
            **{f: n for f, n in sorted(families.items()) if f not in FAMILIES},
        },
        "service_outcomes": dict(sorted(Counter(r["outcome"] for r in rows).items())),
        "backends": dict(sorted(Counter(str(r["backend"]) for r in rows).items())),
        "metrics": kernelbench_metrics(records) if records else {},
        "by_level": {lv: {k: m[k] for k in keep if k in m} for lv, m in level_metrics.items()},
        "gpu_worker_s": sum(worker),
        "gpu_build_s": sum(r["build_s"] for r in rows),
        # tasks timed in several process pairs (calls under 10 us) and the eval workers' seconds on them
        "short_calls": {"tasks": len(paired), "worker_s": sum(r["worker_s"] or 0.0 for r in paired)},
        "elapsed_s_mean": _means([r["elapsed"] for r in rows if r["elapsed"]]),
        "phase_s_mean": _means([r["phases"] for r in rows if r["phases"]]),
        "reported": compare_reported(rows),
        "per_task": rows,
    }


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(report: dict[str, Any]) -> None:
    """The summary for a person: throughput, verdicts by family, per level, ours against theirs."""
    print(f"\n{report['corpus']}  ({report['device']} x{report['gpus']}, {len(report['calls'])} call(s))")
    print(
        f"judged {report['done']}/{_fmt(report['tasks'], 'd')} in {report['wall_s']:.0f}s: "
        f"{_fmt(report['per_min'], '.1f')}/min, workers {report['gpu_worker_s']:.0f}s "
        f"(builds {report['gpu_build_s']:.0f}s), GPU busy share {_fmt(report['gpu_busy_share'], '.2f')}"
    )
    short = report.get("short_calls") or {}
    print(
        f"short calls (timed in process pairs): {short.get('tasks', 0)} tasks, {short.get('worker_s', 0.0):.0f} worker-s"
    )
    print("\n  family                  n   differ>2x")
    differ = report["reported"]["differ_counts"]
    for name, n in report["outcomes"].items():
        if n or name in ("correct",):
            print(f"  {name:<22}{n:>4}   {differ.get(name, 0):>6}")
    print("\n  level     n  correct  fast_1  geomean")
    for level, m in report["by_level"].items():
        print(
            f"  {level:<7}{int(m['n']):>4}  {m['correct_rate']:>7.2f}  {m['fast_1']:>6.2f}  "
            f"{m['geomean_speedup']:>7.3f}"
        )
    rep = report["reported"]
    if rep["n"]:
        print(
            f"\n  reported speedups: {rep['n']} tasks, {rep['both_measured']} correct here, "
            f"{rep['within_2x']} within 2x; geomean ours/theirs {_fmt(rep['ratio_geomean'])}, "
            f"theirs {_fmt(rep['theirs_geomean'])} (where ours correct: "
            f"{_fmt(rep['theirs_geomean_where_ours_correct'])})"
        )
    phases = " ".join(f"{k}={v:.2f}" for k, v in report["phase_s_mean"].items())
    print(f"  phase means (s): {phases or '-'}\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--solutions", type=Path, required=True, help="the corpus file (never committed)")
    parser.add_argument(
        "--corpus-name", required=True, help='where it came from: "owner/repo@<commit> path/in/repo"'
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs"))
    parser.add_argument("--run-id", required=True)
    parser.add_argument(
        "--tasks", nargs="*", default=[], help="only these task ids (L1_34 ...): a subset judged"
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        help="the runner's --tolerance (CUDA-L1's judge: 0.01) [default: upstream's]",
    )
    parser.add_argument(
        "--module-mode",
        choices=["train", "eval"],
        default="train",
        help="the runner's --module-mode (CUDA-L1's judge: eval) [default: train, upstream's]",
    )
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop the run after this long")
    parser.add_argument("--concurrency", type=int, help="tasks in flight [default: 8 per GPU]")
    parser.add_argument("--mps", choices=["auto", "on", "off"], default="auto", help="KS_MPS")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tar", type=Path, help="also pack the run directory into this .tar.gz")
    args = parser.parse_args()
    args.solutions = args.solutions.resolve()

    import torch

    gpus = torch.cuda.device_count()
    concurrency = args.concurrency or 8 * max(gpus, 1)
    run_id = args.run_id
    args.output_dir.mkdir(parents=True, exist_ok=True)
    run_dir = args.output_dir / run_id
    calls_file = args.output_dir / f"{run_id}.calls.json"
    calls = json.loads(calls_file.read_text()) if calls_file.exists() else []
    before = len(RunArtifacts(run_dir).read_evaluations()) if run_dir.exists() else 0
    code, wall, tail = run_runner(args, run_id, concurrency)
    summary = summarize_run(run_dir)  # nothing judged when the runner refused the run (its output: why)
    calls.append(
        {"exit_code": code, "wall_s": wall, "evaluated": summary["done"] - before, "concurrency": concurrency}
    )
    calls_file.write_text(json.dumps(calls, indent=1))
    wall_s = sum(c["wall_s"] for c in calls)
    done = summary["done"]
    score_file = run_dir / "score.json"
    report = {
        "bench": "corpus",
        "corpus": args.corpus_name,
        "command": "kernelbench-runner "
        + " ".join(run_command(args, run_id, concurrency)[2:]).replace(
            str(args.solutions), args.solutions.name
        ),
        "mps": args.mps,
        "device": torch.cuda.get_device_name(0) if gpus else "cpu",
        "gpus": gpus,
        "torch": torch.__version__,
        "complete": code == 0,
        "calls": calls,
        "tasks": task_count(run_dir, args.solutions),
        "done": done,
        "wall_s": wall_s,
        "per_min": done / (wall_s / 60) if wall_s > 0 else None,
        "gpu_worker_s": summary["gpu_worker_s"],
        "gpu_build_s": summary["gpu_build_s"],
        "gpu_busy_share": summary["gpu_worker_s"] / (wall_s * gpus) if gpus and wall_s > 0 else None,
        **{k: v for k, v in summary.items() if k not in ("done", "gpu_worker_s", "gpu_build_s")},
        "score_json": json.loads(score_file.read_text())["metrics"]
        if score_file.exists() and code == 0
        else None,
        "runner_output_tail": tail if code else "",
    }
    save_report(args.out, report)
    print_table(report)
    if code:
        print(tail[-1500:])
    if args.tar and run_dir.exists():
        with tarfile.open(args.tar, "w:gz") as tar:
            tar.add(run_dir, arcname=run_id)
            tar.add(calls_file, arcname=calls_file.name)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
