"""KernelBench: LLM-written GPU kernels.

The runner class is `kernelbench_runner.benchmark.KernelBenchRunner`; the `kernelbench-runner` command is
`kernelbench_runner.cli`. Nothing is imported here, so `python -m kernelbench_runner.service` starts cleanly.
"""
