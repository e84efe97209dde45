"""BackendBench in the kernel service: suites of aten ops, and the evaluator a worker runs on a kernel."""
