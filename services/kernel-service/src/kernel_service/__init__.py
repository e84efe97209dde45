"""GPU kernel benchmark service: compile, check and time submitted kernels in sandboxed workers."""

__version__ = "0.1.0"
