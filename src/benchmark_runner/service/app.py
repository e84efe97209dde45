"""Turn a :class:`BenchmarkService` into a FastAPI app: auth, tenant allowlist, body limit, routes.

Request bodies are parsed by hand (not by FastAPI's signature magic) so the order of checks is
explicit and the same on every route: body size (413) -> API key (401) -> JSON within bounds (nesting
depth, number of items; 422) -> JSON + schema (422) -> dataset allowlist (403) -> the service. Every
error answers JSON ``{"detail": ...}`` that says what was wrong, so a runner's ``ServiceError`` shows
the user *why* a request was refused; an exception inside the service becomes a 500 naming its type
and message instead of a dropped connection. No body, however malformed, reaches the service or makes
a 500: what JSON cannot say (``NaN``, ``Infinity``, numbers past a float's range, unpaired UTF-16
surrogates) is refused with 422 naming where it is.

A client that goes away before its answer (closes the connection) cancels the work it asked for: the
routes that evaluate watch for the disconnect and cancel the service's coroutine (a service that shares
one evaluation between identical requests keeps it for the ones still waiting). ``GET /v1/metrics``
counts such requests, with whatever the service reports about its own work (``BenchmarkService.metrics``).

Over 600 lines for one concept, the HTTP face of a service: its configuration (keys, allowlist, bounds),
the body limit and error answers every route shares, and ``make_app``'s routes; parsing a body within
bounds is ``bodies.py``.
"""

from __future__ import annotations

import json
import logging
import math
import reprlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import yaml
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError, create_model, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..client import API_KEY_HEADER, RUN_ID_HEADER
from ..schemas import (
    LegacyEvaluateRequest,
    LegacyEvaluateResponse,
    LegacyScoreRequest,
    LegacyScoreResponse,
    ScoreRequest,
    ScoreResult,
    StrictModel,
    TaskList,
)
from .base import BenchmarkService
from .bodies import BodyError, non_finite_field, parse_json_body
from .caller import set_caller

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: Allowlist entry granting a tenant every dataset.
ALL_DATASETS = "*"


class ConfigError(ValueError):
    """A service configuration file is missing, unreadable or malformed."""


class HTTPError(Exception):
    """Raised inside route handlers; becomes ``{"detail": detail}`` with ``status_code``."""

    def __init__(
        self,
        status_code: int,
        detail: Any,
        headers: dict[str, str] | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.headers = headers
        self.errors = errors  # structured per-field errors of a 422


class ServiceConfig(StrictModel):
    """Who may call the service and with what. ``None`` disables a check (local/dev use)."""

    api_keys: dict[str, str] | None = Field(default=None, description="API key -> tenant name")
    allowlist: dict[str, list[str]] | None = Field(
        default=None, description=f"tenant -> dataset names it may use ({ALL_DATASETS!r}: all)"
    )
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    max_batch: int = Field(default=1024, gt=0, description="submissions one POST /v1/evaluate-batch may hold")
    max_json_depth: int = Field(
        default=100, gt=0, le=10_000, description="deepest nesting of arrays and objects a body may have"
    )
    max_json_items: int = Field(
        default=1_000_000, gt=0, description="most values (array items, object members) a body may hold"
    )

    @model_validator(mode="after")
    def _allowlist_needs_tenants(self) -> ServiceConfig:
        # Without API keys no request has a tenant, so an allowlist could only deny everything.
        if self.allowlist is not None and self.api_keys is None:
            raise ValueError("allowlist: gating datasets per tenant needs api_keys to identify tenants")
        return self

    @classmethod
    def from_files(
        cls, api_keys_file: Path | None, allowlist_file: Path | None, **kwargs: Any
    ) -> ServiceConfig:
        """Read the YAML files.

        ``api_keys_file``: ``{tenant: key}`` or ``{tenant: [key, ...]}``.
        ``allowlist_file``: ``{tenants: {tenant: [dataset, ...]}}`` (``"*"`` grants all datasets).
        """
        api_keys = _read_api_keys(Path(api_keys_file)) if api_keys_file is not None else None
        allowlist = _read_allowlist(Path(allowlist_file)) if allowlist_file is not None else None
        try:
            return cls(api_keys=api_keys, allowlist=allowlist, **kwargs)
        except ValidationError as exc:
            raise ConfigError(f"invalid service config: {_describe(exc)}") from exc

    def tenant_for(self, key: str | None) -> str | None:
        if self.api_keys is None or key is None:
            return None
        return self.api_keys.get(key)

    def allows(self, tenant: str | None, dataset: str) -> bool:
        if self.allowlist is None:
            return True
        granted = self.allowlist.get(tenant or "", [])
        return ALL_DATASETS in granted or dataset in granted


_DEFAULT_CONFIG = ServiceConfig()


def _load_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def _read_api_keys(path: Path) -> dict[str, str]:
    data = _load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping tenant -> key (or list of keys), got {type(data).__name__}"
        )
    keys: dict[str, str] = {}
    for tenant, value in data.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ConfigError(
                f"{path}: tenant {tenant!r}: expected a key or a non-empty list of keys, got []"
            )
        for key in values:
            if not isinstance(key, str) or not key.strip():
                raise ConfigError(f"{path}: tenant {tenant!r}: expected a non-empty string key, got {key!r}")
            if key in keys and keys[key] != str(tenant):
                raise ConfigError(f"{path}: tenant {tenant!r}: key already belongs to tenant {keys[key]!r}")
            keys[key] = str(tenant)
    return keys


def _read_allowlist(path: Path) -> dict[str, list[str]]:
    data = _load_yaml(path)
    if not isinstance(data, dict) or "tenants" not in data:
        raise ConfigError(
            f"{path}: expected a mapping with a 'tenants' key: {{tenants: {{tenant: [dataset, ...]}}}}"
        )
    unknown = set(data) - {"tenants"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level field(s) {sorted(unknown)}; expected only 'tenants'")
    tenants = data["tenants"]
    if tenants is None:
        return {}
    if not isinstance(tenants, dict):
        raise ConfigError(
            f"{path}: tenants: expected a mapping tenant -> [dataset, ...], got {type(tenants).__name__}"
        )
    allow: dict[str, list[str]] = {}
    for tenant, datasets in tenants.items():
        if datasets is None:
            datasets = []
        if isinstance(datasets, str):
            datasets = [datasets]
        if not isinstance(datasets, list) or not all(isinstance(d, str) and d for d in datasets):
            raise ConfigError(f"{path}: tenants.{tenant}: expected a list of dataset names, got {datasets!r}")
        allow[str(tenant)] = list(datasets)
    return allow


# ---- errors -----------------------------------------------------------------------------------


def _describe(exc: ValidationError | RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "<body>"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _error_list(exc: ValidationError | RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        item: dict[str, Any] = {
            "field": ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "<body>",
            "message": err.get("msg", "invalid"),
            "type": err.get("type", ""),
        }
        got = _short_repr(err.get("input"))
        item["got"] = got if len(got) <= 200 else got[:197] + "..."
        out.append(item)
    return out


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 200
_REPR.maxlevel = 3


def _short_repr(value: Any) -> str:
    """``repr`` that never walks or copies a huge or deeply nested input (a hostile body's)."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a repr is only for the message
        return f"<{type(value).__name__}>"


class SafeJSONResponse(JSONResponse):
    """``JSONResponse`` that cannot fail: JSON has no NaN or Infinity (they become ``null``), and a
    string that is not valid Unicode (an unpaired surrogate) is written escaped instead of raising."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except (ValueError, UnicodeEncodeError):
            return json.dumps(
                _finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode("ascii")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json_error(
    status_code: int, detail: Any, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return SafeJSONResponse({"detail": detail, **extra}, status_code=status_code, headers=headers)


# ---- body size limit --------------------------------------------------------------------------


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes`` with 413, by Content-Length and by bytes actually received.

    The body is read (up to the limit) before the app sees it, so nothing parses an oversized body
    and a client that lies in Content-Length or streams chunked data is still cut off.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._reject(scope, receive, send, 400, "Content-Length is not an integer")
                    return
                if declared > self.max_bytes:
                    await self._too_large(scope, receive, send, f"Content-Length {declared}")
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away mid-body: nobody to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send, f"more than {self.max_bytes} bytes received")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        await self.app(
            scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send
        )

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        detail = f"request body too large: {what}; the limit is {self.max_bytes} bytes"
        await self._reject(scope, receive, send, 413, detail)

    @staticmethod
    async def _reject(scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
        # Connection: close, since the unread rest of the body makes the connection unusable.
        response = _json_error(status, detail, headers={"Connection": "close"})
        await response(scope, receive, send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _parse(request: Request, model: type[M], cfg: ServiceConfig | None = None) -> M:
    cfg = cfg or _DEFAULT_CONFIG
    raw = await request.body()
    if not raw:
        raise HTTPError(422, f"request body is empty; expected a JSON object matching {model.__name__}")
    try:
        data = parse_json_body(raw, cfg.max_json_depth, cfg.max_json_items)
    except BodyError as exc:
        content_type = request.headers.get("content-type", "")
        hint = (
            f" (Content-Type was {content_type[:100]!r}; send application/json)"
            if content_type and "json" not in content_type.lower()
            else ""
        )
        raise HTTPError(422, f"{exc}{hint}") from exc
    try:
        body = model.model_validate(data)
    except ValidationError as exc:
        raise HTTPError(422, f"invalid {model.__name__}: {_describe(exc)}", errors=_error_list(exc)) from exc
    except RecursionError as exc:  # a model's own validator recursing: bounded all the same
        raise HTTPError(422, f"invalid {model.__name__}: nested too deep to validate") from exc
    if (where := non_finite_field(data)) is not None:
        raise HTTPError(
            422,
            f"{where}: not a finite number (JSON has no NaN or Infinity, and a number past "
            "\u00b11.8e308 does not fit a float)",
            errors=[{"field": where, "message": "must be a finite number", "type": "finite_number"}],
        )
    return body


class HttpCounters:
    """What the app itself saw: requests answered, refused before the service saw them, abandoned."""

    def __init__(self) -> None:
        self.requests = 0
        self.refused = 0  # 4xx of the app's own checks (size, key, JSON, schema, allowlist)
        self.abandoned = 0  # the client closed the connection before its answer: its work was cancelled
        self.errors = 0  # 5xx

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


async def _until_disconnect(request: Request, work: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
    """Run ``work`` unless the client goes away first: then cancel it and return ``(True, None)``.

    The body has been read by now, so the next ASGI message is ``http.disconnect``: sent when the client
    closes the connection (or once the answer is sent, which is after ``work`` here).
    """
    result: list[Any] = []
    failure: list[BaseException] = []
    gone = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal gone
        while True:
            message = await request.receive()
            if message.get("type") == "http.disconnect":
                gone = True
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        try:
            result.append(await work())
        except Exception as exc:  # re-raised below as itself, not inside an ExceptionGroup
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return gone and not result, result[0] if result else None


# ---- the app ----------------------------------------------------------------------------------


async def _call(what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run a service hook: NotImplementedError -> 501, any other exception -> 500 naming it.

    A service that wants another status raises ``fastapi.HTTPException`` (or ``HTTPError``).
    """
    try:
        return await fn()
    except (HTTPError, StarletteHTTPException):  # the service chose the status itself
        raise
    except NotImplementedError as exc:
        raise HTTPError(501, f"this service does not implement {what}") from exc
    except Exception as exc:
        logger.exception("service %s failed", what)
        raise HTTPError(500, {"type": type(exc).__name__, "message": str(exc), "where": what}) from exc


def _conform(value: Any, model: type[M], what: str) -> M:
    """Validate what the service returned; a wrong shape is the service's bug, hence a 500."""
    try:
        if isinstance(value, model):
            return value
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        return model.model_validate(data)
    except ValidationError as exc:
        raise HTTPError(
            500,
            {
                "type": "InvalidServiceResponse",
                "message": f"{what} returned data that is not a valid {model.__name__}: {_describe(exc)}",
                "where": what,
            },
        ) from exc


def make_app(service: BenchmarkService, config: ServiceConfig | None = None) -> FastAPI:
    """The HTTP API of ``service``: ``/v1/evaluate``, ``/v1/evaluate-batch`` (many submissions, one
    answer each), ``/v1/score``, ``/v1/datasets/{name}/tasks``, the legacy ``/evaluate-response/`` and
    ``/final-score/``, ``/v1/metrics``, ``/v1/info`` and ``/healthz``."""
    cfg = config or ServiceConfig()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await service.startup()
        try:
            yield
        finally:
            await service.shutdown()

    app = FastAPI(title=f"{service.name} benchmark service", lifespan=lifespan)
    app.state.service = service
    app.state.config = cfg
    counters = app.state.http_counters = HttpCounters()
    app.add_middleware(BodyLimitMiddleware, max_bytes=cfg.max_body_bytes)

    @app.exception_handler(HTTPError)
    async def _http_error(_request: Request, exc: HTTPError) -> JSONResponse:
        if exc.status_code >= 500:
            counters.errors += 1
        else:
            counters.refused += 1
        extra: dict[str, Any] = {} if exc.errors is None else {"errors": exc.errors}
        return _json_error(exc.status_code, exc.detail, headers=exc.headers, **extra)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        counters.refused += 1
        return _json_error(422, f"invalid request: {_describe(exc)}", errors=_error_list(exc))

    @app.exception_handler(Exception)
    async def _unhandled(_request: Request, exc: Exception) -> JSONResponse:
        counters.errors += 1
        logger.exception("unhandled error")
        return _json_error(500, {"type": type(exc).__name__, "message": str(exc)})

    async def parse(request: Request, model: type[M]) -> M:
        counters.requests += 1
        return await _parse(request, model, cfg)

    async def answer(request: Request, what: str, fn: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        """``_call(what, fn)``, cancelled if the client goes away first (then ``(True, None)``)."""
        gone, result = await _until_disconnect(request, lambda: _call(what, fn))
        if gone:
            counters.abandoned += 1
            logger.info("%s: the client closed the connection; its work was cancelled", what)
        return gone, result

    def abandoned() -> JSONResponse:  # sent to nobody (the connection is closed), but a handler answers
        return SafeJSONResponse(
            {"detail": "the client closed the connection before its answer; its work was cancelled"},
            status_code=499,
        )

    async def authenticate(request: Request) -> str | None:
        """The caller's tenant, or 401. ``None`` when auth is off."""
        if cfg.api_keys is None:
            return None
        key = request.headers.get(API_KEY_HEADER)
        if not key:
            raise HTTPError(401, f"missing API key: send it in the {API_KEY_HEADER} header")
        tenant = cfg.tenant_for(key)
        if tenant is None:
            raise HTTPError(401, f"unknown API key (sent in {API_KEY_HEADER})")
        return tenant

    def check_dataset(tenant: str | None, dataset: Any) -> None:
        if cfg.allowlist is None:
            return
        if not isinstance(dataset, str) or not dataset:
            raise HTTPError(403, f"tenant {tenant!r}: the request names no dataset, so it cannot be allowed")
        if not cfg.allows(tenant, dataset):
            raise HTTPError(403, f"tenant {tenant!r} is not allowed to use dataset {dataset!r}")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": service.name}

    @app.get("/v1/metrics")
    async def metrics(_tenant: str | None = Depends(authenticate)) -> JSONResponse:
        """Counters: the app's own (``http``) and the service's (``BenchmarkService.metrics``)."""
        own = await _call("metrics", service.metrics)
        return SafeJSONResponse({"service": service.name, "http": counters.as_dict(), **(own or {})})

    @app.get("/v1/info")
    async def info(_tenant: str | None = Depends(authenticate)) -> JSONResponse:
        """What the service runs on and how it isolates submissions (``BenchmarkService.info``)."""
        own = await _call("info", service.info)
        return SafeJSONResponse({"service": service.name, **(own or {})})

    @app.post("/v1/evaluate")
    async def evaluate(request: Request, tenant: str | None = Depends(authenticate)) -> JSONResponse:
        body = await parse(request, service.evaluate_request_model)
        check_dataset(tenant, getattr(body, "dataset", None))
        set_caller(tenant, request.headers.get(RUN_ID_HEADER))
        gone, result = await answer(request, "evaluate", lambda: service.evaluate(body))
        if gone:
            return abandoned()
        reply = _conform(result, service.evaluate_response_model, "evaluate")
        return SafeJSONResponse(reply.model_dump(mode="json"))

    batch_request, batch_response = _batch_models(service, cfg.max_batch)

    @app.post("/v1/evaluate-batch")
    async def evaluate_batch(request: Request, tenant: str | None = Depends(authenticate)) -> JSONResponse:
        body = await parse(request, batch_request)
        items: list[Any] = list(body.requests)  # type: ignore[attr-defined]
        for item in items:
            check_dataset(tenant, getattr(item, "dataset", None))
        set_caller(tenant, request.headers.get(RUN_ID_HEADER))
        gone, results = await answer(request, "evaluate_batch", lambda: service.evaluate_batch(items))
        if gone:
            return abandoned()
        if not isinstance(results, (list, tuple)) or len(results) != len(items):
            raise HTTPError(
                500,
                {
                    "type": "InvalidServiceResponse",
                    "message": f"evaluate_batch answered {len(results) if isinstance(results, (list, tuple)) else type(results).__name__}"
                    f" results for {len(items)} requests",
                    "where": "evaluate_batch",
                },
            )
        answers = [_conform(r, service.evaluate_response_model, "evaluate_batch") for r in results]
        return SafeJSONResponse({"results": [a.model_dump(mode="json") for a in answers]})

    @app.post("/v1/score")
    async def score(request: Request, tenant: str | None = Depends(authenticate)) -> JSONResponse:
        body = await parse(request, ScoreRequest)
        check_dataset(tenant, body.dataset)
        result = await _call("score", lambda: service.score(body))
        return SafeJSONResponse(_conform(result, ScoreResult, "score").model_dump(mode="json"))

    @app.get("/v1/datasets/{name}/tasks")
    async def list_tasks(name: str, tenant: str | None = Depends(authenticate)) -> JSONResponse:
        check_dataset(tenant, name)

        async def tasks_or_http_error() -> Any:
            try:
                return await service.list_tasks(name)
            except NotImplementedError as exc:
                raise HTTPError(501, f"this service does not list tasks (dataset {name!r})") from exc
            except KeyError as exc:
                raise HTTPError(404, f"unknown dataset {name!r}") from exc

        tasks = await _call("list_tasks", tasks_or_http_error)
        listing = _conform({"dataset": name, "tasks": tasks}, TaskList, "list_tasks")
        return SafeJSONResponse(listing.model_dump(mode="json"))

    @app.post("/evaluate-response/")
    async def legacy_evaluate(request: Request, tenant: str | None = Depends(authenticate)) -> JSONResponse:
        body = await parse(request, LegacyEvaluateRequest)
        set_caller(tenant, request.headers.get(RUN_ID_HEADER))
        gone, result = await answer(
            request, "legacy_evaluate (/evaluate-response/)", lambda: service.legacy_evaluate(body)
        )
        if gone:
            return abandoned()
        return SafeJSONResponse(
            _conform(result, LegacyEvaluateResponse, "legacy_evaluate").model_dump(mode="json")
        )

    @app.post("/final-score/")
    async def legacy_score(request: Request, _tenant: str | None = Depends(authenticate)) -> JSONResponse:
        body = await parse(request, LegacyScoreRequest)
        n = len(body.scores)
        # Each term divided first: finite scores near the float range cannot overflow the mean.
        mean = sum(x / n for x in body.scores) if n else 0.0
        return SafeJSONResponse(LegacyScoreResponse(score=mean, n=n).model_dump(mode="json"))

    _document_bodies(
        app,
        {
            ("post", "/v1/evaluate"): (service.evaluate_request_model, service.evaluate_response_model),
            ("post", "/v1/evaluate-batch"): (batch_request, batch_response),
            ("post", "/v1/score"): (ScoreRequest, ScoreResult),
            ("get", "/v1/datasets/{name}/tasks"): (None, TaskList),
            ("post", "/evaluate-response/"): (LegacyEvaluateRequest, LegacyEvaluateResponse),
            ("post", "/final-score/"): (LegacyScoreRequest, LegacyScoreResponse),
        },
    )
    return app


def _batch_models(service: BenchmarkService, max_batch: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """Bodies of ``POST /v1/evaluate-batch``: ``{"requests": [<evaluate request>...]}`` in,
    ``{"results": [<evaluate answer>...]}`` out, in the same order."""
    request_model: Any = service.evaluate_request_model
    response_model: Any = service.evaluate_response_model
    batch_request = create_model(
        "EvaluateBatchRequest",
        __base__=StrictModel,
        requests=(list[request_model], Field(min_length=1, max_length=max_batch)),
    )
    batch_response = create_model(
        "EvaluateBatchResponse", __base__=StrictModel, results=(list[response_model], ...)
    )
    return batch_request, batch_response


def _document_bodies(
    app: FastAPI, routes: dict[tuple[str, str], tuple[type[BaseModel] | None, type[BaseModel]]]
) -> None:
    """Put the hand-parsed request and response models into ``/openapi.json`` (and so ``/docs``)."""
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = default_openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})

        def ref(model: type[BaseModel]) -> dict[str, str]:
            js = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(js.pop("$defs", {}))
            components[model.__name__] = js
            return {"$ref": f"#/components/schemas/{model.__name__}"}

        for (method, path), (request_model, response_model) in routes.items():
            operation = schema.get("paths", {}).get(path, {}).get(method)
            if operation is None:
                continue
            if request_model is not None:
                operation["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": ref(request_model)}},
                }
            operation.setdefault("responses", {})["200"] = {
                "description": "Successful Response",
                "content": {"application/json": {"schema": ref(response_model)}},
            }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
