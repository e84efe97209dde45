"""ChatClient against the scripted FakeLLMServer over real HTTP, and the fake server itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from benchmark_runner.llm import ChatClient, ChatResponse, LLMConfig, LLMError, parse_chat_completion
from benchmark_runner.schemas import TokenUsage
from benchmark_runner.testing import FakeLLMServer, ScriptEntry

pytestmark = pytest.mark.anyio

FakeFactory = Callable[..., FakeLLMServer]
USER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}]


def client_for(fake: FakeLLMServer, max_retries: int = 3, **config: Any) -> ChatClient:
    cfg = LLMConfig(model=config.pop("model", "fake-model"), base_url=fake.url, **config)
    return ChatClient(cfg, max_retries=max_retries, backoff=0.01)


async def test_content_request_shape_and_auth(fake_llm: FakeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    fake = fake_llm([{"content": "hi there"}], api_key="sk-test")
    async with client_for(fake, api_key_env="FAKE_KEY", temperature=0.7, max_tokens=123) as client:
        answer = await client.chat(USER)
    assert answer.content == "hi there" and answer.tool_calls == [] and answer.finish_reason == "stop"
    assert answer.latency_s > 0
    (request,) = fake.requests
    assert request == {"model": "fake-model", "messages": USER, "temperature": 0.7, "max_tokens": 123}

    monkeypatch.setenv("FAKE_KEY", "wrong")
    async with client_for(fake, api_key_env="FAKE_KEY") as client:
        with pytest.raises(LLMError, match="HTTP 401.*Authorization") as info:
            await client.chat(USER)
    assert info.value.status_code == 401

    # An explicit key (a per-session secret) wins over the environment variable's wrong one.
    cfg = LLMConfig(model="fake-model", base_url=fake.url, api_key_env="FAKE_KEY")
    async with ChatClient(cfg, max_retries=0, api_key="sk-test") as client:
        assert (await client.chat(USER)).content == "hi there"


async def test_tool_calls_parsed_and_broken_arguments_kept(fake_llm: FakeFactory) -> None:
    tools = [{"type": "function", "function": {"name": "evaluate", "parameters": {"type": "object"}}}]
    fake = fake_llm(
        [
            {
                "content": "let me check",
                "tool_calls": [
                    {"name": "evaluate", "arguments": {"code": "print(1)", "n": 2}, "id": "call_a"},
                    {"name": "evaluate", "arguments": '{"code": "unterminated'},
                    {"name": "noargs"},
                ],
            }
        ]
    )
    async with client_for(fake) as client:
        answer = await client.chat(USER, tools=tools, tool_choice="auto")
    assert fake.requests[0]["tools"] == tools and fake.requests[0]["tool_choice"] == "auto"
    assert answer.content == "let me check" and answer.finish_reason == "tool_calls"
    first, broken, empty = answer.tool_calls
    assert (first.id, first.name, first.arguments) == ("call_a", "evaluate", {"code": "print(1)", "n": 2})
    assert broken.arguments == {"_raw": '{"code": "unterminated'}
    assert empty.name == "noargs" and empty.arguments == {}
    # Round trip: the assistant message carries the arguments back as JSON strings, the broken one verbatim.
    message = answer.assistant_message()
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"code": "print(1)", "n": 2}
    assert message["tool_calls"][1]["function"]["arguments"] == '{"code": "unterminated'


async def test_usage_accumulates(fake_llm: FakeFactory) -> None:
    fake = fake_llm([{"content": "a" * 40}, {"content": "b" * 8}])
    async with client_for(fake) as client:
        first = await client.chat([{"role": "user", "content": "x" * 400}])
        second = await client.chat([{"role": "user", "content": "y" * 80}])
        assert first.usage == TokenUsage(prompt_tokens=100, completion_tokens=10)
        assert second.usage == TokenUsage(prompt_tokens=20, completion_tokens=2)
        assert client.usage_total == TokenUsage(prompt_tokens=120, completion_tokens=12)
        assert client.usage_total == fake.usage_total and client.n_calls == 2


async def test_429_with_retry_after_then_success(fake_llm: FakeFactory) -> None:
    fake = fake_llm([{"status": 429, "retry_after": 0.2}, {"content": "finally"}])
    async with client_for(fake) as client:
        start = time.monotonic()
        answer = await client.chat(USER)
    assert answer.content == "finally" and len(fake.requests) == 2
    assert time.monotonic() - start >= 0.2  # the server's Retry-After was honoured
    assert answer.latency_s >= 0.2  # latency includes the wait


async def test_retry_after_is_capped(fake_llm: FakeFactory) -> None:
    fake = fake_llm([{"status": 503, "retry_after": 3600}, {"content": "ok"}])
    config = LLMConfig(model="m", base_url=fake.url)
    async with ChatClient(config, max_retries=1, max_retry_after=0.05) as client:
        start = time.monotonic()
        assert (await client.chat(USER)).content == "ok"
    assert time.monotonic() - start < 2


async def test_500_then_success_and_giving_up(fake_llm: FakeFactory) -> None:
    fake = fake_llm(
        {"flaky": [{"status": 500}, {"status": 502}, {"content": "up"}], "down": [{"status": 500}]}
    )
    async with client_for(fake, max_retries=3) as client:
        assert (await client.chat([{"role": "user", "content": "flaky"}])).content == "up"
        with pytest.raises(LLMError, match="failed after 4 attempts; last error: HTTP 500"):
            await client.chat([{"role": "user", "content": "down"}])
    served = fake.served
    assert served.count(("down", 0)) == 4  # a list of errors only keeps repeating its error


async def test_other_4xx_raise_at_once_with_server_detail(fake_llm: FakeFactory) -> None:
    fake = fake_llm([{"status": 400, "error": "model 'fake-model' does not exist"}, {"content": "never"}])
    async with client_for(fake, max_retries=5) as client:
        with pytest.raises(LLMError, match="HTTP 400.*model 'fake-model' does not exist") as info:
            await client.chat(USER)
    assert info.value.status_code == 400 and len(fake.requests) == 1


async def test_refused_parameters_are_adapted_once_and_remembered(fake_llm: FakeFactory) -> None:
    """Reasoning models refuse max_tokens and temperature; the client corrects the request, not the user."""
    max_tokens_error = (
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead."
    )
    temperature_error = "Unsupported value: 'temperature' does not support 0.0 with this model."
    fake = fake_llm(
        [
            {"status": 400, "error": max_tokens_error},
            {"status": 400, "error": temperature_error},
            {"content": "ok"},
            {"content": "again"},
        ]
    )
    async with client_for(fake, max_retries=0, max_tokens=77) as client:
        assert (await client.chat(USER)).content == "ok"
        assert (await client.chat(USER)).content == "again"
    first, second, third, fourth = fake.requests
    assert first["max_tokens"] == 77 and first["temperature"] == 0.0
    assert "max_tokens" not in second and second["max_completion_tokens"] == 77 and "temperature" in second
    assert "temperature" not in third and third["max_completion_tokens"] == 77
    assert fourth == third  # remembered: no refused request the second time


async def test_timeout_is_retried_then_fails_clearly(fake_llm: FakeFactory) -> None:
    fake = fake_llm(
        {"slow-once": [{"delay_s": 0.6, "content": "late"}, {"content": "fast"}], "slow": [{"delay_s": 0.6}]}
    )
    async with client_for(fake, max_retries=1, timeout=0.15) as client:
        start = time.monotonic()
        assert (await client.chat([{"role": "user", "content": "slow-once"}])).content == "fast"
        with pytest.raises(LLMError, match="failed after 2 attempts; last error: ReadTimeout"):
            await client.chat([{"role": "user", "content": "slow"}])
    assert time.monotonic() - start < 1.0  # three timeouts of 0.15 s and one fast call: never a 0.6 s wait


async def test_missing_base_url_says_pass_base_url() -> None:
    with pytest.raises(LLMError, match="pass --base-url"):
        ChatClient(LLMConfig(model="openai/gpt-5"))


async def test_connection_refused_is_retried_and_reported() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = LLMConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1")
    async with ChatClient(config, max_retries=2, backoff=0.01) as client:
        with pytest.raises(LLMError, match="failed after 3 attempts; last error: ConnectError"):
            await client.chat(USER)


def test_parse_errors_are_clear() -> None:
    with pytest.raises(LLMError, match=r"no choices\[0\].message"):
        parse_chat_completion({"error": "nope"})
    parsed = parse_chat_completion(
        {
            "choices": [
                {"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}
            ]
        }
    )
    assert parsed == ChatResponse(content="ab")


# ---- the fake server's own contract ----------------------------------------------------------------


async def test_keyed_scripts_are_deterministic_under_concurrency(fake_llm: FakeFactory) -> None:
    """Each task reads its own list whatever the interleaving; the longest matching key wins."""
    script = {
        "task-1": [{"delay_s": 0.05, "content": "1a"}, {"content": "1b"}],
        "task-10": [{"content": "10a"}, {"status": 500}, {"content": "10b"}],
        "task-2": [{"content": "2a"}],
        "": [{"content": "default"}],
    }
    fake = fake_llm(script)
    results: dict[str, list[str | None]] = {}

    async def run_task(task_id: str) -> None:
        messages = [{"role": "user", "content": f"solve {task_id} please"}]
        async with client_for(fake) as client:
            for _ in range(3):
                results.setdefault(task_id, []).append((await client.chat(messages)).content)

    async with anyio.create_task_group() as tg:
        for task_id in ("task-1", "task-10", "task-2", "other"):
            tg.start_soon(run_task, task_id)
    assert results == {
        "task-1": ["1a", "1b", "1b"],  # exhausted: the last entry repeats
        "task-10": ["10a", "10b", "10b"],  # the 500 was retried; exhausted: last *non-error* entry repeats
        "task-2": ["2a", "2a", "2a"],
        "other": ["default"] * 3,
    }


async def test_key_matching_reads_all_message_text(fake_llm: FakeFactory) -> None:
    fake = fake_llm({"needle": [{"content": "found"}]})
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "in a part: needle"}]},
    ]
    async with client_for(fake, max_retries=0) as client:
        assert (await client.chat(messages)).content == "found"
        with pytest.raises(LLMError, match="HTTP 400.*no script key occurs"):
            await client.chat([{"role": "user", "content": "haystack"}])


def test_fake_server_validates_requests_and_scripts(fake_llm: FakeFactory) -> None:
    with pytest.raises(ValueError, match=r"script\[0\].status: Input should be greater than or equal to 200"):
        FakeLLMServer([{"status": 99}])
    with pytest.raises(ValueError, match=r"script\['k'\]\[1\].colour: Extra inputs are not permitted"):
        FakeLLMServer({"k": [{"content": "ok"}, {"colour": "red"}]})
    with pytest.raises(ValueError, match=r"script\[.a.\]: expected a non-empty list of entries, got \[\]"):
        FakeLLMServer({"a": []})
    with pytest.raises(RuntimeError, match="not started"):
        _ = FakeLLMServer([ScriptEntry(content="x")]).url
    fake = fake_llm([ScriptEntry(content="x")])
    bad = httpx.post(f"{fake.url}/chat/completions", json={"messages": "nope"}, timeout=5)
    assert (
        bad.status_code == 400 and "'model' (string) and 'messages' (list)" in bad.json()["error"]["message"]
    )
    root = fake.url.removesuffix("/v1")
    ok = httpx.post(f"{root}/chat/completions", json={"model": "m", "messages": []}, timeout=5)
    assert ok.json()["choices"][0]["message"]["content"] == "x"


async def test_cli_serves_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"ping": [{"content": "pong"}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmark_runner.testing.fake_llm", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line.startswith("URL http://127.0.0.1:"), (
            line,
            proc.stderr.read() if proc.poll() is not None and proc.stderr else "",
        )
        config = LLMConfig(model="m", base_url=line.split()[1])
        async with ChatClient(config, max_retries=0) as client:
            assert (await client.chat([{"role": "user", "content": "ping"}])).content == "pong"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"status": "teapot"}]))
    result = subprocess.run(
        [sys.executable, "-m", "benchmark_runner.testing.fake_llm", "--script", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        result.returncode != 0
        and "bad.json: invalid fake LLM script: script[0].status: Input should be a valid integer"
        in result.stderr
    )
