"""``report RUN_ID``: one self-contained HTML page for a run (no CDN, no script, no network).

Plots are inline SVG drawn here: the speedup distribution of correct kernels (log2 bins), the fast_p
curve for p in [0, 3], and the outcome breakdown per level. A table lists every task with its
outcome, speedup, reward, and the final kernel and per-turn feedback both linked (relative paths
into the run directory) and inlined in ``<details>`` so the page works when copied alone.

The run directory is read by content, not by file name: every ``*.json``/``*.jsonl`` under it is
tried as an ``EvalResult``, ``GenerationResult`` or ``ScoreResult``, so the report does not depend on
the exact artifact layout. Kernel files are found under ``kernels/`` directories whose path names the
task id (the runner writes ``<log_dir>/kernels/turn_<n>.py``, ``feedback_<n>.json``, ``final.py``).
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from benchmark_runner.schemas import EvalResult, GenerationResult, ScoreResult
from kernel_service.kernelbench.metrics import OUTCOME_ORDER, TaskOutcome, fast_p, metrics_by_level, summarize
from pydantic import ValidationError

from .records import outcomes_from_evaluations, reported_speedup

#: Marks the speedup of a task whose reference returned a constant (a degenerate problem).
CONSTANT_MARK = "&dagger;"
#: Marks the speedup of a task whose reference keeps state across calls (its timed outputs unchecked).
STATEFUL_MARK = "&Dagger;"
#: Inline at most this many characters of a kernel or feedback file (the link has the rest).
INLINE_CHARS = 20_000
OUTCOME_COLORS: dict[str, str] = {
    "correct": "#2e7d32",
    "incorrect": "#f9a825",
    "execution_failure": "#ef6c00",
    "initialization_failure": "#d84315",
    "compilation_failure": "#c62828",
    "unknown_error": "#6a1b9a",
    "timeout": "#4527a0",
    "sandbox_error": "#283593",
    "requires_gpu": "#607d8b",
    "unsupported_precision": "#78909c",
    "compiled": "#90a4ae",
    "no_kernel": "#424242",
}


@dataclass
class TaskFiles:
    final: Path | None = None
    kernels: list[Path] = field(default_factory=list)
    feedback: list[Path] = field(default_factory=list)


@dataclass
class RunData:
    run_dir: Path
    evaluations: list[EvalResult]
    generations: dict[str, GenerationResult]
    score: ScoreResult | None
    files: dict[str, TaskFiles]


def _speedup_cell(speedup: float | None, details: dict[str, Any]) -> str:
    """A task's speedup; marked where its reference's output was constant (``reference_constant``) or
    depended on the calls before (``reference_stateful``)."""
    if details.get("reference_constant") is True:
        why = "the reference returned one output for every input: a constant was correct"
        return f'<td class="num constant" title="{why}">{_fmt(speedup)} {CONSTANT_MARK}</td>'
    if details.get("reference_stateful") is True:
        why = "the reference keeps state across calls: only the lock-step correctness trials checked outputs"
        return f'<td class="num stateful" title="{why}">{_fmt(speedup)} {STATEFUL_MARK}</td>'
    return f"<td class=num>{_fmt(speedup)}</td>"


# ---- reading a run --------------------------------------------------------------------------------


def _json_objects(path: Path) -> Iterator[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    if path.suffix == ".jsonl":
        for line in text.splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return
    yield from data if isinstance(data, list) else [data]


def _as(model: type[Any], obj: Any) -> Any:
    try:
        return model.model_validate(obj)
    except ValidationError:
        return None


def load_run(run_dir: Path) -> RunData:
    """Everything the report needs from a run directory (later files win for the same task)."""
    if not run_dir.is_dir():
        raise click.ClickException(f"{run_dir}: no such run directory")
    evaluations: dict[str, EvalResult] = {}
    generations: dict[str, GenerationResult] = {}
    score: ScoreResult | None = None
    for path in sorted(run_dir.rglob("*.json*")):
        if path.suffix not in (".json", ".jsonl") or "kernels" in path.parts:
            continue
        for obj in _json_objects(path):
            if not isinstance(obj, dict):
                continue
            if "data" in obj and (e := _as(EvalResult, obj)) is not None:
                evaluations[e.task_id] = e
            elif "n_tasks" in obj and (s := _as(ScoreResult, obj)) is not None:
                score = s
            elif "task_id" in obj and "payload" in obj and (g := _as(GenerationResult, obj)) is not None:
                generations[g.task_id] = g
    ids = set(evaluations) | set(generations)
    files: dict[str, TaskFiles] = {}
    for kernels_dir in sorted(p for p in run_dir.rglob("kernels") if p.is_dir()):
        rel = kernels_dir.parent.relative_to(run_dir).as_posix()
        rel_parts = set(kernels_dir.relative_to(run_dir).parts)
        task_id = next(
            (
                i
                for i in ids
                if i in rel_parts or _safe(i) in rel_parts or rel.endswith(i) or rel.endswith(_safe(i))
            ),
            None,
        )
        if task_id is None:
            continue
        entry = files.setdefault(task_id, TaskFiles())
        final = kernels_dir / "final.py"
        entry.final = final if final.exists() else entry.final
        entry.kernels += sorted(kernels_dir.glob("turn_*.py"), key=_turn_key)
        entry.feedback += sorted(kernels_dir.glob("feedback_*.json"), key=_turn_key)
    if not evaluations and not generations:
        raise click.ClickException(
            f"{run_dir}: no evaluations or generations found (has the run evaluated yet?)"
        )
    return RunData(run_dir, [evaluations[k] for k in sorted(evaluations)], generations, score, files)


def _safe(task_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)


def _turn_key(path: Path) -> tuple[int, ...]:
    digits = path.stem.split("_")[1:]
    return tuple(int(d) for d in digits if d.isdigit())


# ---- SVG ------------------------------------------------------------------------------------------

W, H = 520, 260
ML, MR, MT, MB = 48, 16, 28, 44


def _svg(svg_id: str, title: str, body: list[str]) -> str:
    return (
        f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img" aria-label="{html.escape(title)}">'
        f"<title>{html.escape(title)}</title>"
        f'<text x="{W / 2}" y="16" text-anchor="middle" class="t">{html.escape(title)}</text>'
        + "".join(body)
        + "</svg>"
    )


def _axes(x_label: str, y_label: str, y_max: float, y_fmt: str = "{:g}") -> list[str]:
    x0, y0, x1, y1 = ML, H - MB, W - MR, MT
    out = [
        f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="ax"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="ax"/>',
        f'<text x="{(x0 + x1) / 2}" y="{H - 6}" text-anchor="middle">{html.escape(x_label)}</text>',
        f'<text x="12" y="{(y0 + y1) / 2}" text-anchor="middle" transform="rotate(-90 12 {(y0 + y1) / 2})">'
        f"{html.escape(y_label)}</text>",
    ]
    for i in range(5):
        v = y_max * i / 4
        y = y0 - (y0 - y1) * i / 4
        out.append(f'<line x1="{x0 - 3}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end">{y_fmt.format(v)}</text>')
    return out


def speedup_histogram(speedups: Sequence[float]) -> str:
    """Counts of correct kernels per log2-speedup bin (half-octave bins from <=1/8x to >=8x)."""
    edges = [2 ** (k / 2) for k in range(-6, 7)]  # 0.125 .. 8
    counts = [0] * (len(edges) + 1)
    for s in speedups:
        counts[sum(1 for e in edges if s >= e)] += 1
    labels = ["<" + f"{edges[0]:g}"] + [f"{e:.2g}" for e in edges]
    y_max = max(max(counts), 1)
    y_max = math.ceil(y_max / 4) * 4
    body = _axes("speedup over reference (log scale)", "correct tasks", y_max, "{:.0f}")
    n = len(counts)
    bw = (W - ML - MR) / n
    for i, c in enumerate(counts):
        h = (H - MB - MT) * c / y_max
        x = ML + i * bw
        cls = "bar fast" if i > sum(1 for e in edges if e < 1) else "bar"
        body.append(
            f'<rect class="{cls}" data-count="{c}" x="{x + 1:.1f}" y="{H - MB - h:.1f}" width="{bw - 2:.1f}" '
            f'height="{h:.1f}"><title>{labels[i]}x: {c}</title></rect>'
        )
        if i % 2 == 0:
            body.append(
                f'<text x="{x:.1f}" y="{H - MB + 14}" text-anchor="middle" class="s">{labels[i]}</text>'
            )
    one_x = ML + (sum(1 for e in edges if e < 1) + 1) * bw
    body.append(f'<line x1="{one_x:.1f}" y1="{MT}" x2="{one_x:.1f}" y2="{H - MB}" class="ref"/>')
    return _svg("speedup-histogram", f"Speedup of correct kernels (n={len(speedups)})", body)


def fast_p_plot(records: Sequence[TaskOutcome], p_max: float = 3.0, steps: int = 60) -> str:
    """fast_p as a step curve over p in [0, p_max], with fast_1 and fast_2 marked."""
    body = _axes("p (speedup threshold)", "fast_p", 1.0, "{:.2f}")
    pts = []
    prev_y: float | None = None
    for i in range(steps + 1):
        p = p_max * i / steps
        x = ML + (W - ML - MR) * p / p_max
        y = H - MB - (H - MB - MT) * fast_p(records, p)
        if prev_y is not None and y != prev_y:
            pts.append(f"{x:.1f},{prev_y:.1f}")  # a step, not a slope: fast_p is piecewise constant
        pts.append(f"{x:.1f},{y:.1f}")
        prev_y = y
    body.append(f'<polyline class="curve" fill="none" points="{" ".join(pts)}"/>')
    for p in (0.0, 1.0, 1.5, 2.0, 3.0):
        x = ML + (W - ML - MR) * p / p_max
        body.append(f'<text x="{x:.1f}" y="{H - MB + 14}" text-anchor="middle" class="s">{p:g}</text>')
    for p in (1.0, 2.0):
        x = ML + (W - ML - MR) * p / p_max
        v = fast_p(records, p)
        y = H - MB - (H - MB - MT) * v
        body.append(
            f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="3.5" data-p="{p:g}" data-value="{v:.4f}">'
            f"<title>fast_{p:g} = {v:.3f}</title></circle>"
        )
    return _svg("fast-p-curve", "fast_p: share of tasks correct and faster than p x reference", body)


def outcome_bars(records: Sequence[TaskOutcome]) -> str:
    """Stacked bars: the share of each outcome, one bar per level (and one for all)."""
    groups: list[tuple[str, list[TaskOutcome]]] = [("all", list(records))]
    for level in sorted({r.level for r in records if r.level is not None}):
        groups.append((f"level {level}", [r for r in records if r.level == level]))
    body = _axes("", "share of tasks", 1.0, "{:.2f}")
    bw = (W - ML - MR - 120) / len(groups)
    present = [o for o in OUTCOME_ORDER if any((r.outcome or "") == o for r in records)]
    present += sorted({r.outcome or "unknown_error" for r in records} - set(present))
    for gi, (name, rs) in enumerate(groups):
        x = ML + gi * bw + bw * 0.15
        y = float(H - MB)
        for outcome in present:
            c = sum(1 for r in rs if (r.outcome or "unknown_error") == outcome)
            if not c:
                continue
            h = (H - MB - MT) * c / len(rs)
            y -= h
            color = OUTCOME_COLORS.get(outcome, "#9e9e9e")
            body.append(
                f'<rect class="seg" data-outcome="{outcome}" data-group="{html.escape(name)}" data-count="{c}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{bw * 0.7:.1f}" height="{h:.1f}" fill="{color}">'
                f"<title>{html.escape(name)}: {outcome} {c}/{len(rs)}</title></rect>"
            )
        body.append(
            f'<text x="{x + bw * 0.35:.1f}" y="{H - MB + 14}" text-anchor="middle" class="s">'
            f"{html.escape(name)} (n={len(rs)})</text>"
        )
    for i, outcome in enumerate(present):
        ly = MT + 4 + i * 16
        body.append(
            f'<rect x="{W - 128}" y="{ly}" width="10" height="10" fill="{OUTCOME_COLORS.get(outcome, "#9e9e9e")}"/>'
        )
        body.append(f'<text x="{W - 114}" y="{ly + 9}" class="s">{outcome}</text>')
    return _svg("outcomes-by-level", "Outcome per level", body)


# ---- page -------------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px} table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5} .num{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:16px} svg{border:1px solid #eee;background:#fff}
svg text{font:11px sans-serif;fill:#333} svg .t{font-size:13px;font-weight:600} svg .s{font-size:10px}
.ax{stroke:#333} .grid{stroke:#eee} .bar{fill:#90a4ae} .bar.fast{fill:#2e7d32} .ref{stroke:#c62828;stroke-dasharray:4 3}
.curve{stroke:#1565c0;stroke-width:2} .pt{fill:#c62828}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:420px;font-size:12px}
.o-correct{color:#2e7d32;font-weight:600}
"""


def _fmt(v: Any, digits: int = 3) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return "" if v is None else html.escape(str(v))


def _cell(key: str, value: Any) -> str:
    if value is None:
        return ""
    if key == "n" or key.endswith("_tokens"):
        return f"{int(value):,}"
    if key == "cost_usd":
        return f"${value:.4f}"
    return _fmt(value)


def _metric_table(overall: dict[str, float], groups: dict[str, dict[str, float]]) -> str:
    keys = ["n", "correct_rate", "fast_0", "fast_1", "fast_1.5", "fast_2", "geomean_speedup", "mean_reward"]
    extra = [k for k in ("prompt_tokens", "completion_tokens", "cost_usd") if k in overall]
    head = "".join(f"<th>{k}</th>" for k in keys + extra)
    rows = [("all", overall)] + sorted(groups.items())
    body = "".join(
        f"<tr><th>{html.escape(name)}</th>"
        + "".join(
            f'<td class="num">{_fmt(m.get(k)) if k != "n" else int(m.get(k, 0))}</td>' for k in keys + extra
        )
        + "</tr>"
        for name, m in rows
    )
    return f'<table id="metrics"><tr><th></th>{head}</tr>{body}</table>'


def _inline(path: Path, label: str, out_dir: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    if len(text) > INLINE_CHARS:
        text = text[:INLINE_CHARS] + f"\n[... {len(text) - INLINE_CHARS} more characters in the file ...]"
    rel = os.path.relpath(path, out_dir)
    return (
        f'<details><summary><a href="{html.escape(rel)}">{html.escape(label)}</a></summary>'
        f"<pre>{html.escape(text)}</pre></details>"
    )


def render(run: RunData, out_dir: Path, price_in: float | None = None, price_out: float | None = None) -> str:
    records = outcomes_from_evaluations(run.evaluations)
    if run.score is not None and run.score.metrics:
        overall, groups = dict(run.score.metrics), dict(run.score.groups) or metrics_by_level(records)
    else:
        overall, groups = summarize(records, price_in, price_out)
    model = run.score.model if run.score else next((e.model for e in run.evaluations), "?")
    tolerance = ", ".join(run.score.details.get("tolerance", [])) if run.score else ""
    tf32 = "; ".join(run.score.details.get("tf32", [])) if run.score else ""
    precision = ", ".join(
        run.score.details.get("precision", [])
        if run.score
        else sorted(
            {str(e.data.details["precision"]) for e in run.evaluations if e.data.details.get("precision")}
        )
    )
    speedups = [r.speedup for r in records if r.correct and r.speedup is not None and r.speedup > 0]
    reported = [reported_speedup(e) for e in run.evaluations]
    show_reported = any(v is not None for v in reported)  # stored solutions that came with their own speedup
    rows = []
    for r, e, claimed in zip(records, run.evaluations, reported, strict=True):
        gen = run.generations.get(r.task_id)
        files = run.files.get(r.task_id, TaskFiles())
        kernel_links = []
        if files.final is not None:
            kernel_links.append(_inline(files.final, "final kernel", out_dir))
        elif gen is not None and isinstance(gen.payload, str):
            kernel_links.append(
                f"<details><summary>final kernel</summary><pre>{html.escape(gen.payload[:INLINE_CHARS])}</pre></details>"
            )
        for k in files.kernels:
            kernel_links.append(_inline(k, k.stem, out_dir))
        feedback = [_inline(f, f.stem, out_dir) for f in files.feedback]
        error = e.data.details.get("message") or e.data.details.get("reason") or ""
        if error:
            feedback.append(
                f"<details><summary>final evaluation</summary><pre>{html.escape(str(error)[:4000])}</pre></details>"
            )
        rows.append(
            f'<tr class="task" data-task="{html.escape(r.task_id)}" data-outcome="{html.escape(r.outcome or "")}">'
            f"<td>{html.escape(r.task_id)}</td><td class=num>{_fmt(r.level)}</td>"
            f'<td class="o-{html.escape(r.outcome or "")}">{html.escape(r.outcome or "")}</td>'
            + _speedup_cell(r.speedup, e.data.details)
            + (f'<td class="num reported">{_fmt(claimed)}</td>' if show_reported else "")
            + f"<td class=num>{_fmt(r.reward)}</td>"
            f"<td class=num>{len(gen.turns) if gen else ''}</td>"
            f"<td>{''.join(kernel_links)}</td><td>{''.join(feedback)}</td></tr>"
        )
    constant = sum(e.data.details.get("reference_constant") is True for e in run.evaluations)
    stateful = sum(e.data.details.get("reference_stateful") is True for e in run.evaluations)
    degenerate = (
        f"<p>{constant} task(s) marked {CONSTANT_MARK}: the reference returned one output for every input "
        "(a degenerate problem), so a constant was correct and its speedup says nothing about a kernel.</p>"
        if constant
        else ""
    ) + (
        f"<p>{stateful} task(s) marked {STATEFUL_MARK}: the reference keeps state from call to call (an RNN's "
        "hidden state), so only the correctness trials, both models called in lock step, checked outputs; "
        "the timed calls' outputs were not.</p>"
        if stateful
        else ""
    )
    title = f"KernelBench run {run.run_dir.name}: {model}"
    reported_head = (
        '<th title="the speedup the solution came with (its score_default), measured by its authors">'
        "reported speedup</th>"
        if show_reported
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<style>{CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p>{len(records)} tasks. Precision: {html.escape(precision or "fp32")}.
Tolerance: {html.escape(tolerance or "service default")}.
TF32: {html.escape(tf32 or "service default")}.
fast_p = share of all tasks that are correct with speedup &gt; p; geomean over correct tasks.</p>
{degenerate}{_metric_table(overall, groups)}
<h2>Plots</h2>
<div class="plots">
{speedup_histogram(speedups)}
{fast_p_plot(records)}
{outcome_bars(records)}
</div>
<h2>Tasks</h2>
<table id="tasks"><thead><tr><th>task</th><th>level</th><th>outcome</th><th>speedup</th>{reported_head}<th>reward</th><th>turns</th>
<th>kernels</th><th>feedback</th></tr></thead><tbody>
{"".join(rows)}
</tbody></table>
</body></html>
"""


def write_report(
    run_dir: Path, out: Path | None = None, price_in: float | None = None, price_out: float | None = None
) -> Path:
    """Write the report of ``run_dir`` (default: ``<run_dir>/report.html``) and return its path."""
    run = load_run(run_dir)
    target = out or run_dir / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    page = render(run, target.parent.resolve(), price_in, price_out)
    target.write_text(page, encoding="utf-8")
    return target
