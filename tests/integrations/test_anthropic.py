"""Claude tool search backed by toolselect, through the real `anthropic` SDK against a local
Messages API stub that searches, calls the tool it was shown, then ends the turn."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import pytest
from anthropic.types import Message, MessageParam, ToolResultBlockParam

from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from tests.stubs import ANTHROPIC_MODEL, Stub, anthropic_reply, claude_with_tool_search
from toolselect.client import AsyncClient
from toolselect.integrations.anthropic import SEARCH_TOOL, ToolSearch, Turn

CATALOG: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather and forecast for a city: temperature, rain, wind.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "send_email",
        "description": "Send an email message to a recipient with a subject and body.",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
    },
    {
        "name": "stock_quote",
        "description": "Latest stock price quote for a ticker symbol on the market.",
        "inputSchema": {"type": "object", "properties": {"ticker": {"type": "string"}}},
    },
]
QUESTION = "Will it rain in Turin tomorrow?"


async def converse(claude: anthropic.AsyncAnthropic, search: ToolSearch, question: str) -> Turn:
    """The host loop an agent would write: search calls answered by toolselect, its own
    tools run locally, until Claude ends the turn."""
    messages: list[MessageParam] = [{"role": "user", "content": question}]
    with search.turn(question) as turn:
        for _ in range(5):
            reply = await claude.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=512, tools=search.tools(), messages=messages
            )
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use":
                break
            results: list[Any] = await turn.answer(reply)
            results += [
                {"type": "tool_result", "tool_use_id": call.id, "content": f"{call.name}: ok"}
                for call in search.tool_calls(reply)
            ]
            messages.append({"role": "user", "content": results})
    return turn


def referenced(result: ToolResultBlockParam) -> list[str]:
    """The tool names a search result references."""
    content: Any = result.get("content")
    return [block["tool_name"] for block in content]


def sdk(stub: Stub) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="test-key", base_url=stub.url, max_retries=0)


async def test_search_reveals_ranked_tools_and_the_turn_is_observed(
    server: LiveServer, anthropic_stub: Stub
) -> None:
    """Claude gets deferred tools, its search is answered with tool_reference blocks ranked by
    toolselect, and the tool it then calls is stored by the server as the turn's used tool."""
    anthropic_stub.responder = claude_with_tool_search(SEARCH_TOOL, "rain forecast for a city")
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG, k=2, pack="claude")
        assert (await search.upload()).upserted == 3
        turn = await converse(sdk(anthropic_stub), search, QUESTION)
    assert turn.used_tool == "get_weather"

    first, second, third = (r.body for r in anthropic_stub.received)
    sent = {t["name"]: t for t in first["tools"]}
    assert "defer_loading" not in sent[SEARCH_TOOL]
    assert all(sent[t["name"]]["defer_loading"] is True for t in CATALOG)
    assert sent["stock_quote"]["input_schema"] == CATALOG[2]["inputSchema"]

    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_search_1"
    assert [b["type"] for b in result["content"]] == ["tool_reference"] * 2
    assert result["content"][0] == {"type": "tool_reference", "tool_name": "get_weather"}
    assert third["messages"][-1]["content"][0]["tool_use_id"] == "toolu_call_1"

    stored = wait_for_turn(server, turn.turn_id)
    assert (stored.request, stored.used_tool, stored.pack) == (QUESTION, "get_weather", "claude")


async def test_toolselect_down_reveals_the_catalog_and_logs_once(
    anthropic_stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    """With toolselect unreachable the search answers references to the first
    `fallback_limit` tools, logs one degraded line, and the turn still completes."""
    anthropic_stub.responder = claude_with_tool_search(SEARCH_TOOL, "rain tomorrow")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        search = ToolSearch(ts, CATALOG, fallback_limit=2)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            turn = await converse(sdk(anthropic_stub), search, QUESTION)
    refs = anthropic_stub.received[1].body["messages"][-1]["content"][0]["content"]
    assert [r["tool_name"] for r in refs] == ["get_weather", "send_email"]
    assert turn.used_tool == "get_weather"
    degraded = [r for r in caplog.records if r.getMessage() == "toolselect_search_degraded"]
    assert len(degraded) == 1
    assert "Unreachable" in degraded[0].__dict__["error"]


async def test_a_catalog_toolselect_does_not_know_degrades_to_all_tools(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A catalog never uploaded ranks to nothing, so every catalog tool is revealed instead."""
    message = Message.model_validate(
        anthropic_reply(
            [{"type": "tool_use", "id": "toolu_1", "name": SEARCH_TOOL, "input": {"query": "x"}}]
        )
    )
    unknown = [{**t, "name": f"other_{t['name']}"} for t in CATALOG]
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, unknown)
        with caplog.at_level(logging.WARNING):
            [result] = await search.turn("anything").answer(message)
    assert referenced(result) == [t["name"] for t in unknown]
    assert any(r.getMessage() == "toolselect_search_degraded" for r in caplog.records)


async def test_search_arguments_are_bounded_and_defaulted(server: LiveServer) -> None:
    """A blank query falls back to the user's request; `k` is clamped to 1..20."""
    blocks = [
        {"type": "tool_use", "id": "a", "name": SEARCH_TOOL, "input": {"query": " ", "k": 1}},
        {"type": "tool_use", "id": "b", "name": SEARCH_TOOL, "input": {"query": "email", "k": 0}},
        {"type": "tool_use", "id": "c", "name": SEARCH_TOOL, "input": {"query": "x", "k": 99}},
    ]
    message = Message.model_validate(anthropic_reply(blocks))
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG)
        await search.upload()
        a, b, c = await search.turn(QUESTION).answer(message)
    assert referenced(a) == ["get_weather"]
    assert referenced(b) == ["send_email"]
    assert len(referenced(c)) == 3


def test_a_search_tool_named_like_a_catalog_tool_is_refused() -> None:
    """The search tool's name must not shadow a catalog tool."""
    with pytest.raises(ValueError, match="get_weather"):
        ToolSearch(AsyncClient("http://127.0.0.1:1"), CATALOG, name="get_weather")


async def test_a_turn_without_tool_calls_reports_nothing(server: LiveServer) -> None:
    """A turn Claude answers in text alone sends no observation."""
    message = Message.model_validate(anthropic_reply([{"type": "text", "text": "Hi"}], "end_turn"))
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG)
        with search.turn("hello") as turn:
            assert await turn.answer(message) == []
        assert ts.observe_stats.pending == 0
    assert turn.used_tool is None
