"""Service-side framework: a ``BenchmarkService`` plus ``make_app`` gives a benchmark its HTTP API."""

from .base import BenchmarkService

__all__ = ["BenchmarkService"]
