"""LiteLLM requests narrowed by toolselect: the proxy's pre-call hook called as the proxy calls
it (a real `UserAPIKeyAuth`, `DualCache` and request dict), then the request sent through
`litellm.acompletion` with the callback registered, to a local stand-in of the Chat Completions
API that records the tools it is offered and a real toolselect server: the request reaches the
model with the ranked tools, the tool the model calls reaches the store as a turn with its
search id, and a toolselect that is down or silent leaves every tool in place."""

from __future__ import annotations

import os

# LiteLLM fetches its model price map from GitHub when first imported; use the packaged copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import litellm
import pytest
import pytest_asyncio
from litellm.caching.dual_cache import DualCache
from litellm.proxy._types import UserAPIKeyAuth

from tests.integrations.agent_stubs import (
    STOCKS,
    TOOLS,
    WEATHER,
    chat_model,
    imported_heavy_modules,
    shown_in_readme,
    silent_toolselect,
)
from tests.integrations.test_conversation import RecordingTransport
from tests.integrations.test_examples import environment, run_example
from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from tests.stubs import Stub
from toolselect.client import AsyncClient
from toolselect.integrations.litellm import (
    AGENT,
    MAX_AGENTS,
    PACK,
    SEARCH_ID,
    ToolselectCallback,
    agent_name,
    conversation,
)

FUNCTIONS = [
    {"type": "function", "function": {"name": name, "description": description,
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    for name, description in TOOLS.items()
]  # fmt: skip
HOSTED = {"type": "web_search_preview"}


@pytest.fixture
def callbacks() -> Iterator[list[Any]]:
    """LiteLLM's global callback list, emptied again after the test."""
    saved = list(litellm.callbacks)
    litellm.callbacks.clear()
    try:
        yield litellm.callbacks
    finally:
        litellm.callbacks[:] = saved


@pytest_asyncio.fixture(loop_scope="function")
async def silent() -> AsyncIterator[str]:
    async for url in silent_toolselect():
        yield url


def offered(stub: Stub) -> list[list[str]]:
    return [[t["function"]["name"] for t in r.body.get("tools", []) if "function" in t]
            for r in stub.received]  # fmt: skip


async def complete(stub: Stub, **request: Any) -> Any:
    """`litellm.acompletion` against the stand-in, as the proxy's router would send it."""
    response = await litellm.acompletion(
        api_base=f"{stub.url}/v1", api_key="test-key", max_retries=0, **request
    )
    for callback in litellm.callbacks:
        if isinstance(callback, ToolselectCallback):
            await callback.flush()  # the success callback has reported before the test goes on
    return response


async def test_the_proxy_hook_narrows_and_the_call_is_stored(
    server: LiveServer, openai_stub: Stub, callbacks: list[Any]
) -> None:
    """The pre-call hook keeps the top k function tools, the `always` one and the hosted one,
    names the pack after the virtual key's alias, ranks with the request's session and notes
    the search in the metadata; the
    deployment hook leaves the narrowed request alone; the tool called reaches the store with
    that search id."""
    openai_stub.responder = chat_model("get_weather")
    transport = RecordingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        hook = ToolselectCallback(ts, k=2, always=["handoff"])
        callbacks.append(hook)
        data: dict[str, Any] = {
            "model": "gpt-5.4",
            "messages": [{"role": "user", "content": WEATHER}],
            "tools": [*FUNCTIONS, HOSTED],
            "metadata": {"user_api_key_alias": "support-bot"},
            "litellm_session_id": "conversation-7",
        }
        key = UserAPIKeyAuth(key_alias="support-bot", team_alias="support")
        data = await hook.async_pre_call_hook(key, DualCache(), data, "acompletion")
        kept = [t["function"]["name"] for t in data["tools"] if "function" in t]
        assert "get_weather" in kept and kept[-1] == "handoff" and len(kept) == 3
        assert kept == [n for n in TOOLS if n in kept] and data["tools"][-1] == HOSTED
        assert data["metadata"][PACK] == "support-bot" and data["metadata"][SEARCH_ID]
        # The session goes to the ranking too (its session signals), not only to the report.
        assert [rank.get("session_id") for rank in transport.ranks] == ["conversation-7"]

        response = await complete(openai_stub, **{**data, "model": "openai/gpt-5.4"})
    assert response.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert offered(openai_stub) == [kept]

    (turn_id,) = hook.reported
    stored = wait_for_turn(server, turn_id)
    assert (stored.request, stored.used_tool, stored.pack) == (
        WEATHER,
        "get_weather",
        "support-bot",
    )
    assert (stored.search_id, stored.search_status) == (data["metadata"][SEARCH_ID], "shown")
    assert (stored.outcome, stored.session_id) == (None, "conversation-7")


async def test_acompletion_is_narrowed_by_the_deployment_hook(
    server: LiveServer, openai_stub: Stub, callbacks: list[Any]
) -> None:
    """Without the proxy, `litellm.acompletion` with the callback registered narrows each call
    for its own question (pack from the caller's `toolselect_agent`) and reports the calls."""
    openai_stub.responder = chat_model()
    async with AsyncClient(server.url) as ts:
        hook = ToolselectCallback(ts, k=1)
        callbacks.append(hook)
        for question in (WEATHER, STOCKS):
            await complete(
                openai_stub,
                model="openai/gpt-5.4",
                messages=[{"role": "user", "content": question}],
                tools=FUNCTIONS,
                metadata={"toolselect_agent": "assistant-sdk"},
            )
    assert offered(openai_stub) == [["get_weather"], ["stock_quote"]]
    weather, stocks = (wait_for_turn(server, t) for t in hook.reported)
    assert (weather.used_tool, stocks.used_tool) == ("get_weather", "stock_quote")
    assert weather.pack == stocks.pack == "assistant-sdk"
    assert weather.search_id != stocks.search_id


async def test_the_request_is_reported_with_message_logging_off(
    server: LiveServer, openai_stub: Stub, callbacks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`turn_off_message_logging` blanks the messages other loggers see, not this callback's."""
    monkeypatch.setattr(litellm, "turn_off_message_logging", True)
    openai_stub.responder = chat_model("get_weather")
    async with AsyncClient(server.url) as ts:
        hook = ToolselectCallback(ts, k=1, agent="assistant-sdk")
        callbacks.append(hook)
        await complete(
            openai_stub,
            model="openai/gpt-5.4",
            messages=[{"role": "user", "content": WEATHER}],
            tools=FUNCTIONS,
        )
    stored = wait_for_turn(server, hook.reported[0])
    assert (stored.request, stored.used_tool) == (WEATHER, "get_weather")


async def test_a_follow_up_call_with_the_tool_result_reports_nothing(
    server: LiveServer, openai_stub: Stub, callbacks: list[Any]
) -> None:
    """The agent loop's second call (the tool's result, then the model's text) is narrowed for
    the same request and reports no turn: the model called no tool."""
    openai_stub.responder = chat_model()
    messages: list[Any] = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ]  # fmt: skip
    async with AsyncClient(server.url) as ts:
        hook = ToolselectCallback(ts, k=1, agent="assistant-sdk")
        callbacks.append(hook)
        response = await complete(
            openai_stub, model="openai/gpt-5.4", messages=messages, tools=FUNCTIONS
        )
    assert response.choices[0].message.content == "Done."
    assert offered(openai_stub) == [["get_weather"]]
    assert list(hook.reported) == []


async def test_requests_without_tools_or_user_words_are_left_alone(server: LiveServer) -> None:
    async with AsyncClient(server.url) as ts:
        hook = ToolselectCallback(ts, k=1)
        key = UserAPIKeyAuth(key_alias="support-bot")
        no_tools: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = await hook.async_pre_call_hook(key, DualCache(), dict(no_tools), "acompletion")
        assert answer == no_tools
        no_words: dict[str, Any] = {
            "model": "m",
            "messages": [{"role": "system", "content": "Be brief."}],
            "tools": FUNCTIONS,
        }
        answer = await hook.async_pre_call_hook(key, DualCache(), no_words, "acompletion")
        assert answer["tools"] == FUNCTIONS and PACK not in answer["metadata"]
        embedding: dict[str, Any] = {"model": "m", "input": "hi", "tools": FUNCTIONS}
        assert await hook.async_pre_call_hook(key, DualCache(), embedding, "aembedding") == {
            "model": "m", "input": "hi", "tools": FUNCTIONS
        }  # fmt: skip


def test_the_pack_follows_the_caller_the_key_the_team_then_the_model() -> None:
    key = UserAPIKeyAuth(key_alias="key-alias", team_alias="team-alias")
    team = UserAPIKeyAuth(team_alias="team-alias")
    assert agent_name({"toolselect_agent": "mine"}, key, "gpt") == "mine"
    assert agent_name({}, key, "gpt") == "key-alias"
    assert agent_name({}, team, "gpt") == "team-alias"
    assert agent_name({"user_api_key_team_alias": "from-proxy"}, None, "gpt") == "from-proxy"
    assert agent_name({}, None, "gpt-5.4") == "gpt-5.4"


def test_conversation_reads_user_and_assistant_text() -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": [{"type": "text", "text": "second question"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
    ]  # fmt: skip
    assert conversation(messages) == ("second question", ["first question", "an answer"])
    assert conversation(None) == ("", [])


async def test_a_stopped_toolselect_keeps_every_tool_and_logs_once(
    openai_stub: Stub, callbacks: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens: the model is offered every tool, the call succeeds, one line is
    logged."""
    openai_stub.responder = chat_model("get_weather")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        hook = ToolselectCallback(ts, k=1, agent="assistant-sdk")
        callbacks.append(hook)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            response = await complete(
                openai_stub,
                model="openai/gpt-5.4",
                messages=[{"role": "user", "content": WEATHER}],
                tools=FUNCTIONS,
            )
    assert response.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert offered(openai_stub) == [list(TOOLS)]
    degraded = [r for r in caplog.records if r.getMessage() == "toolselect_narrow_degraded"]
    assert len(degraded) == 1
    assert "Unreachable" in degraded[0].__dict__["error"]


async def test_a_silent_toolselect_costs_the_request_its_timeout(
    silent: str, openai_stub: Stub, callbacks: list[Any]
) -> None:
    openai_stub.responder = chat_model("get_weather")
    async with AsyncClient(silent, retries=0) as ts:
        hook = ToolselectCallback(ts, k=1, agent="assistant-sdk", timeout_s=0.2)
        callbacks.append(hook)
        started = time.perf_counter()
        await complete(
            openai_stub,
            model="openai/gpt-5.4",
            messages=[{"role": "user", "content": WEATHER}],
            tools=FUNCTIONS,
        )
        elapsed = time.perf_counter() - started
    assert offered(openai_stub) == [list(TOOLS)]
    assert 0.2 <= elapsed < 1.5


def test_import_leaves_the_model_stack_out() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    assert imported_heavy_modules("toolselect.integrations.litellm", env) == []


def test_the_readme_shows_the_example_verbatim() -> None:
    assert shown_in_readme("litellm_callback.py")


async def test_the_example_runs(server: LiveServer, openai_stub: Stub) -> None:
    """The README's `litellm.acompletion` with the callback, against a local Chat Completions
    stand-in: the model is offered 2 of the 3 tools, calls get_weather, and the server stores
    that turn with the ranking's search id."""
    openai_stub.responder = chat_model("get_weather")
    env = environment(
        TOOLSELECT_URL=server.url,
        OPENAI_BASE_URL=f"{openai_stub.url}/v1",
        OPENAI_API_KEY="test",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    out = await run_example("litellm_callback.py", env)
    found = re.fullmatch(r"\['get_weather'\]\nreported as turn (\w+)\n", out)
    assert found is not None, out
    (first,) = offered(openai_stub)
    assert len(first) == 2 and "get_weather" in first
    stored = await asyncio.to_thread(wait_for_turn, server, found.group(1))
    assert (stored.used_tool, stored.pack, stored.outcome) == ("get_weather", "assistant-ll", None)
    assert stored.search_id is not None and stored.search_status == "shown"


async def test_the_tool_tool_choice_forces_is_kept(server: LiveServer) -> None:
    """A request forcing `send_email` (Chat Completions' `tool_choice`) with k=1 on a weather
    question keeps it beside the ranked tool: narrowed away, the provider refuses the call."""
    forced = {"type": "function", "function": {"name": "send_email"}}
    async with AsyncClient(server.url) as ts:
        hook = ToolselectCallback(ts, k=1, agent="assistant-sdk")
        for choice in (forced, {"type": "function", "name": "send_email"}, "auto"):
            data: dict[str, Any] = {
                "model": "gpt-5.4",
                "messages": [{"role": "user", "content": WEATHER}],
                "tools": FUNCTIONS,
                "tool_choice": choice,
            }
            await hook.narrow(data)
            kept = [t["function"]["name"] for t in data["tools"]]
            assert kept == (["get_weather"] if choice == "auto" else ["send_email", "get_weather"])
            assert data["tool_choice"] == choice


async def test_the_narrowers_kept_are_bounded_the_least_recently_used_dropped(
    server: LiveServer,
) -> None:
    """Callers naming an agent of their own per request (`metadata["toolselect_agent"]`) keep
    at most `max_agents` narrowers, the least recently used dropped first (one was kept per
    name for ever: 2,000 names, 2,000 narrowers), and a dropped pack still narrows."""
    async with AsyncClient(server.url) as ts:
        assert ToolselectCallback(ts).max_agents == MAX_AGENTS
        hook = ToolselectCallback(ts, k=1, max_agents=2)
        for agent in ("lru-a", "lru-b", "lru-a", "lru-c", "lru-b"):
            data: dict[str, Any] = {
                "model": "gpt-5.4",
                "messages": [{"role": "user", "content": WEATHER}],
                "tools": list(FUNCTIONS),
                "metadata": {AGENT: agent},
            }
            await hook.async_pre_call_hook(UserAPIKeyAuth(), DualCache(), data, "acompletion")
            assert data["metadata"][PACK] == agent and data["metadata"][SEARCH_ID]
    assert list(hook.narrowers) == ["lru-c", "lru-b"]
