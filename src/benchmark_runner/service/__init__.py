"""Service-side framework: a ``BenchmarkService`` plus ``make_app`` gives a benchmark its HTTP API."""

from .app import ConfigError, HTTPError, ServiceConfig, make_app
from .base import BenchmarkService
from .caller import current_caller
from .server import RunningServer, serve, start_server

__all__ = [
    "BenchmarkService",
    "ConfigError",
    "HTTPError",
    "current_caller",
    "RunningServer",
    "ServiceConfig",
    "make_app",
    "serve",
    "start_server",
]
