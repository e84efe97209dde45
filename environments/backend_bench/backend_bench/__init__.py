"""BackendBench as a verifiers environment: ``vf-eval backend-bench``.

verifiers resolves the taskset, its harness and its env from this module's ``__all__``.
"""

from .env import BackendBenchEnv, BackendBenchEnvConfig
from .harness import BackendBenchHarness, BackendBenchHarnessConfig
from .taskset import BackendBenchData, BackendBenchRLTask, BackendBenchTaskset, BackendBenchTasksetConfig

__all__ = [
    "BackendBenchData",
    "BackendBenchEnv",
    "BackendBenchEnvConfig",
    "BackendBenchHarness",
    "BackendBenchHarnessConfig",
    "BackendBenchRLTask",
    "BackendBenchTaskset",
    "BackendBenchTasksetConfig",
]
