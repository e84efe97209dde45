"""KernelBench as a verifiers environment: ``vf-eval kernelbench``.

verifiers resolves the taskset, its harness and its env from this module's ``__all__``.
"""

from .env import KernelBenchEnv, KernelBenchEnvConfig
from .harness import KernelBenchHarness, KernelBenchHarnessConfig
from .taskset import KernelBenchData, KernelBenchRLTask, KernelBenchTaskset, KernelBenchTasksetConfig

__all__ = [
    "KernelBenchData",
    "KernelBenchEnv",
    "KernelBenchEnvConfig",
    "KernelBenchHarness",
    "KernelBenchHarnessConfig",
    "KernelBenchRLTask",
    "KernelBenchTaskset",
    "KernelBenchTasksetConfig",
]
