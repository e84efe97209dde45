"""A scripted OpenAI-compatible chat server: the one stand-in for a paid LLM API in tests.

It serves ``POST /chat/completions`` and ``POST /v1/chat/completions`` over real HTTP and answers
from a script, so tests exercise the real client (retries, tool calls, usage) end to end.

Script
    A list of entries is replayed in order, one entry per request. A dict maps a *key* to its own
    list: a request whose messages (all text concatenated) contain the key consumes from that
    list; when several keys match, the longest wins, and the key ``""`` matches every request (a
    default). Keyed scripts keep concurrent multi-task runs deterministic: each task's prompt
    carries its id, so each task reads its own list whatever the request order.

    When a list is exhausted, its last non-error entry is repeated forever (a list of errors only
    repeats its last entry), so a script need not guess how many turns an agent will take.

Entries (``ScriptEntry``)
    ``{"content": "..."}``; ``{"tool_calls": [{"name": "f", "arguments": {...}}], "content": ...}``;
    ``{"status": 429, "retry_after": 0}``; ``{"status": 500}``; ``{"delay_s": 0.1, ...}`` (sleep
    before answering, combinable with any entry).

CLI: ``python -m benchmark_runner.testing.fake_llm --script FILE.json [--port 0]`` prints
``URL <base_url>`` and serves until killed, for subprocess tests.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import anyio
import click
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import Field, TypeAdapter, ValidationError

from ..schemas import StrictModel, TokenUsage
from ..service.server import RunningServer, start_server


class FakeToolCall(StrictModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(
        default_factory=dict,
        description="a dict (sent as JSON) or a raw string (sent as is, e.g. broken JSON)",
    )
    id: str | None = None


class ScriptEntry(StrictModel):
    """One scripted answer. ``status`` >= 400 answers an error instead of a completion."""

    content: str | None = None
    tool_calls: list[FakeToolCall] | None = None
    finish_reason: str | None = None
    status: int = Field(default=200, ge=200, le=599)
    retry_after: float | None = Field(default=None, ge=0, description="Retry-After header (seconds)")
    error: str | None = Field(default=None, description="error message of an error answer")
    delay_s: float = Field(default=0.0, ge=0)

    @property
    def is_error(self) -> bool:
        return self.status >= 400


EntryLike = ScriptEntry | Mapping[str, Any]
#: What ``FakeLLMServer`` accepts: a list of entries, or a mapping key -> list of entries.
ScriptLike = Sequence[EntryLike] | Mapping[str, Sequence[EntryLike]]


_ENTRIES: TypeAdapter[list[ScriptEntry]] = TypeAdapter(list[ScriptEntry])


def _entries(data: Any, where: str) -> list[ScriptEntry]:
    if not isinstance(data, Sequence) or isinstance(data, str) or not data:
        raise ValueError(f"{where}: expected a non-empty list of entries, got {data!r:.80}")
    try:
        return _ENTRIES.validate_python(list(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            index, *field = err["loc"]
            got = repr(err.get("input"))[:80]
            problems.append(
                f"{where}[{index}].{'.'.join(map(str, field)) or '<entry>'}: {err['msg']} (got {got})"
            )
        raise ValueError("; ".join(problems)) from exc


def load_script(data: Any) -> dict[str, list[ScriptEntry]]:
    """Validate a script (a list, or a dict key -> list; entries as dicts or ``ScriptEntry``).

    Errors name the entry and field, e.g. ``script['task-1'][0].status: Input should be ...``.
    """
    try:
        if isinstance(data, Mapping) and data:
            return {str(key): _entries(value, f"script[{key!r}]") for key, value in data.items()}
        if isinstance(data, Sequence) and not isinstance(data, str):
            return {"": _entries(data, "script")}
        raise ValueError(
            f"script: expected a list of entries or a non-empty dict key -> list, got {data!r:.80}"
        )
    except ValueError as exc:
        raise ValueError(f"invalid fake LLM script: {exc}") from exc


def _text_of(messages: Any) -> str:
    """All text in the messages (string contents, content parts, tool-call arguments)."""
    if not isinstance(messages, list):
        return ""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(
                p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                parts.append(json.dumps(call.get("function", {})))
    return "\n".join(parts)


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class FakeLLMServer:
    """``with FakeLLMServer(script) as fake: ChatClient(LLMConfig(model="m", base_url=fake.url))``.

    ``requests`` holds every JSON request body received, refused ones included, in arrival order;
    ``served`` the ``(key, index)`` of the script entry each request consumed; ``usage_total`` the
    usage answered in total.
    Set ``api_key`` to require ``Authorization: Bearer <api_key>`` (401 otherwise).
    """

    def __init__(self, script: ScriptLike, api_key: str | None = None) -> None:
        self.script = load_script(script)
        self.api_key = api_key
        self._keys = sorted(self.script, key=len, reverse=True)  # longest key wins
        self._positions = dict.fromkeys(self.script, 0)
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._served: list[tuple[str, int]] = []
        self.usage_total = TokenUsage()
        self._server: RunningServer | None = None
        self.app = self._make_app()

    # ---- inspection (thread-safe) ---------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def served(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._served)

    @property
    def url(self) -> str:
        """The base URL to give a client (ends in ``/v1``)."""
        if self._server is None:
            raise RuntimeError(
                "FakeLLMServer is not started: use `with FakeLLMServer(...) as fake` or .start()"
            )
        return f"{self._server.url}/v1"

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeLLMServer:
        if self._server is None:
            self._server = start_server(self.app, host=host, port=port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- behaviour --------------------------------------------------------------------------------

    def _next_entry(self, text: str) -> tuple[str, int, ScriptEntry] | None:
        with self._lock:
            key = next((k for k in self._keys if k in text), None)
            if key is None:
                return None
            entries = self.script[key]
            position = self._positions[key]
            self._positions[key] = position + 1
            if position < len(entries):
                index = position
            else:
                ok = [i for i, e in enumerate(entries) if not e.is_error]
                index = ok[-1] if ok else len(entries) - 1
            self._served.append((key, index))
            return key, index, entries[index]

    def _completion(self, body: dict[str, Any], entry: ScriptEntry, prompt: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": entry.content}
        completion_text = entry.content or ""
        if entry.tool_calls:
            message["tool_calls"] = []
            for call in entry.tool_calls:
                arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
                completion_text += call.name + arguments
                message["tool_calls"].append(
                    {
                        "id": call.id or f"call_{uuid.uuid4().hex[:12]}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": arguments},
                    }
                )
        usage = TokenUsage(prompt_tokens=max(_tokens(prompt), 1), completion_tokens=_tokens(completion_text))
        with self._lock:
            self.usage_total = self.usage_total + usage
        finish = entry.finish_reason or ("tool_calls" if entry.tool_calls else "stop")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
        }

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="fake OpenAI-compatible LLM")

        def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
            kind = (
                "rate_limit_error"
                if status == 429
                else "invalid_request_error"
                if status < 500
                else "server_error"
            )
            return JSONResponse(
                {"error": {"message": message, "type": kind}}, status_code=status, headers=headers
            )

        async def completions(request: Request) -> JSONResponse:
            try:
                body = json.loads(await request.body())
            except ValueError as exc:
                return error(400, f"fake LLM: body is not JSON: {exc}")
            if not isinstance(body, dict):
                return error(400, "fake LLM: body must be a JSON object")
            with self._lock:
                self._requests.append(body)
            if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
                return error(401, "fake LLM: missing or wrong Authorization: Bearer key")
            if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
                return error(400, "fake LLM: 'model' (string) and 'messages' (list) are required")
            prompt = _text_of(body["messages"])
            picked = self._next_entry(prompt)
            if picked is None:
                return error(400, f"fake LLM: no script key occurs in the messages (keys: {self._keys})")
            _key, _index, entry = picked
            if entry.delay_s:
                await anyio.sleep(entry.delay_s)
            if entry.is_error:
                headers = {"Retry-After": f"{entry.retry_after:g}"} if entry.retry_after is not None else None
                return error(entry.status, entry.error or f"fake LLM: scripted HTTP {entry.status}", headers)
            return JSONResponse(self._completion(body, entry, prompt))

        for path in ("/chat/completions", "/v1/chat/completions"):
            app.add_api_route(path, completions, methods=["POST"])

        @app.get("/healthz")
        async def healthz() -> dict[str, str]:
            return {"status": "ok", "service": "fake-llm"}

        return app


@click.command()
@click.option(
    "--script", "script_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=0, show_default=True, help="0 picks a free port")
def main(script_file: Path, host: str, port: int) -> None:
    """Serve a scripted OpenAI-compatible API; print ``URL <base_url>`` once it accepts connections."""
    try:
        data = json.loads(script_file.read_text())
        fake = FakeLLMServer(data)
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"{script_file}: {exc}") from exc
    done = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with fake.start(host=host, port=port):
        print(f"URL {fake.url}", flush=True)
        while not done.wait(0.5):
            pass
    sys.exit(0)


if __name__ == "__main__":
    main()
