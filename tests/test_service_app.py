"""make_app + start_server over real HTTP: auth, allowlist, body limit, validation, errors, lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import HTTPException
from pydantic import BaseModel

from benchmark_runner.client import API_KEY_HEADER
from benchmark_runner.schemas import (
    EvalResultData,
    EvalStatus,
    LegacyEvaluateRequest,
    LegacyEvaluateResponse,
    LegacyScoreResponse,
    StrictModel,
)
from benchmark_runner.service import (
    BenchmarkService,
    ConfigError,
    RunningServer,
    ServiceConfig,
    make_app,
    start_server,
)

DATASETS = {"alpha": [{"id": "a1", "question": "1+1?"}], "beta": [{"id": "b1", "question": "2+2?"}]}


class DemoService(BenchmarkService):
    """Scores a generation by its payload: "right" is correct, "boom" raises, "bad-shape" answers junk."""

    name = "demo"

    def __init__(self) -> None:
        self.events: list[str] = []
        self.evaluated = 0

    async def startup(self) -> None:
        self.events.append("startup")

    async def shutdown(self) -> None:
        self.events.append("shutdown")

    async def evaluate(self, request: Any) -> BaseModel:
        self.evaluated += 1
        payload = request.generation.payload
        if payload == "boom":
            raise ZeroDivisionError("scripted failure in evaluate")
        if payload == "teapot":
            raise HTTPException(418, "the service chose this status")
        if payload == "bad-shape":
            return LegacyScoreResponse(score=1.0, n=1)  # not an EvalResultData
        correct = payload == "right"
        return EvalResultData(
            status=EvalStatus.CORRECT if correct else EvalStatus.INCORRECT, score=float(correct)
        )

    async def list_tasks(self, dataset: str) -> list[dict[str, Any]]:
        return DATASETS[dataset]  # KeyError -> 404

    async def legacy_evaluate(self, request: LegacyEvaluateRequest) -> LegacyEvaluateResponse:
        ok = request.response.strip() == "2"
        return LegacyEvaluateResponse(
            score=float(ok), status=EvalStatus.CORRECT if ok else EvalStatus.INCORRECT
        )


class MinimalService(BenchmarkService):
    """Implements only evaluate: list_tasks and the legacy route must answer 501."""

    name = "minimal"

    async def evaluate(self, request: Any) -> BaseModel:
        return EvalResultData(status=EvalStatus.CORRECT, score=1.0)


KEYS = {"key-alice": "alice", "key-bob": "bob", "key-root": "root"}
ALLOW = {"alice": ["alpha"], "bob": [], "root": ["*"]}
ALICE = {API_KEY_HEADER: "key-alice"}
ROOT = {API_KEY_HEADER: "key-root"}


def evaluate_body(dataset: str = "alpha", payload: Any = "right") -> dict[str, Any]:
    return {
        "dataset": dataset,
        "task": {"id": "a1", "question": "1+1?"},
        "generation": {"task_id": "a1", "model": "m", "payload": payload},
    }


@pytest.fixture(scope="module")
def demo() -> Iterator[tuple[DemoService, RunningServer]]:
    service = DemoService()
    config = ServiceConfig(api_keys=KEYS, allowlist=ALLOW, max_body_bytes=4096)
    with start_server(make_app(service, config)) as server:
        yield service, server


@pytest.fixture
def http(demo: tuple[DemoService, RunningServer]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=demo[1].url, timeout=10) as client:
        yield client


def test_healthz_needs_no_key(http: httpx.Client) -> None:
    response = http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "service": "demo"}


def test_evaluate_ok(http: httpx.Client) -> None:
    response = http.post("/v1/evaluate", json=evaluate_body(payload="right"), headers=ALICE)
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "correct", "score": 1.0, "outcome": None, "details": {}}
    wrong = http.post("/v1/evaluate", json=evaluate_body(payload="wrong"), headers=ALICE).json()
    assert wrong["status"] == "incorrect" and wrong["score"] == 0.0


@pytest.mark.parametrize("headers", [{}, {API_KEY_HEADER: "nope"}, {API_KEY_HEADER: ""}])
def test_missing_or_unknown_key_is_401(http: httpx.Client, headers: dict[str, str]) -> None:
    for method, path, body in [
        ("POST", "/v1/evaluate", evaluate_body()),
        ("POST", "/v1/score", {"dataset": "alpha", "model": "m", "evaluations": []}),
        ("GET", "/v1/datasets/alpha/tasks", None),
        ("POST", "/final-score/", {"scores": [1.0]}),
    ]:
        response = http.request(method, path, json=body, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert API_KEY_HEADER in response.json()["detail"]


def test_allowlist_gates_every_v1_route(demo: tuple[DemoService, RunningServer], http: httpx.Client) -> None:
    service = demo[0]
    before = service.evaluated
    response = http.post("/v1/evaluate", json=evaluate_body(dataset="beta"), headers=ALICE)
    assert response.status_code == 403
    assert "'alice'" in response.json()["detail"] and "'beta'" in response.json()["detail"]
    assert service.evaluated == before  # refused before the service ran

    score = http.post("/v1/score", json={"dataset": "beta", "model": "m", "evaluations": []}, headers=ALICE)
    assert score.status_code == 403 and "'beta'" in score.json()["detail"]
    tasks = http.get("/v1/datasets/beta/tasks", headers=ALICE)
    assert tasks.status_code == 403 and "'beta'" in tasks.json()["detail"]

    # A tenant with an empty list may use nothing; "*" grants everything.
    bob = http.get("/v1/datasets/alpha/tasks", headers={API_KEY_HEADER: "key-bob"})
    assert bob.status_code == 403 and "'bob'" in bob.json()["detail"]
    for dataset in ("alpha", "beta"):
        assert http.get(f"/v1/datasets/{dataset}/tasks", headers=ROOT).json() == {
            "dataset": dataset,
            "tasks": DATASETS[dataset],
        }


def test_unknown_dataset_is_404(http: httpx.Client) -> None:
    response = http.get("/v1/datasets/gamma/tasks", headers=ROOT)
    assert response.status_code == 404
    assert "gamma" in response.json()["detail"]


def test_body_limit_by_content_length(demo: tuple[DemoService, RunningServer], http: httpx.Client) -> None:
    service = demo[0]
    before = service.evaluated
    response = http.post("/v1/evaluate", json=evaluate_body(payload="x" * 5000), headers=ALICE)
    assert response.status_code == 413
    assert "4096" in response.json()["detail"]
    assert service.evaluated == before


def test_body_limit_by_streamed_size(demo: tuple[DemoService, RunningServer]) -> None:
    """A chunked body has no Content-Length: the bytes actually received are counted."""

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"x" * 1000

    with httpx.Client(base_url=demo[1].url, timeout=10) as client:
        response = client.post("/v1/evaluate", content=chunks(), headers=ALICE)
    assert response.status_code == 413
    assert "more than 4096 bytes" in response.json()["detail"]


def test_validation_errors_name_the_field(http: httpx.Client) -> None:
    body = evaluate_body()
    del body["generation"]["model"]
    body["task"] = "not-a-dict"
    response = http.post("/v1/evaluate", json=body, headers=ALICE)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "generation.model: Field required" in detail
    assert "task:" in detail and "dictionary" in detail
    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"generation.model", "task"}

    junk = http.post(
        "/v1/evaluate", content=b"{not json", headers={**ALICE, "Content-Type": "application/json"}
    )
    assert junk.status_code == 422 and "not valid JSON" in junk.json()["detail"]
    empty = http.post("/v1/score", headers=ALICE)
    assert empty.status_code == 422 and "ScoreRequest" in empty.json()["detail"]


def test_evaluate_exception_is_500_with_type_and_message(
    demo: tuple[DemoService, RunningServer], http: httpx.Client
) -> None:
    response = http.post("/v1/evaluate", json=evaluate_body(payload="boom"), headers=ALICE)
    assert response.status_code == 500
    assert response.json()["detail"]["type"] == "ZeroDivisionError"
    assert response.json()["detail"]["message"] == "scripted failure in evaluate"
    # the server survives it
    assert http.post("/v1/evaluate", json=evaluate_body(), headers=ALICE).status_code == 200


def test_service_http_exception_keeps_its_status(http: httpx.Client) -> None:
    response = http.post("/v1/evaluate", json=evaluate_body(payload="teapot"), headers=ALICE)
    assert response.status_code == 418
    assert response.json() == {"detail": "the service chose this status"}


def test_wrong_response_shape_is_500(http: httpx.Client) -> None:
    response = http.post("/v1/evaluate", json=evaluate_body(payload="bad-shape"), headers=ALICE)
    assert response.status_code == 500
    detail = response.json()["detail"]
    assert detail["type"] == "InvalidServiceResponse" and "EvalResultData" in detail["message"]


def test_default_score(http: httpx.Client) -> None:
    evaluations = [
        {"task_id": f"t{i}", "model": "m", "data": {"status": status, "score": score}}
        for i, (status, score) in enumerate(
            [("correct", 1.0), ("incorrect", 0.0), ("correct", 0.5), ("error", -1.0)]
        )
    ]
    response = http.post(
        "/v1/score", json={"dataset": "alpha", "model": "m", "evaluations": evaluations}, headers=ALICE
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["n_tasks"] == 4
    assert result["metrics"] == {"mean_score": pytest.approx(0.125), "correct_rate": 0.5}
    assert [t["task_id"] for t in result["per_task"]] == ["t0", "t1", "t2", "t3"]


def test_legacy_routes(http: httpx.Client) -> None:
    right = http.post("/evaluate-response/", json={"question": "1+1?", "response": " 2 "}, headers=ALICE)
    assert right.json() == {"score": 1.0, "status": "correct"}
    wrong = http.post("/evaluate-response/", json={"question": "1+1?", "response": "3"}, headers=ALICE)
    assert wrong.json() == {"score": 0.0, "status": "incorrect"}
    bad = http.post("/evaluate-response/", json={"question": "1+1?"}, headers=ALICE)
    assert bad.status_code == 422 and "response: Field required" in bad.json()["detail"]

    assert http.post("/final-score/", json={"scores": [1.0, 0.0, 0.5]}, headers=ALICE).json() == {
        "score": 0.5,
        "n": 3,
    }
    assert http.post("/final-score/", json={"scores": []}, headers=ALICE).json() == {"score": 0.0, "n": 0}


def test_not_implemented_is_501_and_no_auth_means_open(serve_app: Callable[..., RunningServer]) -> None:
    server = serve_app(make_app(MinimalService()))
    with httpx.Client(base_url=server.url, timeout=10) as http:
        tasks = http.get("/v1/datasets/anything/tasks")
        assert tasks.status_code == 501 and "does not list tasks" in tasks.json()["detail"]
        legacy = http.post("/evaluate-response/", json={"question": "q", "response": "r"})
        assert legacy.status_code == 501 and "legacy_evaluate" in legacy.json()["detail"]
        assert http.post("/v1/evaluate", json=evaluate_body(dataset="whatever")).status_code == 200


def test_custom_request_model_is_used_and_gated(serve_app: Callable[..., RunningServer]) -> None:
    class Submission(StrictModel):
        dataset: str
        code: str

    class CodeService(BenchmarkService):
        name = "code"
        evaluate_request_model = Submission

        async def evaluate(self, request: Any) -> BaseModel:
            assert isinstance(request, Submission)
            return EvalResultData(status=EvalStatus.CORRECT, score=len(request.code))

    config = ServiceConfig(api_keys={"k": "t"}, allowlist={"t": ["kb"]})
    server = serve_app(make_app(CodeService(), config))
    with httpx.Client(base_url=server.url, timeout=10, headers={API_KEY_HEADER: "k"}) as http:
        assert http.post("/v1/evaluate", json={"dataset": "kb", "code": "abc"}).json()["score"] == 3.0
        assert http.post("/v1/evaluate", json={"dataset": "other", "code": "abc"}).status_code == 403
        extra = http.post("/v1/evaluate", json={"dataset": "kb", "code": "x", "typo": 1})
        assert extra.status_code == 422 and "invalid Submission: typo" in extra.json()["detail"]
        # /openapi.json (and /docs) describe the hand-parsed body with the service's own model
        spec = http.get("/openapi.json").json()
        body = spec["paths"]["/v1/evaluate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/Submission"}
        assert set(spec["components"]["schemas"]["Submission"]["required"]) == {"dataset", "code"}


def test_lifespan_runs_startup_and_shutdown() -> None:
    service = DemoService()
    server = start_server(make_app(service))
    assert service.events == ["startup"]
    server.stop()
    assert service.events == ["startup", "shutdown"]
    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz", timeout=2)


def test_stop_runs_the_apps_shutdown_even_when_a_request_outlives_the_grace() -> None:
    """A request still running when the server stops is cancelled after the graceful timeout; the app's
    shutdown must run all the same, to its end, even when it is slow (a service closing its workers):
    forcing the exit at that point skipped it, and the workers outlived the service."""
    import threading
    import time

    started = threading.Event()

    class Slow(DemoService):
        async def evaluate(self, request: Any) -> BaseModel:
            started.set()
            await asyncio.sleep(60)
            return await super().evaluate(request)

        async def shutdown(self) -> None:
            await asyncio.sleep(2.0)
            self.events.append("shutdown")

    errors: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(logging.Formatter().format(record))

    service = Slow()
    server = start_server(make_app(service), graceful_timeout=1, log_level="error")
    logging.getLogger("uvicorn.error").addHandler(keep := Keep(logging.ERROR))
    body = evaluate_body()

    def post() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{server.url}/v1/evaluate", json=body, timeout=30)

    client = threading.Thread(target=post, daemon=True)
    client.start()
    assert started.wait(10)
    t0 = time.monotonic()
    server.stop()
    logging.getLogger("uvicorn.error").removeHandler(keep)
    assert service.events == ["startup", "shutdown"]
    assert not server.running
    assert time.monotonic() - t0 < 30
    # the lifespan was shut down, not cancelled with the event loop (the request's cancellation is logged)
    assert not [e for e in errors if "in lifespan" in e], errors


def test_failed_startup_raises() -> None:
    class Broken(MinimalService):
        async def startup(self) -> None:
            raise RuntimeError("no GPU here")

    with pytest.raises(RuntimeError, match="failed to start"):
        start_server(make_app(Broken()), log_level="critical")


def test_ephemeral_ports_are_distinct_and_fixed_port_works(serve_app: Callable[..., RunningServer]) -> None:
    a = serve_app(make_app(MinimalService()))
    b = serve_app(make_app(MinimalService()))
    assert a.port != b.port and a.url == f"http://127.0.0.1:{a.port}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    c = serve_app(make_app(MinimalService()), port=free)
    assert c.port == free
    assert httpx.get(f"{c.url}/healthz", timeout=5).json()["service"] == "minimal"
    with pytest.raises(OSError, match=f"cannot bind 127.0.0.1:{free}"):
        start_server(make_app(MinimalService()), port=free)


# ---- config files -------------------------------------------------------------------------------


def test_config_from_files(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("alice: key-a\nbob: [key-b1, key-b2]\n")
    allow = tmp_path / "allow.yaml"
    allow.write_text("tenants:\n  alice: [kernelbench]\n  bob: ['*']\n")
    config = ServiceConfig.from_files(keys, allow)
    assert config.api_keys == {"key-a": "alice", "key-b1": "bob", "key-b2": "bob"}
    assert config.allows("alice", "kernelbench") and not config.allows("alice", "backendbench")
    assert config.allows("bob", "anything") and not config.allows("carol", "kernelbench")
    assert ServiceConfig.from_files(None, None) == ServiceConfig()


@pytest.mark.parametrize(
    ("keys_text", "allow_text", "message"),
    [
        ("- a\n- b\n", None, "keys.yaml: expected a mapping tenant -> key"),
        ("alice: [key, 3]\n", None, "keys.yaml: tenant 'alice': expected a non-empty string key, got 3"),
        ("alice: k\nbob: k\n", None, "tenant 'bob': key already belongs to tenant 'alice'"),
        ("alice: [k\n", None, "keys.yaml: not valid YAML"),
        ("alice: k\n", "alice: [x]\n", "allow.yaml: expected a mapping with a 'tenants' key"),
        (
            "alice: k\n",
            "tenants:\n  alice: {a: 1}\n",
            "allow.yaml: tenants.alice: expected a list of dataset names",
        ),
        ("alice: k\n", "tenants: {}\nextra: 1\n", "unknown top-level field(s) ['extra']"),
        (None, "tenants: {alice: [x]}\n", "allowlist: gating datasets per tenant needs api_keys"),
    ],
)
def test_config_file_errors_name_file_and_field(
    tmp_path: Path, keys_text: str | None, allow_text: str | None, message: str
) -> None:
    keys = allow = None
    if keys_text is not None:
        keys = tmp_path / "keys.yaml"
        keys.write_text(keys_text)
    if allow_text is not None:
        allow = tmp_path / "allow.yaml"
        allow.write_text(allow_text)
    with pytest.raises(ConfigError) as info:
        ServiceConfig.from_files(keys, allow)
    assert message in str(info.value)


def test_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing.yaml: cannot read"):
        ServiceConfig.from_files(tmp_path / "missing.yaml", None)
