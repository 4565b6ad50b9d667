"""`GET /v1/analytics` and `/v1/analytics/{name}` over the real app, on both stores."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from toolselect.analytics.registry import NAMES
from toolselect.service import Service

Client = TestClient[Any, Any]


async def test_lists_the_named_analyses(client: Client) -> None:
    """The index lists every analysis the CLI knows, then the learning loop's fit."""
    resp = await client.get("/v1/analytics")
    assert resp.status == 200
    assert (await resp.json())["analyses"] == [*NAMES, "learning"]


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
    assert (await resp.json())["error"]["field"] == "since"
    resp = await client.get("/v1/analytics/nope")
    assert resp.status == 404
