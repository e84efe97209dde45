"""BackendBench: LLM-written PyTorch operator kernels.

The runner class is `backendbench_runner.benchmark.BackendBenchRunner`; the `backendbench-runner` command is
`backendbench_runner.cli`. Nothing is imported here, so `python -m backendbench_runner.service` starts cleanly.
"""
