"""The runner's own ``run`` flags and their parsed form.

The flags are click options (``cli_options``); their raw values travel in ``LLMConfig.extra`` and the
run's config.json, and :class:`RunOptions` is the one place that turns them into typed settings, so
``run``, ``evaluate`` and ``score`` read them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from .scoring import DEFAULT_WEIGHTS, parse_weights

SUITES = ("smoke", "opinfo", "torchbench", "facto")
FEEDBACK_MODES = ("until_correct", "none", "profile")
#: What the model is asked to write; the service runs any Python module, so this shapes the prompt only.
BACKENDS = ("triton", "torch", "cpp")


def _check_weights(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    try:
        parse_weights(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--weights: ")) from exc
    return value


def _check_ops(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not split_ops(value):
        raise click.BadParameter("expected comma-separated aten op names, e.g. add,mul")
    return value


def cli_options() -> list[click.Option]:
    """Fresh option objects (click keeps per-command state on them)."""
    return [
        click.Option(
            ["--suite"],
            type=click.Choice(SUITES),
            default="smoke",
            show_default=True,
            help="BackendBench suite",
        ),
        click.Option(
            ["--ops"],
            callback=_check_ops,
            help="comma-separated ops replacing the suite's list, e.g. add,mul",
        ),
        click.Option(
            ["--feedback"],
            type=click.Choice(FEEDBACK_MODES),
            default="until_correct",
            show_default=True,
            help="until_correct: evaluate each turn and feed failures back, up to --max-turns; none: one answer; "
            "profile: every turn evaluated for --max-turns (a correct kernel is optimised further), each "
            "correct kernel's feedback with a profile of its call and the op's; the best kernel is the answer",
        ),
        click.Option(
            ["--weights"],
            callback=_check_weights,
            help="task score = weighted sum, e.g. correctness=0.5,overall=0.5 [default: overall=1]",
        ),
        click.Option(
            ["--backend"],
            type=click.Choice(BACKENDS),
            default="triton",
            show_default=True,
            help="what the model is asked to write: Triton, plain PyTorch ops, or C++/CUDA via load_inline",
        ),
        click.Option(
            ["--trace-file"],
            help="torchbench: a trace in BackendBench's format (e.g. its full one) instead of the bundled one",
        ),
        click.Option(["--kernel-dir"], help="root of kernels/<op>/turn_<n>.py [default: <run dir>/kernels]"),
        click.Option(
            ["--perf-processes"],
            type=click.IntRange(1, 8),
            help="fresh pairs of processes each performance input is timed in (more: steadier speedups, "
            "~1 s an op each on a GPU) [default: the service's, 5 on a GPU]",
        ),
    ]


def split_ops(text: str) -> list[str]:
    return list(dict.fromkeys(o.strip() for o in text.split(",") if o.strip()))


@dataclass(frozen=True)
class RunOptions:
    """Typed view of the flags; unknown keys are ignored (they belong to the framework)."""

    suite: str = "smoke"
    ops: list[str] | None = None
    feedback: str = "until_correct"
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    backend: str = "triton"
    trace_file: str | None = None
    kernel_dir: str | None = None
    perf_processes: int | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> RunOptions:
        """Raises ValueError naming the flag when a value is bad (a programmatic caller skips click)."""
        suite = raw.get("suite") or "smoke"
        if suite not in SUITES:
            raise ValueError(f"--suite: expected one of {', '.join(SUITES)}, got {suite!r}")
        feedback = raw.get("feedback") or "until_correct"
        if feedback not in FEEDBACK_MODES:
            raise ValueError(f"--feedback: expected one of {', '.join(FEEDBACK_MODES)}, got {feedback!r}")
        backend = raw.get("backend") or "triton"
        if backend not in BACKENDS:
            raise ValueError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
        ops = raw.get("ops")
        perf_processes = raw.get("perf_processes")
        if perf_processes is not None and (
            isinstance(perf_processes, bool)
            or not isinstance(perf_processes, int)
            or not 1 <= perf_processes <= 8
        ):
            raise ValueError(f"--perf-processes: expected an integer from 1 to 8, got {perf_processes!r}")
        return cls(
            suite=suite,
            ops=split_ops(ops) if isinstance(ops, str) else (list(ops) if ops else None),
            feedback=feedback,
            weights=parse_weights(raw.get("weights")),
            backend=backend,
            trace_file=raw.get("trace_file") or None,
            kernel_dir=raw.get("kernel_dir") or None,
            perf_processes=perf_processes,
        )
