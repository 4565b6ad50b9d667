"""Search ids through the Python client: `rank` and `select` answer one, and a turn observed with
it is stored linked to what was shown (SQLite, then the real Neo4j)."""

from __future__ import annotations

import uuid

from tests.client.conftest import Served
from tests.live import LiveServer, wait_for_turn
from toolselect.api import models as m
from toolselect.client import AsyncClient, Client

WEATHER = "what's the weather in Turin tomorrow, rain or wind?"


def turn_id() -> str:
    return uuid.uuid4().hex


def names(ranking: m.RankResponse) -> list[str]:
    return [r.tool for r in ranking.results]


async def test_rank_answers_a_search_id_and_the_turn_stores_where_its_tool_stood(
    served: Served,
) -> None:
    """The used tool's 1-based place among the `k` shown is stored with the turn's search id,
    with its session id."""
    tid = turn_id()
    async with AsyncClient(served.url) as ts:
        ranking = await ts.rank(WEATHER, k=3)
        second = ranking.results[1].tool
        ts.observe(WEATHER, second, turn_id=tid, search_id=ranking.search_id, session_id="s-1")
    assert ranking.search_id
    assert ts.observe_stats.sent == 1
    stored = await served.turn(tid)
    assert (stored.search_id, stored.search_status) == (ranking.search_id, "shown")
    assert (stored.shown_position, stored.shown_k) == (2, 3)
    assert (stored.used_tool, stored.session_id) == (second, "s-1")


async def test_a_tool_not_shown_and_a_made_up_search_id(served: Served) -> None:
    """A tool outside the ranking is `not_shown`; an id the server never issued is `unknown`,
    and that turn is still accepted."""
    hidden, made_up = turn_id(), turn_id()
    async with AsyncClient(served.url) as ts:
        ranking = await ts.rank(WEATHER, k=2)
        outside = next(
            t for t in ("fs_read", "shell_exec", "stock_quote") if t not in names(ranking)
        )
        ts.observe(WEATHER, outside, turn_id=hidden, search_id=ranking.search_id)
        ts.observe(WEATHER, "get_weather", turn_id=made_up, search_id="no-such-search")
    assert (ts.observe_stats.sent, ts.observe_stats.invalid) == (2, 0)
    stored = await served.turn(hidden)
    assert (stored.search_status, stored.shown_position, stored.shown_k) == ("not_shown", None, 2)
    stored = await served.turn(made_up)
    assert (stored.search_id, stored.search_status) == ("no-such-search", "unknown")
    assert stored.shown_position is None


async def test_used_tools_are_stored_in_order(served: Served) -> None:
    """A turn that used several tools lists them in order; without `used_tool` the first one
    is the used tool."""
    tid = turn_id()
    used = ["web_search", "get_weather", "send_email"]
    async with AsyncClient(served.url) as ts:
        ranking = await ts.rank(WEATHER, k=8)
        ts.observe(WEATHER, turn_id=tid, used_tools=used, search_id=ranking.search_id)
    stored = await served.turn(tid)
    assert stored.used_tools == tuple(used)
    assert stored.used_tool == "web_search"
    assert stored.shown_position == names(ranking).index("web_search") + 1


async def test_a_tool_that_worked_becomes_a_usage_exemplar(served: Served) -> None:
    """`ok` on a shown catalog tool labels the request with it, tier `usage`, listed by
    `GET /v1/tools/{name}/exemplars`."""
    request = "will it be windy in Genoa on Saturday?"
    tid = turn_id()
    async with AsyncClient(served.url) as ts:
        ranking = await ts.rank(request, k=3)
        used = ranking.results[0].tool
        ts.observe(request, used, turn_id=tid, search_id=ranking.search_id, outcome="ok")
    stored = await served.turn(tid)
    async with AsyncClient(served.url) as ts:
        exemplars = await ts.tools.exemplars(used)
    assert (stored.tier, stored.label) == ("usage", used)
    assert [(e.query, e.tier) for e in exemplars] == [(request, "usage")]


async def test_a_turn_breaking_the_used_tools_rule_is_refused_alone(served: Served) -> None:
    """A used tool outside `used_tools`, or no used tool at all, is counted `invalid` by the
    client; the valid turn buffered beside them still reaches the server (the server refuses a
    whole batch for one such turn)."""
    tid = turn_id()
    async with AsyncClient(served.url) as ts:
        ts.observe(WEATHER, "send_email", used_tools=["get_weather", "web_search"])
        ts.observe(WEATHER)
        ts.observe(WEATHER, "get_weather", turn_id=tid, used_tools=["web_search", "get_weather"])
    assert (ts.observe_stats.invalid, ts.observe_stats.sent, ts.observe_stats.failed) == (2, 1, 0)
    stored = await served.turn(tid)
    assert (stored.used_tool, stored.used_tools) == ("get_weather", ("web_search", "get_weather"))


def test_sync_select_and_observe_carry_the_search_id(server: LiveServer) -> None:
    """The blocking client: `select` answers a search id and `observe` sends it back with the
    used tools and the session."""
    query = m.PromptKitQuery(Text="send the report to Marco by email", K=2)
    candidates = [
        m.PromptKitCandidate(ID="send_email", Name="send_email", Description="Send an email"),
        m.PromptKitCandidate(ID="fs_read", Name="fs_read", Description="Read a local file"),
    ]
    tid = turn_id()
    with Client(server.url) as ts:
        answer = ts.select(query, candidates)
        ts.observe(
            "send the report to Marco by email",
            "fs_read",
            turn_id=tid,
            search_id=answer.search_id,
            used_tools=["fs_read", "send_email"],
            session_id="s-sync",
        )
    assert answer.search_id
    assert answer.selected == ["send_email", "fs_read"]
    stored = wait_for_turn(server, tid)
    assert (stored.search_status, stored.shown_position, stored.shown_k) == ("shown", 2, 2)
    assert (stored.used_tools, stored.session_id) == (("fs_read", "send_email"), "s-sync")
