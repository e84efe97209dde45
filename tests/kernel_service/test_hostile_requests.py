"""A real ``kernel-service serve --gpus none`` flooded with malformed requests over raw sockets, as a
hostile client would send them: JSON nested 10,000 and 100,000 deep (closed or not, at the top, inside
``options``, inside ``solution``), truncated and mistyped bodies, NaN and Infinity, numbers out of range,
huge strings, bad UTF-8, wrong content types, oversized and chunked bodies, on ``/v1/evaluate`` and
``/v1/evaluate-batch``. Every answer must be a 4xx (never a 5xx, never a dropped connection), the log
must hold no traceback, and the service must then answer honest requests correctly."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from ks_serve import ServeProcess, detail, post, post_chunked, raw_http
from ks_sources import FAST, REF_ADD, SOL_ADD_OK

ROUTES = ("/v1/evaluate", "/v1/evaluate-batch")
HONEST: dict[str, Any] = {"reference": REF_ADD, "solution": SOL_ADD_OK, "options": FAST}
BB_HONEST: dict[str, Any] = {
    "kind": "backendbench",
    "dataset": "backendbench-smoke",
    "op": "relu",
    "suite": "smoke",
    "source": "def relu_kernel_impl(x):\n    return x.clamp_min(0)\n",
}


@pytest.fixture(scope="module")
def service(serve_process: ServeProcess) -> ServeProcess:
    """The session's ``kernel-service serve`` subprocess (conftest.py), shared with test_abandoned_work.py."""
    return serve_process


def wrap(route: str, request_json: str) -> bytes:
    """``request_json`` as the route's body: itself, or the only item of a batch."""
    text = request_json if route == "/v1/evaluate" else '{"requests": [' + request_json + "]}"
    return text.encode("utf-8", "surrogatepass")


def honest_with(**changes: Any) -> str:
    return json.dumps({**HONEST, **changes})


def with_option(name: str, raw_value: str) -> str:
    """The honest request with ``options.<name>`` set to ``raw_value`` (JSON text, NaN etc. allowed)."""
    kept = [f'"{k}": {json.dumps(v)}' for k, v in FAST.items() if k != name]
    options = "{" + ", ".join([*kept, f'"{name}": {raw_value}']) + "}"
    return honest_with(options="@@").replace('"@@"', options)


def nested_cases() -> list[tuple[str, bytes]]:
    cases = []
    for n in (10_000, 100_000):
        deep_open = "[" * n
        deep_closed = "[" * n + "]" * n
        deep_objects = '{"a":' * n + "1" + "}" * n
        for route in ROUTES:
            cases += [
                (f"{route} top [x{n} unclosed", deep_open.encode()),
                (f"{route} top [x{n} closed", deep_closed.encode()),
                (f"{route} top {{x{n}", deep_objects.encode()),
                (f"{route} options [x{n}", wrap(route, honest_with(options="@@").replace('"@@"', deep_closed))),
                (f"{route} options {{x{n}", wrap(route, honest_with(options="@@").replace('"@@"', deep_objects))),
                (f"{route} solution [x{n}", wrap(route, honest_with(solution="@@").replace('"@@"', deep_closed))),
                (f"{route} solution [x{n} unclosed", wrap(route, honest_with(solution="@@").replace('"@@"', deep_open))),
                (f"{route} reference {{x{n}", wrap(route, honest_with(reference="@@").replace('"@@"', deep_objects))),
            ]  # fmt: skip
    return cases


def malformed_cases() -> list[tuple[str, bytes]]:
    """200+ other malformed requests (whole HTTP requests, both routes)."""
    cases: list[tuple[str, bytes]] = []
    honest = honest_with()
    bb = json.dumps(BB_HONEST)
    for route in ROUTES:
        body = wrap(route, honest)
        # truncated JSON
        for cut in (1, 2, 10, 30, 100, len(body) // 2, len(body) - 2, len(body) - 1):
            cases.append((f"{route} truncated at {cut}", post(route, body[:cut])))
        # not an object / wrong top-level types
        for text in ("", " ", "null", "true", "0", "-1", '"x"', "[]", "[{}]", "{}", "{,}", "{'a': 1}", "nul"):
            cases.append((f"{route} top {text!r}", post(route, text.encode())))
        # wrong field types
        for field, value in [
            ("reference", 5), ("reference", ["a"]), ("solution", None), ("solution", {"a": 1}),
            ("solution", ""), ("backend", "fortran"), ("backend", 3), ("kind", "nope"), ("kind", 7),
            ("dataset", ""), ("dataset", []), ("task_id", 12), ("options", "fast"), ("options", [1, 2]),
            ("unknown_field", 1), ("", ""),
        ]:  # fmt: skip
            cases.append(
                (f"{route} {field}={value!r}", post(route, wrap(route, honest_with(**{field: value}))))
            )
        cases.append(
            (f"{route} both reference and task_id", post(route, wrap(route, honest_with(task_id="x"))))
        )
        cases.append(
            (f"{route} neither reference nor task_id", post(route, wrap(route, honest_with(reference=None))))
        )
        # numeric options out of bounds, NaN, Infinity, wrong types
        for name, raw in [
            ("tolerance", "Infinity"), ("tolerance", "-Infinity"), ("tolerance", "NaN"), ("tolerance", "1e999"),
            ("tolerance", "-1"), ("tolerance", "2"), ("tolerance", '"small"'), ("atol", "Infinity"),
            ("rtol", "NaN"), ("atol", "1e308"), ("perf_trials", "1000000000"), ("perf_trials", "-5"),
            ("perf_trials", "0"), ("perf_trials", "1.5"), ("perf_trials", "Infinity"), ("correctness_trials", "1e30"),
            ("correctness_trials", "-1"), ("warmup", "1000000"), ("timeout_s", "0"), ("timeout_s", "-1"),
            ("timeout_s", "1e308"), ("timeout_s", "NaN"), ("timeout_s", "Infinity"), ("seed", "-1"),
            ("seed", "18446744073709551616"), ("seed", "1" * 5000), ("perf_precision", "1"),
            ("perf_precision", "NaN"), ("device", '"tpu"'), ("tf32", "true"), ("measure_performance", '"maybe"'),
        ]:  # fmt: skip
            cases.append(
                (f"{route} options.{name}={raw[:20]}", post(route, wrap(route, with_option(name, raw))))
            )
        # BackendBench requests out of bounds
        for change in [
            {"op": "os.system('x')"}, {"op": ""}, {"op": "a" * 300}, {"suite": "secret"},
            {"dataset": "backendbench-opinfo"}, {"source": 1}, {"options": {"atol": 0}},
            {"options": {"max_inputs": 10**9}}, {"options": {"perf_trials": 0}}, {"options": {"dtypes": []}},
            {"options": {"dtypes": ["int8"]}}, {"options": {"feedback_chars": 10**12}},
            {"options": {"timeout_s": 10**6}}, {"options": {"seed": -3}}, {"options": {"perf_processes": 99}},
        ]:  # fmt: skip
            cases.append(
                (
                    f"{route} backendbench {change}"[:80],
                    post(route, wrap(route, json.dumps({**BB_HONEST, **change}))),
                )
            )
        for name in ("atol", "rtol", "warmup"):
            text = bb[:-1] + f', "options": {{"{name}": Infinity}}}}'
            cases.append((f"{route} backendbench options.{name}=Infinity", post(route, wrap(route, text))))
        # huge strings
        big = "x" * (1 << 20)
        for field in ("dataset", "task_id", "backend", "kind"):
            cases.append((f"{route} {field}=1MB", post(route, wrap(route, honest_with(**{field: big})))))
        cases.append((f"{route} 1MB field name", post(route, wrap(route, honest[:-1] + f', "{big}": 1}}'))))
        # too many items, too big a number
        cases.append((f"{route} 2M items", post(route, b"[" + b"0," * 2_000_000 + b"0]")))
        cases.append((f"{route} {{}} x 1.5M", post(route, b"[" + b"{}," * 1_500_000 + b"{}]")))
        cases.append((f"{route} 5000-digit number", post(route, b"1" * 5000)))
        # bad UTF-8 and invalid text
        for name, raw in [
            ("0xff 0xfe", b"\xff\xfe{}"),
            ("invalid byte in a string", body.replace(b"import torch", b"import \xc3\x28torch", 1)),
            ("overlong encoding", body.replace(b"import torch", b"import \xc0\xaftorch", 1)),
            ("utf-16", honest.encode("utf-16")),
            (
                "lone surrogate in solution",
                wrap(route, honest.replace("import torch", "import \\ud800torch", 1)),
            ),
            ("lone low surrogate in a key", wrap(route, honest[:-1] + ', "\\udc00": 1}')),
            ("NUL bytes", b"\x00" * 100),
        ]:
            cases.append((f"{route} {name}", post(route, raw)))
        # wrong content types (the body says what it is not)
        for content_type, raw in [
            ("application/x-www-form-urlencoded", b"reference=a&solution=b"),
            ("text/plain", b"hello"),
            (
                "multipart/form-data; boundary=xx",
                b"--xx\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--xx--",
            ),
            ("application/xml", b"<evaluate/>"),
            (None, b"reference=a"),
        ]:
            cases.append((f"{route} content-type {content_type}", post(route, raw, content_type)))
        # batch shapes
        if route == "/v1/evaluate-batch":
            for text in ('{"requests": []}', '{"requests": {}}', '{"requests": [1, 2]}', '{"requests": null}',
                         '{"requests": [' + ",".join([honest] * 1025) + "]}", '{"request": []}'):  # fmt: skip
                cases.append((f"{route} batch {text[:30]}", post(route, text.encode())))
        # framework level: oversized, chunked oversized, bad lengths, methods
        cases.append(
            (
                f"{route} Content-Length 20 MB declared",
                post(route, b"{}", extra="").replace(b"Content-Length: 2", b"Content-Length: 20000000", 1),
            )
        )
        cases.append((f"{route} chunked 20 MB", post_chunked(route, [b"[" + b"0," * 500_000] * 20)))
        cases.append((f"{route} chunked nested", post_chunked(route, [b"[" * 50_000, b"[" * 50_000])))
        cases.append(
            (f"{route} GET", f"GET {route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        )
        cases.append((f"{route} PUT", post(route, honest.encode()).replace(b"POST", b"PUT", 1)))
        cases.append(
            (
                f"{route} bad Content-Length",
                post(route, b"{}").replace(b"Content-Length: 2", b"Content-Length: two", 1),
            )
        )
        cases.append((f"{route}/ trailing path", post(route + "/x", honest.encode())))
    return cases  # fmt: skip


def other_route_cases() -> list[tuple[str, bytes]]:
    """The other routes that take a body, and the listing route: malformed requests get a 4xx too."""
    cases = []
    for route in ("/v1/score", "/evaluate-response/", "/final-score/"):
        for name, raw in [
            ("nested 100000", b"[" * 100_000), ("nested objects", b'{"a":' * 20_000 + b"1" + b"}" * 20_000),
            ("NaN", b"NaN"), ("bad UTF-8", b'{"scores": [1, "\xff"]}'), ("truncated", b'{"scores": [1, 2'),
            ("wrong type", b'{"scores": "all"}'), ("Infinity score", b'{"scores": [Infinity]}'),
            ("1e999 score", b'{"scores": [1e999]}'), ("empty", b""), ("2M items", b"[" + b"0," * 2_000_000 + b"0]"),
        ]:  # fmt: skip
            cases.append((f"{route} {name}", post(route, raw)))
    for name in ("nope", "backendbench-nope", "backendbench-..%2F..%2Fetc", "x" * 5000):
        cases.append(
            (
                f"GET tasks {name[:30]}",
                f"GET /v1/datasets/{name}/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
            )
        )
    return cases  # fmt: skip


def test_extreme_but_valid_scores_are_answered(service: ServeProcess) -> None:
    """Finite numbers near the float range, and speedups that are not numbers, do not make a 500."""
    evaluation = {"task_id": "level1/t", "model": "m", "data": {"status": "correct", "score": 1e308}}
    weird = [{"speedup": 1e308}, {"speedup": "fast"}, {"speedup": -1}, {"speedup": [1]}, {"speedup": True}]
    body = {"dataset": "level1", "model": "m", "evaluations": [
        {**evaluation, "data": {**evaluation["data"], "details": d}} for d in weird]}  # fmt: skip
    with httpx.Client(base_url=service.url, timeout=60) as client:
        score = client.post("/v1/score", json=body)
        assert score.status_code == 200, score.text
        assert score.json()["metrics"]["n"] == 5
        mean = client.post("/final-score/", json={"scores": [1e308, 1e308, 1e308]})
        assert mean.status_code == 200 and mean.json()["score"] == pytest.approx(1e308), mean.text


def test_malformed_bodies_get_4xx_and_the_service_stays_healthy(service: ServeProcess) -> None:
    nested = [(name, post(name.split(" ")[0], body)) for name, body in nested_cases()]
    others = malformed_cases() + other_route_cases()
    assert len(nested) >= 24 and len(others) >= 200
    answers: dict[str, tuple[int | None, str]] = {}
    for name, request in nested + others:
        status, body = raw_http(service.port, request)
        answers[name] = (status, detail(body))
    bad = {name: a for name, a in answers.items() if a[0] is None or not 400 <= a[0] < 500}
    assert not bad, f"{len(bad)} requests were not answered 4xx: {dict(list(bad.items())[:10])}"

    # The answers say what is wrong.
    for name, (status, text) in answers.items():
        if "x100000" in name or "x10000" in name:
            assert status == 422 and "nested" in text, (name, status, text)
    for route in ROUTES:
        status, text = answers[f"{route} options.tolerance=Infinity"]
        assert status == 422 and "options.tolerance" in text and "[0, 1]" in text, text
        status, text = answers[f"{route} options.perf_trials=1000000000"]
        assert status == 422 and "options.perf_trials" in text and "[1, 10000]" in text, text
        status, text = answers[f"{route} backendbench options.atol=Infinity"]
        assert status == 422 and "options.atol" in text and "(0, 1]" in text, text
        assert answers[f"{route} 2M items"][0] == 422 and "values" in answers[f"{route} 2M items"][1]
        assert answers[f"{route} chunked 20 MB"][0] == 413
        assert "surrogate" in answers[f"{route} lone surrogate in solution"][1]
        assert "UTF-8" in answers[f"{route} 0xff 0xfe"][1]
        assert "application/json" in answers[f"{route} content-type text/plain"][1]

    # Clients that leave in the middle of their body get no answer, and leave no trace in the log.
    for route in ROUTES:
        with socket.create_connection(("127.0.0.1", service.port)) as sock:
            sock.sendall(post(route, b"{" + b" " * 1000 + b"}")[:-500])
    with httpx.Client(base_url=service.url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200

    log = service.log()
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]

    # Healthy: honest requests on both routes are judged correctly.
    with httpx.Client(base_url=service.url, timeout=300) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        one = client.post("/v1/evaluate", json=HONEST)
        assert one.status_code == 200 and one.json()["outcome"] == "correct", one.text
        batch = client.post(
            "/v1/evaluate-batch", json={"requests": [HONEST, {**HONEST, "options": {**FAST, "seed": 7}}]}
        )
        assert batch.status_code == 200, batch.text
        assert [r["outcome"] for r in batch.json()["results"]] == ["correct", "correct"]
        metrics = client.get("/v1/metrics").json()
        assert metrics["http"]["errors"] == 0 and metrics["http"]["refused"] >= 200


def test_every_numeric_option_is_bounded() -> None:
    """Each number a request may set has a lower and an upper bound (``bounds.py`` enforces them)."""
    from kernel_service.backendbench.schemas import BackendBenchOptions
    from kernel_service.judging.bounds import BoundedModel, bounds_of, numeric
    from kernel_service.judging.schemas import EvalOptions

    for model in (EvalOptions, BackendBenchOptions):
        assert issubclass(model, BoundedModel)
        for name, field in model.model_fields.items():
            if numeric(field.annotation):
                low, _, high, _ = bounds_of(field.metadata)
                assert low is not None and high is not None, f"{model.__name__}.{name} is unbounded"


def test_parse_bounds_units() -> None:
    """The bounds check itself: exact depth, strings do not count, linear on hostile strings."""
    import time

    from benchmark_runner.service.bodies import BodyError, json_shape_error, parse_json_body

    assert json_shape_error(b"[" * 100 + b"]" * 100, 100, 10_000) is None
    assert "101 deep" in (json_shape_error(b"[" * 101 + b"]" * 101, 100, 10_000) or "")
    assert json_shape_error(b'["' + b"[" * 5000 + b'"]', 100, 10_000) is None  # inside a string
    assert json_shape_error(b'["\\"' + b"[" * 5000 + b'"]', 100, 10_000) is None  # after an escaped quote
    t0 = time.perf_counter()
    hostile = b"[" * 200 + b'"' + b'\\"' * 4_000_000  # unterminated string of escaped quotes
    json_shape_error(hostile, 100, 1_000_000)
    assert time.perf_counter() - t0 < 5
    for raw in (b"NaN", b"[1e999]", b'{"a": -Infinity}'):
        data = parse_json_body(raw)  # parsed; refused by the app after the schema had its say
        assert data is not None
    with pytest.raises(BodyError, match="surrogate"):
        parse_json_body(b'{"a": ["\\ud800"]}')
    assert parse_json_body(b'"\\ud83d\\ude00"') == "\U0001f600"  # a pair is a character
    with pytest.raises(BodyError, match="not valid JSON"):
        parse_json_body(b"1" * 5000)


def test_with_option_writes_raw_json() -> None:
    text = with_option("tolerance", "Infinity")
    assert '"tolerance": Infinity' in text and json.loads(text)["options"]["tolerance"] == float("inf")
