"""``kernel-service serve`` (the HTTP API), ``kernel-service eval REF.py SOL.py`` (one pair, no server) and
``kernel-service doctor`` (whether scores can be trusted on this deployment)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, cast

import click

from .config import KernelServiceConfig, Setting
from .judging.schemas import MAX_TOLERANCE, EvalOptions, Outcome
from .kernelbench.schemas import KernelEvalRequest, KernelEvalResponse
from .service import KernelService


def parse_gpus(value: str) -> list[int] | None:
    """``all`` -> None (every visible GPU), ``none`` -> [], ``0,1`` -> [0, 1]."""
    v = value.strip().lower()
    if v == "all":
        return None
    if v in ("none", ""):
        return []
    try:
        return [int(x) for x in v.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"expected 'all', 'none' or GPU indices like '0,1'; got {value!r}") from exc


def _config(
    gpus: str,
    workers: int,
    work_dir: Path | None,
    build_cache: Path | None,
    sandbox: str,
    datasets: tuple[Path, ...],
) -> KernelServiceConfig:
    try:  # the MPS and own-baseline settings come from the environment here (KS_MPS, KS_OWN_BASELINE)
        return KernelServiceConfig(
            gpus=parse_gpus(gpus),
            cpu_workers=workers,
            work_dir=work_dir,
            build_cache_dir=build_cache,
            sandbox=sandbox,
            dataset_sources=list(datasets),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


_common = [
    click.option("--gpus", default="all", show_default=True, help="'all', 'none' or indices like 0,1"),
    click.option(
        "--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="CPU slots when no GPU"
    ),
    click.option(
        "--work-dir",
        type=click.Path(path_type=Path),
        default=None,
        help="worker temp dirs (default: a temp dir)",
    ),
    click.option(
        "--build-cache", type=click.Path(path_type=Path), default=None, help="extension build cache dir"
    ),
    click.option(
        "--sandbox",
        type=click.Choice(["auto", "bwrap", "unshare", "none"]),
        default="auto",
        show_default=True,
        help="launcher giving each worker its own PID, network and mount namespaces (auto: bwrap, else unshare)",
    ),
]


#: ``--mps`` and ``--own-baseline``: how the GPU path times kernels (``serve`` and ``doctor``).
_timing_path = [
    click.option(
        "--mps",
        type=click.Choice(["auto", "on", "off"]),
        default="auto",
        show_default=True,
        envvar="KS_MPS",
        show_envvar=True,
        help="an NVIDIA MPS daemon of the service's own for its GPUs (auto: when GPUs and the tool exist). "
        "On: one call a reading, so a submission cannot overlap, batch or share work across a reading's "
        "calls; each side read at one path level. Off: several calls a reading, bounded from below by lone "
        "calls (docs/integrity.md)",
    ),
    click.option(
        "--own-baseline",
        type=click.Choice(["auto", "on", "off"]),
        default="auto",
        show_default=True,
        envvar="KS_OWN_BASELINE",
        show_envvar=True,
        help="read a kernel against the reference timed in the kernel's own process before the kernel "
        "loads (auto: under MPS; on: BackendBench on any GPU path too)",
    ),
]


def _with(options: list[Any], fn: Any) -> Any:
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def timing_path_options(fn: Any) -> Any:
    return _with(_timing_path, fn)


def common_options(fn: Any) -> Any:
    return _with(_common, fn)


@click.group()
def main() -> None:
    """GPU kernel benchmark service."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--api-keys", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--allowlist", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option(
    "--datasets",
    "datasets",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="KernelBench checkout dir or problems .jsonl (repeatable)",
)
@click.option("--max-body-mb", default=16, show_default=True, type=click.IntRange(1, 1024))
@click.option(
    "--build-cache-max-gb",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="evict least-recently-used builds past this size (default: unbounded)",
)
@click.option(
    "--result-cache/--no-result-cache",
    default=True,
    show_default=True,
    help="answer identical resubmissions from earlier verdicts (never timeouts or sandbox errors)",
)
@click.option(
    "--result-cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep cached verdicts here across restarts (default: memory only)",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local worker subprocesses, or compile/eval actors on a Ray cluster",
)
@click.option(
    "--address",
    "ray_address",
    default="local",
    show_default=True,
    help="with --executor ray: 'local' starts a Ray instance here; else a cluster address ('auto', 'ray://h:10001')",
)
@click.option(
    "--compile-resource",
    "compile_resources",
    multiple=True,
    metavar="NAME[=N]",
    help="with --executor ray: a custom Ray resource each compile actor needs (builds only on nodes "
    "started with it: ray start --resources '{\"ks_build\": 8}'); repeatable",
)
@click.option(
    "--eval-resource",
    "eval_resources",
    multiple=True,
    metavar="NAME[=N]",
    help="with --executor ray: a custom Ray resource each evaluation actor needs; repeatable",
)
@click.option(
    "--build-pch/--no-build-pch",
    default=False,
    show_default=True,
    help="precompile torch/extension.h once per flag set for the compile workers (shorter C++ builds)",
)
@click.option(
    "--light-include/--no-light-include",
    default=False,
    show_default=True,
    help="also build each solution with torch/extension.h includes made torch/types.h, at the same time, "
    "and judge that build when it succeeds (shorter nvcc builds)",
)
@timing_path_options
@common_options
def serve(
    host: str,
    port: int,
    api_keys: Path | None,
    allowlist: Path | None,
    datasets: tuple[Path, ...],
    max_body_mb: int,
    build_cache_max_gb: float | None,
    result_cache: bool,
    result_cache_dir: Path | None,
    executor: str,
    ray_address: str,
    compile_resources: tuple[str, ...],
    eval_resources: tuple[str, ...],
    build_pch: bool,
    light_include: bool,
    mps: str,
    own_baseline: str,
    gpus: str,
    workers: int,
    work_dir: Path | None,
    build_cache: Path | None,
    sandbox: str,
) -> None:
    """Serve the evaluation API until interrupted."""
    from benchmark_runner.service.app import ConfigError, ServiceConfig, make_app
    from benchmark_runner.service.server import serve as run_server

    try:
        config = ServiceConfig.from_files(api_keys, allowlist, max_body_bytes=max_body_mb * 1024 * 1024)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    cfg = _config(gpus, workers, work_dir, build_cache, sandbox, datasets)
    cfg.build_cache_max_bytes = int(build_cache_max_gb * 1e9) if build_cache_max_gb else None
    cfg.result_cache = result_cache
    cfg.result_cache_dir = result_cache_dir
    cfg.executor = "ray" if executor == "ray" else "local"
    cfg.ray_address = ray_address
    cfg.ray_compile_resources = _resources(compile_resources)
    cfg.ray_eval_resources = _resources(eval_resources)
    cfg.build_pch = build_pch
    cfg.light_include = light_include
    cfg.mps, cfg.own_baseline = cast(Setting, mps), cast(Setting, own_baseline)  # click.Choice checked them
    service = KernelService(cfg)
    run_server(make_app(service, config), host, port)


def _resources(specs: tuple[str, ...]) -> dict[str, float]:
    """``NAME`` or ``NAME=N`` (N > 0, default 1) -> the Ray resources an actor asks for."""
    out: dict[str, float] = {}
    for spec in specs:
        name, _, amount = spec.partition("=")
        try:
            value = float(amount) if amount else 1.0
        except ValueError:
            raise click.BadParameter(f"{spec!r}: expected NAME or NAME=N") from None
        if not name or value <= 0:
            raise click.BadParameter(f"{spec!r}: expected NAME or NAME=N with N > 0")
        out[name] = value
    return out


def summary(r: KernelEvalResponse) -> str:
    lines = [f"outcome: {r.outcome.value}   reward: {r.reward:+.4f}"]
    if r.speedup is not None:
        lines.append(f"speedup: {r.speedup:.4f}x")
    if r.ref_timing and r.new_timing:
        lines.append(
            f"reference: median {r.ref_timing.median:.6f} ms (n={r.ref_timing.n});"
            f"  solution: median {r.new_timing.median:.6f} ms (n={r.new_timing.n})"
        )
    if r.max_abs_error is not None:
        lines.append(
            f"max abs error {r.max_abs_error:.3g}, max rel error {r.max_rel_error or 0:.3g} (atol={r.atol}, rtol={r.rtol})"
        )
    lines.append(
        f"precision: {r.precision}"
        + (f"; models in {r.module_mode} mode" if r.module_mode != "train" else "")
    )
    if r.message:
        lines.append(f"message: {r.message}")
    lines.append(f"hardware: {r.hardware}; torch {r.torch_version}; CUDA {r.cuda_version}; device {r.device}")
    if r.timing_method:
        lines.append(f"timing: {r.timing_method}")
    if r.profile is not None:
        lines.append(profile_summary(r))
    for title, text in (("compile log", r.compile_log), ("traceback", r.traceback), ("output", r.output)):
        if text:
            lines.append(f"--- {title} (tail) ---\n{text[-1500:]}")
    return "\n".join(lines)


def profile_summary(r: KernelEvalResponse) -> str:
    """The answer's profile as a few lines per side (``--profile``)."""
    prof = r.profile
    assert prof is not None
    lines = [f"--- profile ({prof.source}; {prof.note or ''}) ---"]
    for role, side in (("solution", prof.candidate), ("reference", prof.reference)):
        if side is None:
            continue
        if side.error and not side.kernels:
            lines.append(f"{role}: {side.error}")
            continue
        call = f"{side.call_us:.1f} us a call" if side.call_us is not None else "call time unknown"
        outside = f", {side.outside_share:.0%} outside kernels" if side.outside_share is not None else ""
        lines.append(f"{role}: {call}{outside}; {side.kernel_count} kernels")
        for k in side.kernels[:8]:
            lines.append(f"  {k.time_us:10.1f} us  {k.calls:4d}x  {k.name[:100]}")
    if prof.ncu is not None:
        if prof.ncu.metrics:
            metrics = ", ".join(f"{k} {v:.4g}" for k, v in prof.ncu.metrics.items())
            lines.append(f"ncu ({(prof.ncu.kernel or '')[:80]}): {metrics}")
        else:
            lines.append(f"ncu: {prof.ncu.error}")
    return "\n".join(lines)


@main.command(name="eval")
@click.argument("reference", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("solution", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--backend", type=click.Choice(["torch", "cpp", "cuda", "triton"]), default="torch", show_default=True
)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--perf-trials", default=100, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--correctness-trials", default=5, show_default=True, type=click.IntRange(0, 100))
@click.option("--warmup", default=10, show_default=True, type=click.IntRange(0, 1000))
@click.option(
    "--tolerance",
    type=click.FloatRange(0, MAX_TOLERANCE),
    default=None,
    help="atol = rtol (default: 1e-4 fp32, 1e-2 fp16/bf16)",
)
@click.option(
    "--tf32",
    type=click.Choice(["default", "off", "on"]),
    default="default",
    show_default=True,
    help="TF32 for fp32 matmuls and convolutions, both sides (default: PyTorch's, as upstream)",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "fp16", "bf16"]),
    default="fp32",
    show_default=True,
    help="dtype of both sides: floating inputs, init inputs and model parameters/buffers cast to it "
    "(default tolerance 1e-4 fp32, 1e-2 fp16/bf16)",
)
@click.option(
    "--module-mode",
    type=click.Choice(["train", "eval"]),
    default="train",
    show_default=True,
    help="both models called as built (train: upstream KernelBench's) or after eval() (CUDA-L1's judge's)",
)
@click.option(
    "--profile",
    is_flag=True,
    help="add a profile of one untimed call of each side (advisory; decides nothing)",
)
@click.option(
    "--timeout", "timeout_s", default=300.0, show_default=True, type=click.FloatRange(0, 3600, min_open=True)
)
@click.option("--no-perf", is_flag=True, help="check correctness only")
@click.option("--json", "as_json", is_flag=True, help="print the full response as JSON")
@common_options
def eval_cmd(
    reference: Path,
    solution: Path,
    backend: str,
    device: str,
    perf_trials: int,
    correctness_trials: int,
    warmup: int,
    tolerance: float | None,
    tf32: str,
    precision: str,
    module_mode: str,
    profile: bool,
    timeout_s: float,
    no_perf: bool,
    as_json: bool,
    gpus: str,
    workers: int,
    work_dir: Path | None,
    build_cache: Path | None,
    sandbox: str,
) -> None:
    """Evaluate SOLUTION (defines ModelNew) against REFERENCE (Model, get_inputs, get_init_inputs).

    Exit status 0 when the solution is correct, 1 otherwise.
    """
    request = KernelEvalRequest(
        reference=reference.read_text(),
        solution=solution.read_text(),
        backend=backend,  # type: ignore[arg-type]
        options=EvalOptions(
            device=device,  # type: ignore[arg-type]
            perf_trials=perf_trials,
            correctness_trials=correctness_trials,
            warmup=warmup,
            tolerance=tolerance,
            tf32=tf32,  # type: ignore[arg-type]
            precision=precision,  # type: ignore[arg-type]
            module_mode=module_mode,  # type: ignore[arg-type]
            profile=profile,
            timeout_s=timeout_s,
            measure_performance=not no_perf,
        ),
    )
    config = _config(gpus, workers, work_dir, build_cache, sandbox, ())
    config.compile_step = False  # one evaluation: compiling in a second process would only add a torch import
    response = asyncio.run(_eval_once(config, request))
    if as_json:
        click.echo(json.dumps(response.model_dump(mode="json"), indent=2))
    else:
        click.echo(summary(response))
    sys.exit(0 if response.outcome == Outcome.CORRECT else 1)


async def _eval_once(config: KernelServiceConfig, request: KernelEvalRequest) -> KernelEvalResponse:
    service = KernelService(config)
    await service.startup()
    try:
        return await service.evaluate(request)
    finally:
        await service.shutdown()


@main.command()
@click.option(
    "--quick",
    is_flag=True,
    help="the short run (at most ~90 s on a 2-GPU host): fewer kernels, no busy-host check",
)
@click.option(
    "--json", "as_json", is_flag=True, help="print the report as JSON (a DoctorReport) instead of the table"
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="also write the JSON report here",
)
@click.option(
    "--cpu", "cpu_only", is_flag=True, help="check the CPU path (as --gpus none), even on a GPU host"
)
@click.option(
    "--url",
    default=None,
    help="check a running service at this URL instead of starting one here (serve's settings are then its own)",
)
@click.option(
    "--api-key",
    envvar="BENCHMARK_SERVICE_API_KEY",
    show_envvar=True,
    default=None,
    help="with --url: the service's API key",
)
@timing_path_options
@common_options
def doctor(
    quick: bool,
    as_json: bool,
    out: Path | None,
    cpu_only: bool,
    url: str | None,
    api_key: str | None,
    mps: str,
    own_baseline: str,
    gpus: str,
    workers: int,
    work_dir: Path | None,
    build_cache: Path | None,
    sandbox: str,
) -> None:
    """Whether scores can be trusted on this deployment: judge known kernels (honest references, a real
    speedup, cheats, faults, builds beside a short kernel) on every device, with the settings `serve`
    would use here (or against --url), print the environment and each check, and end with one verdict
    line. Exit status 1 when any check fails."""
    from .doctor import DoctorOptions, run_doctor
    from .doctor.report import render

    if cpu_only:
        gpus = "none"
    options = DoctorOptions(
        quick=quick, url=url, api_key=api_key, progress=lambda line: click.echo(line, err=True)
    )
    if url:
        options.settings = {"url": url}
    else:
        cfg = _config(gpus, workers, work_dir, build_cache, sandbox, ())
        cfg.result_cache = True  # as serve; the doctor's jobs bypass it (use_result_cache: false)
        cfg.mps, cfg.own_baseline = cast(Setting, mps), cast(Setting, own_baseline)
        options.config = cfg
        options.settings = {
            "gpus": gpus,
            "mps": mps,
            "own_baseline": own_baseline,
            "sandbox": sandbox,
            "workers": workers,
        }
    report = run_doctor(options)
    text = json.dumps(report.model_dump(mode="json"), indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    click.echo(text if as_json else render(report))
    sys.exit(0 if report.trusted else 1)


if __name__ == "__main__":
    main()
