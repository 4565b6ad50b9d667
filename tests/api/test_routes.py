"""The routes of API v1 over a real socket: ranking, selection, catalog, operations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from toolselect.service import Service
from toolselect.service.ranking import CANDIDATE_CACHE_SIZE as CACHE
from toolselect.service.searches import decode

Client = TestClient[Any, Any]


async def test_rank_puts_the_obvious_tool_first(client: Client) -> None:
    """A weather question ranks get_weather first, scores descending, margin = top1 - top2."""
    resp = await client.post("/v1/rank", json={"query": "what's the weather in Turin tomorrow?"})
    assert resp.status == 200
    body = await resp.json()
    tools = [r["tool"] for r in body["results"]]
    scores = [r["score"] for r in body["results"]]
    assert tools[0] == "get_weather"
    assert len(tools) == 5
    assert scores == sorted(scores, reverse=True)
    assert abs(body["margin"] - (scores[0] - scores[1])) < 1e-9
    assert body["embedder"] == "hashing-v1"
    assert body["took_ms"] >= 0


async def test_rank_restricted_to_names(client: Client) -> None:
    """`tools` restricts ranking to those names; unknown names are ignored."""
    resp = await client.post(
        "/v1/rank",
        json={"query": "weather in Rome", "tools": ["web_search", "send_email", "nope"], "k": 5},
    )
    body = await resp.json()
    assert {r["tool"] for r in body["results"]} == {"web_search", "send_email"}


async def test_rank_restricted_to_pack(client: Client) -> None:
    """`pack` restricts ranking to the pack's tools."""
    resp = await client.put(
        "/v1/tools",
        json={"tools": [{"name": "get_forecast", "description": "Weather forecast"}], "pack": "wx"},
    )
    assert resp.status == 200
    resp = await client.post("/v1/rank", json={"query": "send an email", "pack": "wx"})
    body = await resp.json()
    assert [r["tool"] for r in body["results"]] == ["get_forecast"]
    assert body["margin"] == body["results"][0]["score"]


async def test_rank_refuses_a_pack_no_upload_could_name(client: Client) -> None:
    """A blank or over-long pack is a mistake (no upload may name one), not an empty answer;
    "" is no pack, as in an upload."""
    for pack in ("   ", "p" * 257):
        resp = await client.post("/v1/rank", json={"query": "weather", "pack": pack})
        assert resp.status == 422
        assert (await resp.json())["error"]["field"] == "pack"


async def test_rank_on_empty_pack_is_empty(client: Client) -> None:
    """A pack with no tools answers 200 with no results and margin 0."""
    resp = await client.post("/v1/rank", json={"query": "anything", "pack": "no-such-pack"})
    assert resp.status == 200
    body = await resp.json()
    assert body == {
        "results": [],
        "margin": 0.0,
        "embedder": "hashing-v1",
        "took_ms": body["took_ms"],
        "search_id": body["search_id"],
    }
    assert decode(body["search_id"]) is not None


async def test_select_returns_only_candidate_ids(client: Client) -> None:
    """/v1/select answers only candidate IDs, at most K, unknown candidates ranked by text."""
    payload = {
        "query": {"Text": "send the report to Marco by email", "Kind": "tool", "K": 2},
        "candidates": [
            {"ID": "send_email", "Name": "send_email", "Description": "Send an email"},
            {"ID": "get_weather", "Name": "get_weather", "Description": "Weather"},
            {"ID": "fax_document", "Name": "fax_document", "Description": "Fax a document"},
        ],
    }
    resp = await client.post("/v1/select", json=payload)
    assert resp.status == 200
    body = await resp.json()
    assert body["selected"][0] == "send_email"
    assert len(body["selected"]) == 2
    assert set(body["selected"]) <= {"send_email", "get_weather", "fax_document"}
    assert "margin" in body["reason"]


async def test_select_k_zero_means_default(client: Client) -> None:
    """K <= 0 means the default k (5), capped by the number of candidates."""
    cands = [{"ID": f"tool_{i}", "Description": f"does thing {i}"} for i in range(7)]
    resp = await client.post(
        "/v1/select", json={"query": {"Text": "thing 3", "K": 0}, "candidates": cands}
    )
    assert len((await resp.json())["selected"]) == 5


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_select_past_the_candidate_cache(client: Client) -> None:
    """More new candidates than the vector cache holds, in one request or across two, are
    all ranked: the rows are read before the cache drops its oldest entries."""
    many = [{"ID": f"c{i}", "Description": f"candidate tool {i}"} for i in range(CACHE + 1)]
    resp = await client.post("/v1/select", json={"query": {"Text": "tool 7"}, "candidates": many})
    assert resp.status == 200, await resp.text()
    assert len((await resp.json())["selected"]) == 5
    # c0 was the oldest entry and is gone; asking for it beside a fresh one embeds both again.
    pair = [many[0], {"ID": "fresh", "Description": "a fresh tool for the weather"}]
    resp = await client.post("/v1/select", json={"query": {"Text": "weather"}, "candidates": pair})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["selected"] == ["fresh", "c0"]


async def test_tools_crud(client: Client) -> None:
    """PUT upserts (then unchanged), GET lists and reads one, DELETE removes from ranking."""
    mcp = {"tools": [{"name": "get_time", "description": "Current time in a timezone",
                      "inputSchema": {"type": "object", "properties": {"tz": {"type": "string"}}}}]}  # fmt: skip
    resp = await client.put("/v1/tools", json=mcp)
    assert await resp.json() == {"upserted": 1, "unchanged": 0}
    resp = await client.put("/v1/tools", json=mcp)
    assert await resp.json() == {"upserted": 0, "unchanged": 1}
    openai = [{"type": "function", "function": {"name": "get_date", "description": "Today"}}]
    resp = await client.put("/v1/tools", json=openai)
    assert await resp.json() == {"upserted": 1, "unchanged": 0}
    tool = await (await client.get("/v1/tools/get_time")).json()
    assert tool["input_schema"]["properties"]["tz"] == {"type": "string"}
    names = [t["name"] for t in (await (await client.get("/v1/tools")).json())["tools"]]
    assert "get_time" in names and "get_date" in names
    in_pack = (await (await client.get("/v1/tools?pack=assistant")).json())["tools"]
    assert "get_time" not in [t["name"] for t in in_pack] and len(in_pack) == 8
    resp = await client.post("/v1/rank", json={"query": "current time in a timezone", "k": 1})
    assert (await resp.json())["results"][0]["tool"] == "get_time"
    resp = await client.delete("/v1/tools/get_time")
    assert resp.status == 200
    resp = await client.post("/v1/rank", json={"query": "current time in a timezone", "k": 20})
    assert "get_time" not in [r["tool"] for r in (await resp.json())["results"]]


async def test_exemplars_of_a_tool_start_empty(client: Client) -> None:
    """A known tool with no exemplars lists an empty array."""
    resp = await client.get("/v1/tools/get_weather/exemplars")
    assert await resp.json() == {"exemplars": []}


async def test_operations_routes(client: Client) -> None:
    """healthz and readyz answer 200; metrics are Prometheus text; openapi lists the routes."""
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["status"] == "ready"
    await client.post("/v1/rank", json={"query": "weather"})
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_http_requests_total{route="/v1/rank",status="200"}' in metrics
    assert 'toolselect_catalog_tools{tenant="default"} 8.0' in metrics
    doc = await (await client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    assert "post" in doc["paths"]["/v1/rank"]
    schema = doc["components"]["schemas"]["RankRequest"]
    assert schema["required"] == ["query"]


async def test_a_turn_reported_after_its_rank_reuses_the_query_vector(
    client: Client, service: Service
) -> None:
    """The learner finds the vector `/v1/rank` computed for the same request: a cache hit,
    counted at /metrics, and the turn is judged against the same ranking."""
    query = "what's the weather in Turin tomorrow?"
    ranked = await (await client.post("/v1/rank", json={"query": query, "k": 2})).json()
    resp = await client.post(
        "/v1/observe", json={"request": query, "used_tool": "get_weather", "turn_id": "reused"}
    )
    assert resp.status == 202
    assert await service.learner.drain(30.0)
    turn = await service.store.get_turn("reused")
    assert turn is not None and turn.top1 == ranked["results"][0]["tool"] == "get_weather"
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_query_vectors_total{result="miss",tenant="default"} 1.0' in metrics
    assert 'toolselect_query_vectors_total{result="hit",tenant="default"} 1.0' in metrics


async def test_concurrent_ranks_while_upserting(client: Client) -> None:
    """100 concurrent ranks during tool upserts: no errors, each answer from one snapshot."""

    async def rank_once() -> dict[str, Any]:
        resp = await client.post("/v1/rank", json={"query": "weather forecast rain", "k": 100})
        assert resp.status == 200
        return dict(await resp.json())

    async def upsert(i: int) -> None:
        body = {"tools": [{"name": f"weather_tool_{i}_{j}", "description": "weather forecast rain"}
                          for j in range(5)]}  # fmt: skip
        resp = await client.put("/v1/tools", json=body)
        assert resp.status == 200

    jobs = [rank_once() for _ in range(100)] + [upsert(i) for i in range(10)]
    results = await asyncio.gather(*jobs)
    answers = [r for r in results if r is not None]
    assert len(answers) == 100
    for answer in answers:
        names = [r["tool"] for r in answer["results"]]
        assert len(names) == len(set(names))
        # A consistent snapshot holds whole upsert batches: each batch's 5 tools all or none.
        for i in range(10):
            present = sum(1 for n in names if n.startswith(f"weather_tool_{i}_"))
            assert present in (0, 5), (i, present)
        scores = [r["score"] for r in answer["results"]]
        assert scores == sorted(scores, reverse=True)
