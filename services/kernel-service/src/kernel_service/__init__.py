"""GPU kernel benchmark service: compile, check and time submitted kernels in sandboxed workers."""

__version__ = "0.2.0"
