"""MCP `search_tools` with the conversation (`session_id`, `previous_tools`, `context`,
`companions`), through the SDK's own client: companions and the session prior from pinned
signals on a started service (both stores, the server in-process), and on `toolselect mcp` as a
host runs it (both transports) the validation and the answers of a store without sessions."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client

from tests.api.conftest import HAND_CATALOG
from tests.api.conversation import WEATHER, WEATHER_COMPANION, pin
from tests.mcp.conftest import Connect
from tests.mcp.test_server import text
from tests.services import ServiceFactory
from toolselect.learn.session_fit import SessionWeights
from toolselect.mcp_server import build_server

CONVERSATION = ("session_id", "previous_tools", "context", "companions")


async def test_search_tools_answers_companions_and_takes_the_session(
    services: ServiceFactory,
) -> None:
    """`search_tools` lists the conversation parameters; asked for companions it answers them
    apart with `tool`, `score` and `with`, counted as shown for its search id; a turn reported
    with `session_id` and `used_tools` gives the session's previous tools to the next search."""
    service = await services.start(wait_for_store=True)
    await service.catalog.upsert_tools(HAND_CATALOG, pack="assistant")
    await pin(service, SessionWeights(prior=1.0, companion_share=0.5))
    async with Client(build_server(service.settings, service)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(CONVERSATION) <= set(listed["search_tools"].input_schema["properties"])
        assert "companions" in (listed["search_tools"].output_schema or {})["properties"]

        found = await client.call_tool("search_tools", {"query": WEATHER, "k": 1, "companions": 2})
        assert not found.is_error, text(found)
        body = found.structured_content
        assert body is not None
        assert [t["name"] for t in body["tools"]] == ["get_weather"]
        assert body["companions"] == [WEATHER_COMPANION]
        assert json.loads(text(found)) == body
        plain = await client.call_tool("search_tools", {"query": WEATHER, "k": 1})
        assert (plain.structured_content or {})["companions"] is None

        report = {"request": WEATHER, "used_tool": "web_search", "turn_id": "mcp-companion",
                  "search_id": body["search_id"], "outcome": "ok", "session_id": "mcp-1",
                  "used_tools": ["web_search", "send_email"]}  # fmt: skip
        reported = await client.call_tool("report_turn", report)
        assert reported.structured_content == {"queued": True, "reason": None}
        assert service.sessions.previous("mcp-1") == ("web_search", "send_email")

        vague = {"query": "set it up for tomorrow at ten", "k": 2}
        alone = await client.call_tool("search_tools", vague)
        after = await client.call_tool("search_tools", {**vague, "session_id": "mcp-1"})
    assert (alone.structured_content or {})["tools"][0]["name"] != "create_calendar_event"
    assert (after.structured_content or {})["tools"][0]["name"] == "create_calendar_event"
    turn = await service.learning.turn_when_done("mcp-companion", 15.0)
    assert turn is not None
    assert (turn.search_status, turn.shown_position) == ("shown", 2)


async def test_a_blank_session_is_a_tool_error(services: ServiceFactory) -> None:
    """`search_tools` and `report_turn` refuse a blank `session_id` (`" "`) as `/v1/rank` and
    `/v1/observe` do, with their message; the refused turn is not queued. `""` is no session."""
    service = await services.start(wait_for_store=True)
    await service.catalog.upsert_tools(HAND_CATALOG)
    async with Client(build_server(service.settings, service)) as client:
        search = await client.call_tool("search_tools", {"query": WEATHER, "session_id": " "})
        turn = {"request": WEATHER, "used_tool": "get_weather", "turn_id": "blank"}
        reported = await client.call_tool("report_turn", {**turn, "session_id": " "})
        none = await client.call_tool("report_turn", {**turn, "turn_id": "none", "session_id": ""})
    for refused in (search, reported):
        assert refused.is_error, text(refused)
        assert "expected a session id that is not blank, got ' '" in text(refused)
    assert none.structured_content == {"queued": True, "reason": None}
    stored = await service.learning.turn_when_done("none", 15.0)
    assert stored is not None and stored.session_id is None
    assert await service.store.get_turn("blank") is None


TOO_LONG = "x" * (8 << 10) + "y"
BAD_SEARCHES: list[tuple[dict[str, Any], str]] = [
    ({"companions": 11}, "expected companions in 0..10, got 11"),
    ({"companions": -2}, "expected companions in 0..10, got -2"),
    ({"context": ["hello"] * 51}, "expected at most 50 context messages, got 51"),
    ({"context": ["fine", TOO_LONG]}, "expected context[1] of at most 8192 bytes, got 8193"),
    ({"context": ["   "]}, "expected a non-empty context[0]"),
    ({"previous_tools": ["t"] * 65}, "expected at most 64 previous_tools, got 65"),
    ({"context": "not a list"}, "expected context: input should be a valid list"),
    ({"session_id": " "}, "expected a session id that is not blank, got ' '"),
]


async def test_bad_conversation_arguments_are_tool_errors(connect: Connect) -> None:
    """Each bad conversation argument comes back as isError naming the field and its rule, as
    `/v1/rank` words it; a store without sessions then answers the conversation fields exactly
    as the message alone (same tools, same scores), with no companion."""
    async with connect() as client:
        for arguments, message in BAD_SEARCHES:
            result = await client.call_tool("search_tools", {"query": "weather", **arguments})
            assert result.is_error, arguments
            assert message in text(result), (arguments, text(result))
        for query in ("send the quarterly report to Marco by email", "weather in Oslo"):
            alone = await client.call_tool("search_tools", {"query": query, "k": 3})
            asked = await client.call_tool(
                "search_tools",
                {"query": query, "k": 3, "session_id": "chat-1", "previous_tools": ["web_search"],
                 "context": ["will it rain in Oslo tomorrow?"], "companions": True},
            )  # fmt: skip
            one, other = alone.structured_content, asked.structured_content
            assert one is not None and other is not None, text(asked)
            assert (other["tools"], other["margin"]) == (one["tools"], one["margin"])
            assert other["companions"] == []
