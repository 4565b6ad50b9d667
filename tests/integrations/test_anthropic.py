"""Claude tool search backed by toolselect, through the real `anthropic` SDK against a local
Messages API stub that searches, calls the tool it was shown, then ends the turn."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import pytest
from anthropic.types import Message, MessageParam, ToolResultBlockParam

from tests.client.conftest import Served
from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from tests.stubs import (
    ANTHROPIC_MODEL,
    Reply,
    Responder,
    Stub,
    anthropic_reply,
    claude_with_tool_search,
)
from toolselect.catalog import MAX_DESCRIPTION_BYTES
from toolselect.catalog import MAX_NAME_CHARS as MAX_TOOL_NAME_CHARS
from toolselect.client import AsyncClient
from toolselect.integrations.anthropic import SEARCH_TOOL, ToolSearch, Turn
from toolselect.integrations.sessions import fit_session_id
from toolselect.turns import MAX_NAME_CHARS

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


async def converse(
    claude: anthropic.AsyncAnthropic,
    search: ToolSearch,
    question: str,
    *,
    outcome: str | None = None,
    session_id: str | None = None,
) -> Turn:
    """The host loop an agent would write: search calls answered by toolselect, its own
    tools run locally, until Claude ends the turn (with `outcome`, when the host knows it)."""
    messages: list[MessageParam] = [{"role": "user", "content": question}]
    with search.turn(question, session_id=session_id) as turn:
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
        turn.outcome = outcome
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
        uploaded = await search.upload()
        assert uploaded is not False and uploaded.upserted == 3
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
    assert turn.search_id is None  # no search of toolselect's showed it
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


async def test_a_request_over_the_servers_text_limit_is_cut_not_refused(
    server: LiveServer,
) -> None:
    """A blank query searches with the user's request: one of 9,000 bytes of UTF-8 (over the
    server's 8 KiB) is cut to what the server takes, so the search is ranked, and the turn is
    reported with the cut request (whole, the server would refuse it)."""
    request = "明日のトリノの天気予報と雨の確率を教えて。" * 150
    search_call = {"type": "tool_use", "id": "a", "name": SEARCH_TOOL, "input": {"query": ""}}
    call = {"type": "tool_use", "id": "b", "name": "get_weather", "input": {"city": "Turin"}}
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG, k=2)
        await search.upload()
        with search.turn(request) as turn:
            await turn.answer(Message.model_validate(anthropic_reply([search_call])))
            await turn.answer(Message.model_validate(anthropic_reply([call])))
            turn.outcome = "ok"
    [found] = turn.searches
    assert found.search_id is not None and len(found.tools) == 2
    assert ts.observe_stats.sent == 1
    stored = wait_for_turn(server, turn.turn_id)
    assert request.startswith(stored.request) and stored.search_id == found.search_id


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


def claude_searching(searches: list[tuple[str, int]], picks: list[int | str]) -> Responder:
    """Plays Claude running `searches` (query, k) one after another, then calling `picks` in
    one message: an int is a place in the last search's references, a str a tool's name."""

    def respond(body: Any) -> Reply:
        rounds = sum(m["role"] == "user" and not isinstance(m["content"], str)
                     for m in body["messages"])  # fmt: skip
        if rounds < len(searches):
            query, k = searches[rounds]
            call = {"type": "tool_use", "id": f"toolu_search_{rounds}", "name": SEARCH_TOOL,
                    "input": {"query": query, "k": k}}  # fmt: skip
            return Reply(body=anthropic_reply([call]))
        if rounds == len(searches):
            refs = referenced(body["messages"][-1]["content"][0])
            calls = [
                {"type": "tool_use", "id": f"toolu_call_{i}", "input": {},
                 "name": refs[pick] if isinstance(pick, int) else pick}
                for i, pick in enumerate(picks)
            ]  # fmt: skip
            return Reply(body=anthropic_reply(calls))
        return Reply(body=anthropic_reply([{"type": "text", "text": "Done."}], "end_turn"))

    return respond


async def test_the_turn_reports_its_search_id_and_every_tool_called(
    served: Served, anthropic_stub: Stub
) -> None:
    """Claude picks the second of two revealed tools, then the first: the turn is stored with
    the search's id, the place of the first pick, both tools in order and the session; the
    host's `ok` makes the first pick a `usage` label of the request."""
    anthropic_stub.responder = claude_searching([("rain forecast for a city", 2)], [1, 0])
    async with AsyncClient(served.url) as ts:
        search = ToolSearch(ts, CATALOG, pack="claude")
        await search.upload()
        turn = await converse(
            sdk(anthropic_stub), search, QUESTION, outcome="ok", session_id="chat-1"
        )
    [found] = turn.searches
    assert found.search_id is not None
    assert turn.search_id == found.search_id
    assert turn.used_tools == [found.tools[1], found.tools[0]]

    stored = await served.turn(turn.turn_id)
    assert (stored.search_id, stored.search_status) == (found.search_id, "shown")
    assert (stored.shown_position, stored.shown_k) == (2, 2)
    assert stored.used_tools == (found.tools[1], found.tools[0])
    assert (stored.outcome, stored.session_id, stored.pack) == ("ok", "chat-1", "claude")
    exemplars = await served.service.catalog.exemplars_of(found.tools[1])
    assert [(e.query, e.tier) for e in exemplars] == [(QUESTION, "usage")]


async def test_a_tool_claude_was_not_shown_is_reported_so(
    served: Served, anthropic_stub: Stub
) -> None:
    """Claude calls a tool its search did not reveal: the turn is `not_shown`, and without an
    outcome that tool labels nothing."""
    anthropic_stub.responder = claude_searching([("rain forecast for a city", 1)], ["stock_quote"])
    async with AsyncClient(served.url) as ts:
        search = ToolSearch(ts, CATALOG, pack="claude")
        await search.upload()
        turn = await converse(sdk(anthropic_stub), search, QUESTION)
    assert turn.searches[0].tools == ["get_weather"]
    stored = await served.turn(turn.turn_id)
    assert (stored.search_id, stored.search_status) == (turn.searches[0].search_id, "not_shown")
    assert (stored.shown_position, stored.shown_k) == (None, 1)
    assert await served.service.catalog.exemplars_of("stock_quote") == []


async def test_the_search_reported_is_the_latest_that_showed_the_tool(
    server: LiveServer, anthropic_stub: Stub
) -> None:
    """Claude searched twice and called a tool only the first search revealed: the turn
    reports the first search's id, where the tool was shown."""
    anthropic_stub.responder = claude_searching(
        [("rain forecast for a city", 1), ("send an email to a recipient", 1)], ["get_weather"]
    )
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG, pack="claude")
        await search.upload()
        turn = await converse(sdk(anthropic_stub), search, QUESTION)
    first, second = turn.searches
    assert (first.tools, second.tools) == (["get_weather"], ["send_email"])
    assert turn.search_id == first.search_id != second.search_id
    stored = wait_for_turn(server, turn.turn_id)
    assert (stored.search_id, stored.search_status, stored.shown_position) == (
        first.search_id,
        "shown",
        1,
    )


async def test_an_upload_with_toolselect_down_degrades_and_the_search_reveals_the_catalog(
    anthropic_stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    """`upload()` with toolselect unreachable logs one line and answers False instead of raising
    `Unreachable` into the host's start-up; the turn's search then reveals the whole catalog."""
    anthropic_stub.responder = claude_with_tool_search(SEARCH_TOOL, "rain tomorrow")
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=0) as ts:
        search = ToolSearch(ts, CATALOG)
        with caplog.at_level(logging.WARNING, logger="toolselect.integrations"):
            uploaded = await search.upload()
            turn = await converse(sdk(anthropic_stub), search, QUESTION)
    assert uploaded is False
    refs = anthropic_stub.received[1].body["messages"][-1]["content"][0]["content"]
    assert [r["tool_name"] for r in refs] == [t["name"] for t in CATALOG]
    assert turn.used_tool == "get_weather"
    mine = [r for r in caplog.records if r.name == "toolselect.integrations"]
    assert [r.getMessage() for r in mine] == [
        "toolselect_upload_failed",
        "toolselect_search_degraded",
    ]
    assert "Unreachable" in mine[0].__dict__["error"]


async def test_an_upload_over_the_servers_limits_is_clipped_and_nothing_becomes_unfindable(
    server: LiveServer,
) -> None:
    """A catalog version adding a tool with a 9 KiB description (an MCP server's, say) and one
    whose name is over the server's limit: the description is clipped and the new tools are
    findable; the one the server cannot hold is revealed by every search, unranked (the one
    PUT was refused whole: `upload()` answered False and the new tools were never found)."""
    long_name = "n" * (MAX_TOOL_NAME_CHARS + 45)
    catalog = [
        *CATALOG,
        {"name": "jira_search", "description": "Search Jira issues with JQL. " + "JQL " * 2300},
        {"name": long_name, "description": "A tool whose name is over the limit."},
    ]
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, catalog, k=1, pack="claude-limits")
        uploaded = await search.upload()
        found = await search.find("search the Jira issues with a JQL query", 1)
        stored = await ts.tools.get("jira_search")
    assert uploaded is not False and uploaded.upserted == 4
    assert found.search_id is not None
    assert found.tools == ["jira_search", long_name]
    assert len(stored.description.encode()) == MAX_DESCRIPTION_BYTES


async def test_a_tool_the_server_lacks_is_revealed_beside_the_ranked_ones(
    server: LiveServer,
) -> None:
    """`stock_quote` deleted on the server after the upload: a search asking for the whole
    catalog is ranked what the server holds and reveals `stock_quote` after them (it was left
    out, findable by no search until the catalog went again)."""
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG, pack="claude-lost")
        assert await search.upload()
        assert await ts.tools.delete("stock_quote")
        found = await search.find("latest price of the ACME stock", 3)
    assert found.search_id is not None
    assert sorted(found.tools[:2]) == ["get_weather", "send_email"]
    assert found.tools[2:] == ["stock_quote"]


async def test_a_session_id_over_the_servers_limit_keeps_the_search_and_the_turn(
    server: LiveServer, anthropic_stub: Stub
) -> None:
    """A conversation id over the server's limit goes as its stable short stand-in with the
    searches and the turn (sent whole, the search degraded and the turn was lost)."""
    anthropic_stub.responder = claude_with_tool_search(SEARCH_TOOL, "rain forecast for a city")
    session = "workspace-9/" + "s" * MAX_NAME_CHARS
    async with AsyncClient(server.url) as ts:
        search = ToolSearch(ts, CATALOG, k=2, pack="claude-long-session")
        await search.upload()
        turn = await converse(sdk(anthropic_stub), search, QUESTION, session_id=session)
    assert turn.searches[0].search_id is not None
    stored = wait_for_turn(server, turn.turn_id)
    assert (stored.used_tool, stored.session_id) == ("get_weather", fit_session_id(session))
