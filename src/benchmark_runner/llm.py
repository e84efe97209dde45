"""LLM settings from CLI flags, and an async OpenAI-compatible chat client."""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import time
from types import TracebackType
from typing import Any

import anyio
import httpx
from pydantic import Field

from .schemas import StrictModel, TokenUsage, ToolCall

logger = logging.getLogger(__name__)


class LLMConfig(StrictModel):
    """What a runner needs to call a model. Built from the ``run`` command's flags."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=4096, gt=0)
    max_turns: int = Field(default=5, gt=0)
    timeout: float = Field(default=300.0, gt=0, description="seconds per model request")
    extra: dict[str, Any] = Field(default_factory=dict, description="benchmark-specific options")

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env)


# ---- chat client ---------------------------------------------------------------------------------

#: Client-side statuses worth retrying (timeout, conflict, rate limit); every 5xx but 501 is retried too.
RETRY_STATUS = frozenset({408, 409, 429})


def _retryable(status: int) -> bool:
    return status in RETRY_STATUS or (status >= 500 and status != 501)


class LLMError(RuntimeError):
    """The model API refused the request, answered nonsense, or stayed unreachable after retries."""

    def __init__(self, message: str, status_code: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class ChatResponse(StrictModel):
    """One model answer, normalised from the OpenAI wire format."""

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    finish_reason: str | None = None
    latency_s: float = Field(default=0.0, ge=0, description="wall time of the call, retries included")

    def assistant_message(self) -> dict[str, Any]:
        """This answer as an OpenAI ``assistant`` message, to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments["_raw"]
                        if set(call.arguments) == {"_raw"}
                        else json.dumps(call.arguments),
                    },
                }
                for call in self.tool_calls
            ]
        return message


def _parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments arrive as a JSON string, and models sometimes emit broken JSON: keep it raw
    under ``_raw`` (the agent can show the model its mistake) instead of crashing the run."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_raw": raw}
    return {"_raw": json.dumps(raw)}


def parse_chat_completion(body: Any, latency_s: float = 0.0) -> ChatResponse:
    """Read an OpenAI ``chat.completion`` body; raise ``LLMError`` naming what is missing."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        snippet = json.dumps(body)[:500] if not isinstance(body, str) else body[:500]
        raise LLMError(f"model API answer has no choices[0].message: {snippet}", body=body) from exc
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        calls.append(
            ToolCall(
                id=str(call.get("id") or f"call_{i}"),
                name=str(function.get("name") or ""),
                arguments=_parse_arguments(function.get("arguments")),
            )
        )
    usage = body.get("usage") or {}
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ChatResponse(
        content=content,
        tool_calls=calls,
        usage=TokenUsage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        ),
        finish_reason=choice.get("finish_reason"),
        latency_s=max(latency_s, 0.0),
    )


def _retry_after_s(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (number or HTTP date), or ``None`` when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _body_text(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:2000]


class ChatClient:
    """Async OpenAI-compatible ``/chat/completions`` client with retries. ``async with ChatClient(cfg) as c``.

    Retries connection errors, timeouts, 429 and 5xx (honouring ``Retry-After`` up to
    ``max_retry_after`` seconds, exponential backoff otherwise); any other 4xx is a request the
    server will never accept, so it raises ``LLMError`` at once with the server's explanation.
    ``model`` is sent exactly as given (``openai/gpt-5`` stays ``openai/gpt-5``: routers need it).
    """

    def __init__(
        self,
        config: LLMConfig,
        transport: httpx.AsyncBaseTransport | None = None,
        max_retries: int = 5,
        *,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        max_retry_after: float = 60.0,
        api_key: str | None = None,
    ) -> None:
        """``api_key``, when given, is sent instead of ``config.api_key_env``'s value: a caller that holds
        a per-session secret (an RL environment's model proxy) must not put it in the process environment.
        """
        if not config.base_url:
            raise LLMError(
                f"no model API URL for model {config.model!r}: pass --base-url "
                "(an OpenAI-compatible endpoint, e.g. https://api.openai.com/v1)"
            )
        self.config = config
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.usage_total = TokenUsage()
        self.n_calls = 0
        # Parameters the server refused once, so later calls send the accepted form straight away.
        self._renamed: dict[str, str] = {}
        self._dropped: set[str] = set()
        headers = {"Content-Type": "application/json"}
        key = api_key if api_key is not None else config.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(config.timeout, connect=min(config.timeout, 30.0)),
            transport=transport,
        )

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _backoff_s(self, attempt: int) -> float:
        delay = min(self.backoff * 2**attempt, self.max_backoff)
        return delay * (0.9 + 0.2 * random.random())  # jitter: concurrent tasks do not retry in lockstep

    def _adapt(self, body: dict[str, Any], detail: Any) -> bool:
        """Rewrite ``body`` after a 400 that names a parameter this model refuses; ``True`` if changed.

        Reasoning models (OpenAI o-series, gpt-5) refuse ``max_tokens`` (they want
        ``max_completion_tokens``) and a non-default ``temperature``: one adjusted retry, remembered
        for later calls, beats failing the whole run.
        """
        text = detail if isinstance(detail, str) else json.dumps(detail)
        if "max_tokens" in body and "max_completion_tokens" in text:
            self._renamed["max_tokens"] = "max_completion_tokens"
        elif "temperature" in body and "temperature" in text and "support" in text.lower():
            self._dropped.add("temperature")
        else:
            return False
        self._apply_adjustments(body)
        logger.warning("%s refused a parameter (%s); retrying with %s", self.url, text[:200], sorted(body))
        return True

    def _apply_adjustments(self, body: dict[str, Any]) -> None:
        for old, new in self._renamed.items():
            if old in body:
                body[new] = body.pop(old)
        for name in self._dropped:
            body.pop(name, None)

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **params: Any
    ) -> ChatResponse:
        """One completion. ``params`` (e.g. ``tool_choice``) are added to the request body."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if tools:
            body["tools"] = tools
        self._apply_adjustments(body)
        body.update(params)
        start = time.monotonic()
        last = ""
        attempt = 0
        adapted = 0
        while True:
            delay: float | None = None
            try:
                response = await self._http.post(self.url, json=body)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if response.status_code < 400:
                    try:
                        data = response.json()
                    except ValueError as exc:
                        raise LLMError(
                            f"{self.url} answered HTTP {response.status_code} with non-JSON: "
                            f"{response.text[:500]}",
                            status_code=response.status_code,
                        ) from exc
                    result = parse_chat_completion(data, time.monotonic() - start)
                    self.usage_total = self.usage_total + result.usage
                    self.n_calls += 1
                    return result
                detail = _body_text(response)
                if response.status_code == 400 and adapted < 2 and self._adapt(body, detail):
                    adapted += 1  # a corrected request is not a retry: it does not use up an attempt
                    continue
                if not _retryable(response.status_code):
                    raise LLMError(
                        f"{self.url} refused the request with HTTP {response.status_code}: {detail}",
                        status_code=response.status_code,
                        body=detail,
                    )
                last = f"HTTP {response.status_code}: {detail}"
                retry_after = _retry_after_s(response)
                if retry_after is not None:
                    delay = min(retry_after, self.max_retry_after)
            if attempt >= self.max_retries:
                raise LLMError(f"{self.url} failed after {attempt + 1} attempts; last error: {last}")
            await anyio.sleep(delay if delay is not None else self._backoff_s(attempt))
            attempt += 1
