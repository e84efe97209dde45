"""The runner repo's own smoke test: the bundled sample through the embedded kernel service (CPU).

Runs standalone in the generated runner repo (``pytest`` there); the project's root suite covers the
agent, loaders, metrics and report in depth (tests/kernelbench/).
"""

from __future__ import annotations

from pathlib import Path

import anyio
from kernelbench_runner.benchmark import KernelBenchRunner

from benchmark_runner.client import ServiceClient
from benchmark_runner.llm import LLMConfig
from benchmark_runner.service import make_app, start_server


def test_reference_baseline_on_the_sample(tmp_path: Path) -> None:
    service = KernelBenchRunner.embedded_service()
    assert service is not None
    with start_server(make_app(service)) as server:

        async def main() -> dict[str, float]:
            async with ServiceClient(server.url) as client:
                runner = KernelBenchRunner(service=client, options={"backend": "torch"})
                tasks = runner.load_tasks(None)[:4]
                evals = []
                for task in tasks:
                    gen = await runner.OFFLINE_MODELS["reference"](
                        runner, task, LLMConfig(model="reference"), tmp_path
                    )
                    evals.append(await runner.evaluate(task, gen))
                return (await runner.score(evals, "reference")).metrics

        metrics = anyio.run(main)
    assert metrics["n"] == 4 and metrics["correct_rate"] == 1.0
    assert 0.2 < metrics["geomean_speedup"] < 5.0
