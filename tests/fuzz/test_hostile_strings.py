"""Hostile strings end to end, on both stores: what goes in through the HTTP API comes back and is
stored verbatim, and never changes what a query means (no injection, no wildcard, no folding).

Strings are valid Unicode (lone surrogates are not text; their handling is pinned separately):
quotes, backticks, braces, `$`, Cypher and SQL fragments, LIKE and regex wildcards, NUL, RTL and
zero-width marks, emoji sequences, combining characters, case and invisible variants of a
catalog name, and CJK up to the 8 KiB limits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient
from yarl import URL

from tests.services import ServiceFactory
from toolselect.catalog import MAX_DESCRIPTION_BYTES
from toolselect.names import normalise_query
from toolselect.service import Service
from toolselect.store.port import lookup_one

Client = TestClient[Any, Any]

HOSTILE: tuple[str, ...] = (
    "it's a \"quoted\" 'name'",
    "back`tick` ``code``",
    "{braces} {{double}} ${dollar} $param",
    "MATCH (n) DETACH DELETE n",
    "'; DROP TABLE tools; --",
    'x"}) MATCH (n) DETACH DELETE n //',
    "` MATCH (n) RETURN n //",
    "\\ backslash \\\\ \\n \\u0000",
    "%",
    "_",
    "*",
    ".*",
    "get_weather%",
    "[a-z]+ (?i) ^$",
    "nul\x00byte",
    "\u202eRTL override\u202c and \u200fmarks\u200e",
    "emoji \U0001f6e0\ufe0f\U0001f469\u200d\U0001f4bb\U0001f3f3\ufe0f\u200d\U0001f308",
    "combining e\u0301\u0308\u0323 Z\u0351\u0352\u0353\u0354",
    "zero\u200bwidth\u2060joiner\ufeffbom",
    "line\nbreak\ttab",
    "<script>alert(1)</script>",
    "%2F%25 pre-encoded %00",
    "a/b/../c",
    "?query=1&x=2#frag",
    "CJK 漢字テスト \ufdfa",
    "GET_WEATHER",
    "get_weather\u200b",
    "漢" * 256,
)
# aiohttp's plain `{name}` placeholder matches `[^{}/]+` even when the braces arrive
# percent-encoded; the tool routes use `{name:[^/]+}` so these names stay addressable.
BRACED = tuple(h for h in HOSTILE if "{" in h or "}" in h)
# 2730 three-byte characters: 8190 bytes, just under the 8 KiB description (and default query)
# limit.
CJK_8K = "漢" * (MAX_DESCRIPTION_BYTES // 3)

BASE = {
    "get_weather": "Current weather and forecast for a city: temperature, rain, wind.",
    "send_email": "Send an email message to a recipient with a subject and body.",
    "web_search": "Search the web for pages matching a query and return links.",
    "stock_quote": "Latest stock price quote for a ticker symbol on the market.",
    "translate_text": "Translate text from one language into another language.",
    "fs_read": "Read a file from the local filesystem.",
}


def _description(i: int) -> str:
    return CJK_8K if i == 0 else f"{HOSTILE[-1 - i]} | {HOSTILE[i]}"


def _schema(i: int) -> dict[str, Any]:
    h = HOSTILE[i]
    return {"type": "object", "properties": {h: {"type": "string", "description": h}}}


def _pack(i: int) -> str:
    return HOSTILE[(i + 3) % len(HOSTILE)]


def tool_url(name: str, suffix: str = "") -> URL:
    """The tool's path with its name percent-encoded as one segment (`/` included)."""
    segment = quote(name, safe="")
    if segment in {".", ".."}:
        # Dot segments are removed by URL normalisation unless the dots themselves are encoded.
        segment = segment.replace(".", "%2E")
    return URL(f"/v1/tools/{segment}{suffix}", encoded=True)


@dataclass
class Hostile:
    service: Service
    client: Client


async def _put(client: Client, body: dict[str, Any]) -> None:
    resp = await client.put("/v1/tools", json=body)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["upserted"] == len(body["tools"])


@pytest_asyncio.fixture(loop_scope="function")
async def hostile(services: ServiceFactory, aiohttp_client: Any) -> Hostile:
    """A service whose catalog is the base tools plus one tool per hostile string, each in the
    pack named by another hostile string, all written through `PUT /v1/tools`."""
    # No store polling during the test: a poll's reload racing a PUT can drop the PUT's tools
    # from the ranker (pinned by test_catalog_writes_survive_concurrent_reloads).
    client, service = await services.serve(aiohttp_client, poll_interval_s=3600.0)
    base = [{"name": n, "description": d} for n, d in BASE.items()]
    await _put(client, {"tools": base, "pack": "base"})
    for i, name in enumerate(HOSTILE):
        tool = {"name": name, "description": _description(i), "input_schema": _schema(i)}
        await _put(client, {"tools": [tool], "pack": _pack(i)})
    return Hostile(service, client)


ALL_NAMES = set(BASE) | set(HOSTILE)


async def _names(client: Client, pack: str | None = None) -> list[str]:
    resp = await client.get("/v1/tools", params={"pack": pack} if pack is not None else None)
    assert resp.status == 200
    return [t["name"] for t in (await resp.json())["tools"]]


async def test_tools_come_back_verbatim(hostile: Hostile) -> None:
    """Each hostile name, description, schema and pack is returned and stored byte for byte."""
    client, store = hostile.client, hostile.service.store
    for i, name in enumerate(HOSTILE):
        if name not in BRACED:
            resp = await client.get(tool_url(name))
            assert resp.status == 200, (name, await resp.text())
            assert await resp.json() == {
                "name": name,
                "description": _description(i),
                "input_schema": _schema(i),
                "packs": [_pack(i)],
            }
        stored = await store.get_tool(name)
        assert stored is not None
        assert (stored.name, stored.description) == (name, _description(i))
        assert dict(stored.input_schema) == _schema(i)
        assert stored.packs == (_pack(i),)
    for name, description in BASE.items():
        stored = await store.get_tool(name)
        assert stored is not None and stored.description == description
        assert stored.packs == ("base",)
    names = await _names(client)
    assert sorted(names) == sorted(ALL_NAMES)
    assert len(names) == len(BASE) + len(HOSTILE)


async def test_pack_filters_are_literal(hostile: Hostile) -> None:
    """A hostile pack (`%`, `_`, `*`, Cypher text) selects exactly its own tool, never others."""
    client, store = hostile.client, hostile.service.store
    for i, name in enumerate(HOSTILE):
        pack = _pack(i)
        assert await _names(client, pack) == [name]
        assert [t.name for t in await store.list_tools(pack)] == [name]
        resp = await client.post("/v1/rank", json={"query": HOSTILE[i], "pack": pack, "k": 100})
        assert [r["tool"] for r in (await resp.json())["results"]] == [name]
    assert sorted(await _names(client, "base")) == sorted(BASE)


async def test_hostile_queries_keep_their_meaning(hostile: Hostile) -> None:
    """A hostile query ranks the whole catalog (nothing lost, nothing extra); a restriction to
    hostile names keeps exactly those names."""
    client = hostile.client
    longest = "漢" * (hostile.service.settings.max_query_bytes // 3)
    queries = (*HOSTILE, longest, "  \t padded \n ", "' OR '1'='1")
    for query in queries:
        resp = await client.post("/v1/rank", json={"query": query, "k": 100})
        assert resp.status == 200, (query, await resp.text())
        results = (await resp.json())["results"]
        assert sorted(r["tool"] for r in results) == sorted(ALL_NAMES)
    restricted = ["%", "_", "*", ".*", "get_weather%", "GET_WEATHER", "get_weather\u200b"]
    resp = await client.post(
        "/v1/rank", json={"query": "weather in Turin", "tools": restricted, "k": 100}
    )
    assert sorted(r["tool"] for r in (await resp.json())["results"]) == sorted(restricted)
    resp = await client.post("/v1/rank", json={"query": "weather", "tools": ["%"], "k": 100})
    assert [r["tool"] for r in (await resp.json())["results"]] == ["%"]


async def test_select_returns_hostile_candidate_ids_verbatim(hostile: Hostile) -> None:
    """/v1/select answers hostile candidate IDs (known or not) exactly as sent."""
    unknown = [f"unknown {h}" for h in HOSTILE[:8]]
    candidates = [{"ID": n, "Description": n} for n in (*HOSTILE, *unknown)]
    k = len(candidates)
    payload = {"query": {"Text": "MATCH (n) RETURN n", "K": k}, "candidates": candidates}
    resp = await hostile.client.post("/v1/select", json=payload)
    assert resp.status == 200, await resp.text()
    assert sorted((await resp.json())["selected"]) == sorted((*HOSTILE, *unknown))


async def test_feedback_labels_are_stored_verbatim(hostile: Hostile) -> None:
    """A hostile query labelled with a hostile tool is saved, listed and read back verbatim."""
    client, store = hostile.client, hostile.service.store
    assert len({normalise_query(q) for q in HOSTILE}) == len(HOSTILE)
    ids: dict[str, str] = {}
    for i, name in enumerate(HOSTILE):
        query = HOSTILE[(i + 5) % len(HOSTILE)]
        resp = await client.post("/v1/exemplars", json={"query": query, "tool": name})
        assert resp.status == 201, (query, await resp.text())
        body = await resp.json()
        assert body["saved"] is True
        assert (body["exemplar"]["query"], body["exemplar"]["tool"]) == (query, name)
        ids[name] = body["exemplar"]["id"]
        stored = await lookup_one(store, query)
        assert stored is not None and (stored.query, stored.tool) == (query, name)
    for i, name in enumerate(HOSTILE):
        if name in BRACED:
            continue
        resp = await client.get(tool_url(name, "/exemplars"))
        assert resp.status == 200
        listed = (await resp.json())["exemplars"]
        assert [(e["id"], e["query"], e["tier"]) for e in listed] == [
            (ids[name], HOSTILE[(i + 5) % len(HOSTILE)], "feedback")
        ]
        assert [e.query for e in await store.exemplars_for_tool(name)] == [
            HOSTILE[(i + 5) % len(HOSTILE)]
        ]
    delta = await store.exemplars_since(0)
    assert len(delta.upserted) == len(HOSTILE)


async def test_hostile_ids_delete_nothing_else(hostile: Hostile) -> None:
    """Deleting a hostile exemplar id that does not exist is a 404; deleting the tool named `%`
    removes exactly that tool."""
    client, store = hostile.client, hostile.service.store
    resp = await client.post("/v1/exemplars", json={"query": "weather in Rome", "tool": "%"})
    kept = (await resp.json())["exemplar"]["id"]
    for bogus in (*HOSTILE, "%", "*"):
        resp = await client.delete(URL(f"/v1/exemplars/{quote(bogus, safe='')}", encoded=True))
        assert resp.status == 404, (bogus, await resp.text())
    assert [e.id for e in await store.exemplars_for_tool("%")] == [kept]
    for name in ("%", "*", "MATCH (n) DETACH DELETE n"):
        resp = await client.delete(tool_url(name))
        assert resp.status == 200, (name, await resp.text())
        assert await store.get_tool(name) is None
    remaining = set(await _names(client))
    assert remaining == ALL_NAMES - {"%", "*", "MATCH (n) DETACH DELETE n"}
    resp = await client.delete(tool_url("%"))
    assert resp.status == 404


async def test_turns_are_stored_verbatim(hostile: Hostile) -> None:
    """Hostile turn ids, agent ids, packs, requests and used tools are stored as sent, singly
    and in a batch."""
    client, service = hostile.client, hostile.service
    n = len(HOSTILE)

    def turn(i: int, prefix: str) -> dict[str, Any]:
        return {
            "turn_id": f"{prefix}{HOSTILE[i]}"[:256],
            "agent_id": HOSTILE[(i + 1) % n],
            "pack": HOSTILE[(i + 2) % n],
            "request": HOSTILE[(i + 3) % n],
            "used_tool": HOSTILE[i],
            "outcome": "ok",
        }

    singles = [turn(i, "") for i in range(n)]
    for body in singles:
        resp = await client.post("/v1/observe", json=body)
        assert resp.status == 202
        assert await resp.json() == {"queued": True}
    batch = [turn(i, "b:") for i in range(n)]
    resp = await client.post("/v1/observe/batch", json={"turns": batch})
    assert resp.status == 202
    assert await resp.json() == {"queued": n, "dropped": 0}
    assert await service.learner.drain(60)
    for body in (*singles, *batch):
        stored = await service.store.get_turn(body["turn_id"])
        assert stored is not None, body["turn_id"]
        got = (stored.id, stored.agent_id, stored.pack, stored.request, stored.used_tool)
        want = (body["turn_id"], body["agent_id"], body["pack"], body["request"], body["used_tool"])
        assert got == want
    assert sorted(await _names(client)) == sorted(ALL_NAMES)


async def test_slash_and_dot_names_are_addressable_encoded(hostile: Hostile) -> None:
    """`/` in a name is addressed as `%2F` (a raw `/` is another route), and `.`/`..` as
    `%2E`; get, exemplars and delete all reach the right tool."""
    client = hostile.client
    await _put(
        client,
        {"tools": [{"name": n, "description": n} for n in ("a/b", "..", ".", "a%2Fb")]},
    )
    resp = await client.get(URL("/v1/tools/a%2Fb", encoded=True))
    assert (await resp.json())["name"] == "a/b"
    resp = await client.get(URL("/v1/tools/a%252Fb", encoded=True))
    assert (await resp.json())["name"] == "a%2Fb"
    resp = await client.get(URL("/v1/tools/a/b", encoded=True))
    assert resp.status == 404
    assert (await resp.json())["error"]["message"] == "no such route"
    resp = await client.get(URL("/v1/tools/a%2Fb/exemplars", encoded=True))
    assert resp.status == 200
    for name in ("..", "."):
        resp = await client.get(tool_url(name))
        assert (await resp.json())["name"] == name
    resp = await client.delete(URL("/v1/tools/a%2Fb", encoded=True))
    assert resp.status == 200
    assert await hostile.service.store.get_tool("a/b") is None
    assert await hostile.service.store.get_tool("a%2Fb") is not None


async def test_limits_count_utf8_bytes(hostile: Hostile) -> None:
    """The text limits count UTF-8 bytes, not characters: CJK just under a limit passes, one
    character more is refused with the field named, and the refusal stores nothing."""
    client = hostile.client
    limit = hostile.service.settings.max_query_bytes
    under, over = "漢" * (limit // 3), "漢" * (limit // 3 + 1)
    assert len(over) < limit < len(over.encode())
    resp = await client.post("/v1/rank", json={"query": under})
    assert resp.status == 200
    resp = await client.post("/v1/rank", json={"query": over})
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "query"
    resp = await client.post("/v1/observe", json={"request": over, "used_tool": "x"})
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "request"
    too_long = "漢" * (MAX_DESCRIPTION_BYTES // 3 + 1)
    resp = await client.put(
        "/v1/tools", json={"tools": [{"name": "too_long", "description": too_long}]}
    )
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "tools[0].description"
    assert await hostile.service.store.get_tool("too_long") is None


# --- known bugs: each test fails today and passes once the fix in the report is applied ------


async def test_names_with_braces_are_addressable(hostile: Hostile) -> None:
    """Tools whose names contain `{` or `}` are reachable by get, exemplars and delete."""
    client = hostile.client
    assert BRACED
    for name in BRACED:
        resp = await client.get(tool_url(name))
        assert resp.status == 200, (name, await resp.text())
        assert (await resp.json())["name"] == name
        resp = await client.get(tool_url(name, "/exemplars"))
        assert resp.status == 200, (name, await resp.text())
        resp = await client.delete(tool_url(name))
        assert resp.status == 200, (name, await resp.text())
        assert await hostile.service.store.get_tool(name) is None


LONE_SURROGATE_BODIES = {
    ("post", "/v1/rank"): '{"query": "a\\ud800b"}',
    ("post", "/v1/select"): '{"query": {"Text": "x"}, "candidates": [{"ID": "c\\udc00"}]}',
    ("put", "/v1/tools"): '{"tools": [{"name": "s\\ud800", "description": "x"}]}',
    ("post", "/v1/exemplars"): '{"query": "q\\udfff", "tool": "get_weather"}',
    ("post", "/v1/observe"): '{"request": "r\\ud800", "used_tool": "get_weather"}',
}


async def test_lone_surrogate_escapes_are_refused(hostile: Hostile) -> None:
    """A body with a lone UTF-16 surrogate escape is refused with a 4xx before it reaches a
    store, and cannot take well-formed turns of the same batch down with it."""
    client = hostile.client
    headers = {"Content-Type": "application/json"}
    for (method, path), body in LONE_SURROGATE_BODIES.items():
        resp = await client.request(method, path, data=body.encode(), headers=headers)
        assert 400 <= resp.status < 500, (path, resp.status, await resp.text())
    batch = (
        '{"turns": [{"request": "weather in Rome", "used_tool": "get_weather", "turn_id": "ok-1"},'
        ' {"request": "r\\ud800", "used_tool": "get_weather", "turn_id": "bad"}]}'
    )
    resp = await client.post("/v1/observe/batch", data=batch.encode(), headers=headers)
    assert await hostile.service.learner.drain(60)
    if resp.status == 202:
        assert await hostile.service.store.get_turn("ok-1") is not None
    else:
        assert 400 <= resp.status < 500


async def test_pack_query_parameter_is_checked_like_the_body(hostile: Hostile) -> None:
    """`PUT /v1/tools?pack=` refuses a blank or over-long pack name as the body's `pack` does."""
    client = hostile.client
    tool = {"tools": [{"name": "packed", "description": "x"}]}
    for pack in ("   ", "p" * 257):
        resp = await client.put("/v1/tools", params={"pack": pack}, json=tool)
        assert resp.status == 422, (pack[:10], await resp.text())
        assert (await resp.json())["error"]["field"] == "query.pack"
    assert await hostile.service.store.get_tool("packed") is None


async def test_long_values_are_stored_or_refused_never_lost(
    hostile: Hostile, services: ServiceFactory, request: pytest.FixtureRequest
) -> None:
    """A feedback query or used tool of 8190 bytes (under the 8 KiB limits; one query grows to
    90 KB under NFKC) is either stored or refused with a 4xx naming the field: never a 500, and
    a 202 never hides a lost turn of the batch."""
    client, service = hostile.client, hostile.service
    for query in (CJK_8K, "\ufdfa" * 2730):
        resp = await client.post("/v1/exemplars", json={"query": query, "tool": "get_weather"})
        if resp.status == 201:
            stored = await lookup_one(service.store, query)
            assert stored is not None and stored.query == query
        else:
            assert resp.status == 422, (await resp.text())[:300]
            assert (await resp.json())["error"]["field"] == "query"
    turns = [
        {"request": "weather in Rome", "used_tool": "get_weather", "turn_id": "ok-1"},
        {"request": "long used tool", "used_tool": CJK_8K, "turn_id": "ok-2"},
        {"request": "\ufdfa" * 2730, "used_tool": "get_weather", "turn_id": "ok-3"},
    ]
    resp = await client.post("/v1/observe/batch", json={"turns": turns})
    assert await service.learner.drain(60)
    if resp.status == 202:
        for t in turns:
            stored_turn = await service.store.get_turn(t["turn_id"])
            assert stored_turn is not None, t["turn_id"]
            assert (stored_turn.request, stored_turn.used_tool) == (t["request"], t["used_tool"])
    else:
        assert resp.status == 422, (await resp.text())[:300]


async def test_over_long_turn_id_never_loses_its_batch(
    hostile: Hostile, services: ServiceFactory, request: pytest.FixtureRequest
) -> None:
    """A 9000-byte turn id is either refused with a 4xx or stored with the rest of its batch;
    a 202 never hides lost turns."""
    service = hostile.service
    turns = [
        {"request": "weather in Rome", "used_tool": "get_weather", "turn_id": "ok-1"},
        {"request": "send it", "used_tool": "send_email", "turn_id": "t" * 9000},
    ]
    resp = await hostile.client.post("/v1/observe/batch", json={"turns": turns})
    assert await service.learner.drain(60)
    if resp.status == 202:
        for t in turns:
            assert await service.store.get_turn(t["turn_id"]) is not None
    else:
        assert 400 <= resp.status < 500


async def test_catalog_writes_survive_concurrent_reloads(
    services: ServiceFactory, aiohttp_client: Any
) -> None:
    """A reload (what the store poller runs after any catalog change) racing a `PUT /v1/tools`
    never leaves the service believing it is current while the PUT's tool is missing."""
    client, service = await services.serve(aiohttp_client, poll_interval_s=3600.0)
    lost: list[str] = []
    for i in range(80):
        name = f"tool_{i}"
        body = {"tools": [{"name": name, "description": f"does {name}"}]}
        await asyncio.gather(service.index.reload(), _put(client, body))
        current = service.index.catalog_version == (await service.store.state()).catalog_version
        if current and not service.ranker.has(name):
            lost.append(name)
    assert lost == []
