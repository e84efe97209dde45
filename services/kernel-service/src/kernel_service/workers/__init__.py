"""The process runtime above both benchmarks: worker subprocesses and their pool (``pool.py``,
``worker.py``, which dispatches a job to KernelBench's or BackendBench's judge), the zygote and the side
processes it forks (``zygote.py``, ``candidate.py``), executors (local, Ray), fair scheduling, MPS, the
build cache and work dirs. Imports the core and the benchmark rooms, never the service modules above it."""
