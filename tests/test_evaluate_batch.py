"""POST /v1/evaluate-batch and BatchingClient over real HTTP: one request for many evaluations, each caller
its own answer; what a batch cannot serve (no route, a refused batch, no service) is handled per caller."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel

from benchmark_runner.batching import BatchingClient
from benchmark_runner.client import API_KEY_HEADER, ServiceClient, ServiceError
from benchmark_runner.schemas import EvalResultData, EvalStatus, EvaluateRequest
from benchmark_runner.service import BenchmarkService, RunningServer, ServiceConfig, make_app


class EchoService(BenchmarkService):
    """Scores a generation by the length of its payload; counts what reached it and how."""

    name = "echo"

    def __init__(self) -> None:
        self.single = 0
        self.batches: list[int] = []

    async def evaluate(self, request: Any) -> BaseModel:
        self.single += 1
        payload = str(request.generation.payload)
        return EvalResultData(status=EvalStatus.CORRECT, score=float(len(payload)), outcome=payload)

    async def evaluate_batch(self, requests: list[Any]) -> list[BaseModel]:
        self.batches.append(len(requests))
        return list(await super().evaluate_batch(requests))


def body(payload: str, dataset: str = "alpha") -> dict[str, Any]:
    gen = {"task_id": "t", "model": "m", "payload": payload}
    return EvaluateRequest.model_validate({"dataset": dataset, "task": {}, "generation": gen}).model_dump(
        mode="json"
    )


def test_the_route_answers_each_request_in_order_and_checks_every_item(
    serve_app: Callable[..., RunningServer],
) -> None:
    service = EchoService()
    config = ServiceConfig(api_keys={"k": "tenant"}, allowlist={"tenant": ["alpha"]}, max_batch=3)
    srv = serve_app(make_app(service, config))
    headers = {API_KEY_HEADER: "k"}
    with httpx.Client(base_url=srv.url, headers=headers) as http:
        r = http.post("/v1/evaluate-batch", json={"requests": [body("a"), body("bbb"), body("cc")]})
        assert r.status_code == 200, r.text
        assert [x["score"] for x in r.json()["results"]] == [1.0, 3.0, 2.0]
        assert [x["outcome"] for x in r.json()["results"]] == ["a", "bbb", "cc"]
        assert service.batches == [3] and service.single == 3  # the default: evaluate() on each
        # every item's dataset is checked against the tenant's allowlist
        r = http.post("/v1/evaluate-batch", json={"requests": [body("a"), body("b", dataset="beta")]})
        assert r.status_code == 403 and "beta" in r.json()["detail"]
        # malformed items, an empty batch and one over max_batch are refused before the service sees them
        bad = body("a")
        del bad["generation"]
        r = http.post("/v1/evaluate-batch", json={"requests": [body("a"), bad]})
        assert r.status_code == 422 and "requests.1" in r.text
        assert http.post("/v1/evaluate-batch", json={"requests": []}).status_code == 422
        r = http.post("/v1/evaluate-batch", json={"requests": [body("a")] * 4})
        assert r.status_code == 422 and "at most 3" in r.text
        assert (
            http.post(
                "/v1/evaluate-batch", json={"requests": [body("a")]}, headers={API_KEY_HEADER: "x"}
            ).status_code
            == 401
        )
    assert service.batches == [3]
    assert "/v1/evaluate-batch" in make_app(EchoService()).openapi()["paths"]


@pytest.mark.anyio
async def test_concurrent_evaluations_travel_as_batches(serve_app: Callable[..., RunningServer]) -> None:
    service = EchoService()
    srv = serve_app(make_app(service))
    async with ServiceClient(srv.url, retries=0) as inner:
        client = BatchingClient(inner, max_batch=4)
        answers: dict[int, Any] = {}

        async def one(i: int) -> None:
            answers[i] = await client.post("/v1/evaluate", body("x" * i))

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, i)
        assert {i: a["score"] for i, a in answers.items()} == {i: float(i) for i in range(10)}
        assert (
            sorted(service.batches) == [2, 4, 4] and client.batches_sent == 3
        )  # max_batch 4: lead handed on
        assert (await client.post("/v1/evaluate", body("solo")))["score"] == 4.0  # alone: a plain request
        assert await client.get("/healthz") == {"status": "ok", "service": "echo"}  # the rest passes through
    assert client.batched_evaluations == 10


@pytest.mark.anyio
async def test_a_service_without_the_route_gets_single_requests(
    serve_app: Callable[..., RunningServer],
) -> None:
    service = EchoService()
    app = make_app(service)
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", "") != "/v1/evaluate-batch"]
    srv = serve_app(app)
    async with ServiceClient(srv.url, retries=0) as inner:
        client = BatchingClient(inner)
        results = [None] * 5

        async def one(i: int) -> None:
            results[i] = await client.post("/v1/evaluate", body("y" * i))

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(one, i)
    assert [r["score"] for r in results] == [0.0, 1.0, 2.0, 3.0, 4.0]  # type: ignore[index]
    assert client.batch_route is False and client.batches_sent == 0
    assert service.batches == [] and service.single == 5


@pytest.mark.anyio
async def test_a_refused_batch_is_sent_one_by_one_so_only_the_bad_request_fails(
    serve_app: Callable[..., RunningServer],
) -> None:
    service = EchoService()
    srv = serve_app(make_app(service))
    bad = body("z")
    bad["generation"]["status"] = "not-a-status"
    async with ServiceClient(srv.url, retries=0) as inner:
        client = BatchingClient(inner)
        outcome: dict[str, Any] = {}

        async def one(name: str, b: dict[str, Any]) -> None:
            try:
                outcome[name] = (await client.post("/v1/evaluate", b))["score"]
            except ServiceError as exc:
                outcome[name] = exc.status_code

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "good", body("four"))
            tg.start_soon(one, "bad", bad)
            tg.start_soon(one, "also good", body("ab"))
    assert outcome == {"good": 4.0, "bad": 422, "also good": 2.0}
    assert client.batch_route is True and service.batches == []  # the batch itself was refused (422)


@pytest.mark.anyio
async def test_an_unreachable_service_fails_every_caller_of_the_batch() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    async with ServiceClient(f"http://127.0.0.1:{port}", retries=0) as inner:
        client = BatchingClient(inner)
        errors: list[ServiceError] = []

        async def one(i: int) -> None:
            try:
                await client.post("/v1/evaluate", body(str(i)))
            except ServiceError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
    assert len(errors) == 3 and all(e.status_code is None for e in errors)
    assert len({id(e) for e in errors}) == 1  # the one answer the batch got, handed to each caller


class ShortService(EchoService):
    """Answers a batch with one result too few (a service bug the route must not pass on)."""

    async def evaluate_batch(self, requests: list[Any]) -> list[BaseModel]:
        return list(await super().evaluate_batch(requests))[:-1]


def test_a_service_answering_the_wrong_number_of_results_is_a_500(
    serve_app: Callable[..., RunningServer],
) -> None:
    srv = serve_app(make_app(ShortService()))
    with httpx.Client(base_url=srv.url) as http:
        r = http.post("/v1/evaluate-batch", json={"requests": [body("a"), body("b")]})
    assert r.status_code == 500 and "1 results for 2 requests" in r.text


@pytest.mark.anyio
async def test_a_batch_answer_of_the_wrong_shape_is_sent_again_one_by_one(
    serve_app: Callable[..., RunningServer],
) -> None:
    """A server (not ours) whose batch route answers 200 with too few results: each evaluation goes again
    alone and gets its own answer."""
    from fastapi import FastAPI

    app = FastAPI()
    seen: list[str] = []

    @app.post("/v1/evaluate-batch")
    async def batch(payload: dict[str, Any]) -> dict[str, Any]:
        seen.append("batch")
        return {"results": []}

    @app.post("/v1/evaluate")
    async def one(payload: dict[str, Any]) -> dict[str, Any]:
        seen.append("one")
        return {"status": "correct", "score": float(len(payload["generation"]["payload"]))}

    srv = serve_app(app)
    async with ServiceClient(srv.url, retries=0) as inner:
        client = BatchingClient(inner)
        scores: dict[str, float] = {}

        async def ask(text: str) -> None:
            scores[text] = (await client.post("/v1/evaluate", body(text)))["score"]

        async with anyio.create_task_group() as tg:
            for text in ("a", "bb", "ccc"):
                tg.start_soon(ask, text)
    assert scores == {"a": 1.0, "bb": 2.0, "ccc": 3.0}
    assert seen.count("batch") == 1 and seen.count("one") == 3 and client.batches_sent == 0
