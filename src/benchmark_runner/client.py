"""Async client for a benchmark service, configured from the environment.

Retries only what a retry can fix (connection errors, 5xx, 429) with exponential backoff; any other
4xx is the caller's mistake and is raised at once with the server's error body in the message, so the
user sees *why* the service refused.
"""

from __future__ import annotations

import math
import os
from types import TracebackType
from typing import Any

import anyio
import httpx

SERVICE_URL_ENV = "BENCHMARK_SERVICE_URL"
SERVICE_API_KEY_ENV = "BENCHMARK_SERVICE_API_KEY"
API_KEY_HEADER = "X-API-Key"
#: Names the run a request belongs to, so a shared service can take turns between concurrent runs.
RUN_ID_HEADER = "X-Run-Id"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: Cap on a server-sent Retry-After, so a misconfigured server cannot stall a run for hours.
MAX_RETRY_AFTER_S = 60.0


class ServiceError(RuntimeError):
    """The service answered with an error, or could not be reached after retries."""

    def __init__(self, message: str, status_code: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


def _error_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:2000]


def _retry_after_s(value: str) -> float | None:
    """A ``Retry-After`` in seconds, capped; ``None`` if absent or not a number (HTTP dates: backoff)."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S) if math.isfinite(seconds) else None


class ServiceClient:
    """Talks to ``/v1/*`` of a benchmark service. Use as ``async with ServiceClient(...) as c``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 600.0,
        retries: int = 4,
        backoff: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
        run_id: str | None = None,
    ) -> None:
        headers = {API_KEY_HEADER: api_key} if api_key else {}
        if run_id:
            headers[RUN_ID_HEADER] = run_id
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )

    @classmethod
    def from_env(
        cls, base_url: str | None = None, api_key: str | None = None, **kwargs: Any
    ) -> ServiceClient:
        url = base_url or os.environ.get(SERVICE_URL_ENV)
        if not url:
            raise ServiceError(f"no service URL: pass --service-url or set {SERVICE_URL_ENV}")
        return cls(url, api_key or os.environ.get(SERVICE_API_KEY_ENV), **kwargs)

    async def __aenter__(self) -> ServiceClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, json: Any = None) -> Any:
        last: str = ""
        delay: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                # The server's Retry-After, when it sent one, replaces (not adds to) the backoff.
                await anyio.sleep(delay if delay is not None else self.backoff * 2 ** (attempt - 1))
            delay = None
            try:
                response = await self._http.request(method, path, json=json)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {_error_body(response)}"
                retry_after = response.headers.get("Retry-After", "").strip()
                delay = _retry_after_s(retry_after)
                continue
            if response.status_code >= 400:
                body = _error_body(response)
                raise ServiceError(
                    f"{method} {self.base_url}{path} failed with HTTP {response.status_code}: {body}",
                    status_code=response.status_code,
                    body=body,
                )
            try:
                return response.json()
            except ValueError as exc:
                raise ServiceError(
                    f"{method} {self.base_url}{path} answered HTTP {response.status_code} with non-JSON: "
                    f"{response.text[:500]!r}",
                    status_code=response.status_code,
                    body=response.text[:2000],
                ) from exc
        raise ServiceError(f"{method} {self.base_url}{path} failed after {self.retries + 1} attempts: {last}")

    async def post(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, json=body)

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)
