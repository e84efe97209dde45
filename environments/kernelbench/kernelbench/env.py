"""The single-agent env of this taskset, with the two defaults a local run needs.

verifiers provisions a runtime per rollout, remote by default; the harness runs in-process and the
kernels run in the kernel service, so a subprocess runtime (a temporary directory) is all a rollout
needs. Without a service URL the embedded kernel service starts with the env worker, before the first
rollout, so a missing toolchain fails the run up front instead of each rollout. It is the process's
(any other env of this runner in the process shares it) and stops when the process exits.
"""

from __future__ import annotations

import os
from typing import cast

import anyio
import verifiers.v1 as vf
from kernelbench_runner.benchmark import KernelBenchRunner

from benchmark_runner.client import SERVICE_URL_ENV
from benchmark_runner.embedded import shared_service_url

from .taskset import KernelBenchTasksetConfig


class KernelBenchEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The one seat; its runtime defaults to a local subprocess (``--env.agent.runtime.type``)."""


class KernelBenchEnv(vf.SingleAgentEnv, vf.Env[KernelBenchEnvConfig]):
    async def start(self) -> None:
        config = cast(KernelBenchTasksetConfig, self.taskset.config)
        if not (config.service_url or os.environ.get(SERVICE_URL_ENV)):
            await anyio.to_thread.run_sync(shared_service_url, KernelBenchRunner)
