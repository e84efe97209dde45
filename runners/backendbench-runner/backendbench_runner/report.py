"""``backendbench-runner report RUN_ID``: a markdown summary of a run, per suite then per op.

Read from the run's files only (config, tasks, generations, evaluations), so it works on a finished run,
a run still going (the ops evaluated so far) and a copied run directory, with no service.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmark_runner.artifacts import RunArtifacts
from benchmark_runner.schemas import EvalResult, GenerationResult

from . import scoring
from .options import RunOptions

SUITE_COLUMNS = (
    ("n", "ops", "{:.0f}"),
    ("correctness", "correct", "{:.1%}"),
    ("performance", "mean perf", "{:.3g}"),
    ("overall", "mean overall", "{:.3g}"),
    ("score", "score", "{:.3g}"),
    ("geomean_speedup_correct", "geomean speedup (correct)", "{:.3g}"),
    ("faster_rate", "faster than op", "{:.1%}"),
)


def _op_row(task_id: str, ev: EvalResult | None, gen: GenerationResult | None) -> str:
    turns = len(gen.turns) if gen is not None and gen.turns else (1 if gen is not None else 0)
    if ev is None:
        return f"| {task_id} | not evaluated | | | | {turns} | |"
    d = ev.data.details
    c, p, o = scoring.components(ev)
    n_in = d.get("n_correctness_inputs", 0) + d.get("n_perf_inputs", 0)
    inputs = f"{d.get('n_correct', 0)}/{n_in}" if n_in else ""
    secs = f"{d['duration_s']:.2f}" if isinstance(d.get("duration_s"), (int, float)) else ""
    return f"| {task_id} | {ev.data.outcome or ev.data.status.value} | {inputs} | {p:.3g} | {o:.3g} | {turns} | {secs} |"


def render_report(run_dir: Path) -> str:
    artifacts = RunArtifacts(run_dir)
    config = artifacts.read_config() or {}
    options = RunOptions.parse(config.get("generation_options") or {})
    task_ids = [str(r.get("id")) for r in artifacts.read_task_rows()]
    evals = artifacts.read_evaluations()
    gens = artifacts.read_generations()
    done = [evals[t] for t in task_ids if t in evals]
    result = scoring.score(done, str(config.get("model", "?")), options.weights, {})

    weights = ", ".join(f"{k}={v:g}" for k, v in options.weights.items() if v)
    lines = [
        f"# BackendBench run `{artifacts.run_id}`",
        "",
        f"model `{config.get('model', '?')}`, suite `{options.suite}`, feedback `{options.feedback}`, "
        f"backend `{options.backend}`, max turns {config.get('generation_options', {}).get('max_turns', '?')}; "
        f"score weights {weights}; {len(done)}/{len(task_ids)} ops evaluated.",
        "",
        "## Per suite",
        "",
        "| suite | " + " | ".join(title for _, title, _ in SUITE_COLUMNS) + " |",
        "|---|" + "---:|" * len(SUITE_COLUMNS),
    ]
    for suite, metrics in sorted(result.groups.items()):
        cells = [fmt.format(metrics.get(key, 0.0)) for key, _, fmt in SUITE_COLUMNS]
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    by_suite: dict[str, list[str]] = defaultdict(list)
    for t in task_ids:
        by_suite[t.split("/")[0]].append(t)
    lines += ["", "## Per op", ""]
    lines += [
        "| op | outcome | inputs correct | performance | overall | turns | eval s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for suite in sorted(by_suite):
        lines += [_op_row(t, evals.get(t), gens.get(t)) for t in by_suite[suite]]
    kernels = Path(options.kernel_dir) if options.kernel_dir else run_dir / "kernels"
    if kernels.is_dir():
        lines += ["", f"Kernels: `{kernels}/<op>/turn_<n>.py`."]
    return "\n".join(lines)
