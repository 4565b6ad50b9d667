"""`GET /v1/analytics` and `/v1/analytics/{name}` over the real app, on both stores."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aiohttp.test_utils import TestClient

from tests.services import ClientFactory, ServiceFactory
from tests.stubs import Reply, Stub, anthropic_message
from toolselect.analytics.registry import NAMES
from toolselect.service import Service

Client = TestClient[Any, Any]


async def test_lists_the_named_analyses(client: Client) -> None:
    """The index lists every analysis the CLI knows, then the learning loop's fit."""
    resp = await client.get("/v1/analytics")
    assert resp.status == 200
    assert (await resp.json())["analyses"] == [*NAMES, "learning"]


async def test_online_recall_follows_the_search_ids_of_observed_turns(
    client: Client, service: Service
) -> None:
    """Turns reported with the search_id of a ranking land in online_recall by where their used
    tool stood: shown, not shown (a fallback tool), of another pack, or an id never issued."""
    assert "online_recall" in (await (await client.get("/v1/analytics")).json())["analyses"]

    async def search(query: str, tools: list[str] | None = None, **extra: Any) -> str:
        body: dict[str, Any] = {"query": query, "k": 2, **extra}
        if tools is not None:
            body["tools"] = tools
        resp = await client.post("/v1/rank", json=body)
        assert resp.status == 200
        search_id: str = (await resp.json())["search_id"]
        return search_id

    turns = [
        {"request": "weather in Turin", "used_tool": "get_weather", "outcome": "ok",
         "search_id": await search("weather in Turin", ["get_weather", "send_email"])},
        {"request": "send an email to Marco", "used_tool": "shell_exec",
         "search_id": await search("send an email to Marco", ["web_search", "stock_quote"])},
        {"request": "translate hello", "used_tool": "translate_text", "pack": "other",
         "search_id": await search("translate hello", pack="assistant")},
        {"request": "stock price of ACME", "used_tool": "stock_quote",
         "search_id": "never-issued-here"},
        {"request": "no search reported", "used_tool": "web_search"},
    ]  # fmt: skip
    before = datetime.now(UTC).date().isoformat()
    resp = await client.post("/v1/observe/batch", json={"turns": turns})
    assert resp.status == 202
    assert await service.learner.drain(60.0)
    body = await (await client.get("/v1/analytics/online_recall")).json()
    after = datetime.now(UTC).date().isoformat()
    assert body["columns"] == [
        "day", "pack", "used_tool", "turns", "shown", "recall",
        "fallbacks", "ignored", "unknown_ids", "other_pack",
    ]  # fmt: skip
    assert {row[0] for row in body["rows"]} <= {before, after}
    assert [row[1:] for row in body["rows"]] == [
        ["other", "translate_text", 0, 0, None, 0, 0, 0, 1],
        [None, "get_weather", 1, 1, 1.0, 0, 0, 0, 0],
        [None, "shell_exec", 1, 0, 0.0, 1, 0, 0, 0],
        [None, "stock_quote", 0, 0, None, 0, 0, 1, 0],
    ]


async def test_misroute_rate_counts_observed_turns(client: Client, service: Service) -> None:
    """Observed turns show up in misroute_rate with their flags, through the HTTP surface."""
    turns = [
        {"request": "send an email message to Marco", "used_tool": "shell_exec", "turn_id": "a"},
        {"request": "weather in Turin", "used_tool": "get_weather", "turn_id": "b"},
    ]
    resp = await client.post("/v1/observe/batch", json={"turns": turns})
    assert resp.status == 202
    assert await service.learner.drain(60.0)  # a wait, not a limit: a cold Neo4j took 8.5 s
    resp = await client.get("/v1/analytics/misroute_rate")
    body = await resp.json()
    assert body["name"] == "misroute_rate"
    assert body["columns"] == ["used_tool", "turns", "flagged", "rate", "top_reason"]
    assert body["rows"] == [["shell_exec", 1, 1, 1.0, "fallback"], ["get_weather", 1, 0, 0.0, None]]
    later = await client.get("/v1/analytics/misroute_rate", params={"since": "2999-01-01"})
    assert (await later.json())["rows"] == []


async def test_bad_since_and_unknown_name(client: Client) -> None:
    """A malformed `since` answers 422 naming it; an unknown analysis answers 404."""
    resp = await client.get("/v1/analytics/drift", params={"since": "yesterday"})
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "query.since"
    resp = await client.get("/v1/analytics/nope")
    assert resp.status == 404


async def test_since_given_twice_or_to_the_learning_fit_is_refused(client: Client) -> None:
    """Two `since` values are not a window (the first was taken silently), and the learning fit
    has none (any value was ignored, where the CLI refuses --since): 422 naming it."""
    twice = await client.get("/v1/analytics/drift?since=2026-11-26&since=2099-01-01")
    learning = await client.get("/v1/analytics/learning", params={"since": "garbage"})
    for resp in (twice, learning):
        assert resp.status == 422
        error = (await resp.json())["error"]
        assert (error["code"], error["field"]) == ("invalid_request", "query.since")
    assert (await client.get("/v1/analytics/learning")).status == 200


async def test_a_fallback_tool_under_two_names_is_one_row(
    services: ServiceFactory, aiohttp_client: ClientFactory, anthropic_stub: Stub
) -> None:
    """A fallback tool the catalog lacks, reported as `shell_exec` and as `mcp__shell_exec`, is
    one tool to the detector (`names.same_tool`), so it is one row of each analysis, under its
    configured name: two rows split its mis-route count, its confusions and its recall."""
    truth = {"mail Ada": "send_email", "price of ACME": "stock_quote", "mail Bo": "send_email"}

    def teacher(body: Any) -> Reply:
        prompt = json.dumps(body["messages"])
        return Reply(body=anthropic_message(next(t for q, t in truth.items() if q in prompt)))

    anthropic_stub.responder = teacher
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
        teacher_share=1.0,
    )
    catalog = {"tools": [{"name": "send_email"}, {"name": "web_search"}, {"name": "stock_quote"}]}
    assert (await client.put("/v1/tools", json=catalog)).status == 200
    ranked = await client.post("/v1/rank", json={"query": "price of ACME", "k": 1})
    search_id = (await ranked.json())["search_id"]
    turns = [
        {"request": "mail Ada", "used_tool": "shell_exec", "outcome": "error"},
        {"request": "price of ACME", "used_tool": "mcp__shell_exec", "search_id": search_id},
        {"request": "mail Bo", "used_tool": "mcp__shell_exec", "outcome": "ok"},
        {"request": "find owls", "used_tool": "my_shell_exec"},  # another tool: no fallback
    ]
    for turn in turns:
        assert (await client.post("/v1/observe", json=turn)).status == 202
    assert await service.learner.drain(60.0)

    async def rows(name: str) -> list[Any]:
        resp = await client.get(f"/v1/analytics/{name}")
        assert resp.status == 200
        found: list[Any] = (await resp.json())["rows"]
        return found

    misroutes = {row[0]: row[1:3] for row in await rows("misroute_rate")}
    assert misroutes == {"shell_exec": [3, 3], "my_shell_exec": [1, 0]}
    assert await rows("confusions") == [
        ["shell_exec", "send_email", 2],
        ["shell_exec", "stock_quote", 1],
    ]
    assert [row[2:5] for row in await rows("online_recall")] == [["shell_exec", 1, 0]]


async def test_a_query_parameter_other_than_since_is_refused(client: Client) -> None:
    """An analysis reads only `since`: a misspelt `sinc` or a `pack` it has no scope for was
    ignored, answering 200 with every day's or every pack's rows as if narrowed; 422 naming it."""
    for query in ("sinc=2999-01-01", "pack=web", "since=2999-01-01&until=2999-02-01"):
        resp = await client.get(f"/v1/analytics/misroute_rate?{query}")
        assert resp.status == 422, query
        error = (await resp.json())["error"]
        wrong = query.rsplit("&", 1)[-1].split("=")[0]
        assert (error["code"], error["field"]) == ("invalid_request", f"query.{wrong}")
        assert error["message"] == f"expected no query parameter but since, got '{wrong}'"
    assert (await client.get("/v1/analytics/misroute_rate?since=2999-01-01")).status == 200
