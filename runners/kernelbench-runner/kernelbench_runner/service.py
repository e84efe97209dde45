"""The kernelbench benchmark service is the project's kernel service (package ``kernel_service``).

Yours to edit (`copier update` never overwrites it). KernelBench needs no checker of its own: kernels
are compiled, checked and timed by ``kernel_service``, which this module re-exports so the runner, its
tests and ``python -m kernelbench_runner.service serve --port 8000`` all use the same service.
``run`` starts it in-process (every visible GPU, else CPU workers for the torch/cpp backends) when no
``--service-url`` is given.
"""

from __future__ import annotations

from kernel_service.cli import main as kernel_service_cli
from kernel_service.service import KernelService, KernelServiceConfig

#: The service class of this benchmark (the name the template's docs use).
KernelBenchService = KernelService

__all__ = ["KernelBenchService", "KernelService", "KernelServiceConfig", "main", "make_service"]


def make_service(gpus: list[int] | None = None, cpu_workers: int = 1) -> KernelService:
    """The kernel service as ``run`` embeds it: ``gpus=None`` takes every visible GPU, ``[]`` none."""
    return KernelService(KernelServiceConfig(gpus=gpus, cpu_workers=cpu_workers))


def main() -> None:
    """``kernel-service``'s CLI (``serve``, ``eval``...) under this module's name."""
    kernel_service_cli(prog_name="python -m kernelbench_runner.service")


if __name__ == "__main__":
    main()
