"""The service backendbench-runner posts to: the kernel service, shared with kernelbench-runner.

BackendBench evaluation lives in ``kernel_service.backendbench`` (suites, evaluator, cheat detection,
timing) and runs in the kernel service's sandboxed workers; this module only builds that service for
``run`` without ``--service-url`` (started in-process), and ``python -m backendbench_runner.service``
serves it over HTTP (the same thing as ``kernel-service serve``, which is what a GPU host should run).
"""

from __future__ import annotations

from typing import Any

import click
from benchmark_runner.service import BenchmarkService
from pydantic import ValidationError

_PROBE: dict[str, Any] = {
    "kind": "backendbench",
    "dataset": "backendbench-smoke",
    "op": "add",
    "suite": "smoke",
    "source": "",
}


def kernel_service_speaks_backendbench() -> bool:
    """Whether ``KernelService``'s POST /v1/evaluate accepts BackendBench requests (``kind`` dispatch)."""
    from kernel_service.service import KernelService

    try:
        KernelService.evaluate_request_model.model_validate(_PROBE)
    except ValidationError:
        return False
    return True


def make_service(
    sandbox: str = "auto", cpu_workers: int = 1, gpus: list[int] | None = None, mps: str | None = None
) -> BenchmarkService:
    """The kernel service with every visible GPU (or ``cpu_workers`` CPU workers when there is none).

    No compile pool: BackendBench kernels are plain Python modules (Triton JIT-compiles on first call,
    ``load_inline`` at import), so a separate compile step would only cost a worker process, and the eval
    workers get every core.
    """
    from kernel_service.service import KernelService, KernelServiceConfig

    if kernel_service_speaks_backendbench():
        config = KernelServiceConfig(gpus=gpus, cpu_workers=cpu_workers, sandbox=sandbox, compile_step=False)
        if mps is not None:  # else the service's default: ``KS_MPS``, auto when unset
            config.mps = mps  # type: ignore[assignment]
        return KernelService(config)
    # A kernel service from before the ``kind`` dispatch: its BackendBench-only sibling, same workers.
    from kernel_service.backendbench_service import BackendBenchService

    return BackendBenchService(workers=cpu_workers, sandbox=sandbox, gpus=gpus)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--sandbox", type=click.Choice(["auto", "unshare", "none"]), default="auto", show_default=True)
@click.option(
    "--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="CPU workers when no GPU"
)
def main(host: str, port: int, sandbox: str, workers: int) -> None:
    """Serve the kernel service (BackendBench and KernelBench) over HTTP."""
    from benchmark_runner.service import make_app, serve

    serve(make_app(make_service(sandbox, workers)), host, port)


if __name__ == "__main__":
    main()
