"""Tenant isolation over MCP with keys, on both stores: for every tool and resource of
`keys.MCP_ROLES` (each has a case in `CASES`, so a new tool or resource without one fails), a
key of tenant A acts on A's data only and never sees, changes or influences tenant B's. Both
tenants hold the same tool names with other descriptions; B also holds a tool A lacks, a label
and turns whose texts carry a marker (`zebra`) that must never reach A. The in-process MCP
server behind uvicorn (`in_process`), keys stored as the CLI stores them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from mcp import Client

from tests.api.test_keys import ADMIN, bearer
from tests.api.test_tenant_isolation import CATALOGS, QUERIES, A, B
from tests.mcp.test_keys import connected, in_process
from tests.mcp.test_server import read_json, text
from tests.services import ServiceFactory
from toolselect.analytics.registry import LEARNING, NAMES
from toolselect.clock import utc_now
from toolselect.keys import MCP_ROLES, new_key
from toolselect.mcp_resources import ANALYTICS_URI, CATALOG_URI
from toolselect.records import Tool, Turn
from toolselect.service import Service
from toolselect.store.factory import open_store

MARK = "zebra"  # in every text of B's; never in anything A reads
B_ONLY = Tool("ledger_lookup", "Look up a zebra ledger entry by its number.")
B_LABEL = f"the {MARK} ledger entry for March"
B_TURN = "turn-1"  # B's turn id, which A's turns use too
ROLES = ("agent", "editor")


@dataclass
class World:
    """The MCP server's URL, the service behind it and each tenant's keys by role."""

    url: str
    service: Service
    keys: dict[str, dict[str, str]]
    b_search_id: str = ""

    @asynccontextmanager
    async def as_(self, tenant: str, role: str = "editor") -> AsyncIterator[Client]:
        async with connected(self.url, bearer(self.keys[tenant][role])) as client:
            yield client

    async def turn(self, tenant: str, turn_id: str, request: str | None = None) -> Turn | None:
        """The stored turn `turn_id` of `tenant` (waiting up to 15 s for one with `request`,
        when given: the learner stores reported turns in the background)."""
        store = await open_store(self.service.settings, tenant=tenant)
        try:
            for _ in range(300):
                turn = await store.get_turn(turn_id)
                if request is None or (turn is not None and turn.request == request):
                    return turn
                await asyncio.sleep(0.05)
            raise AssertionError(f"no turn {turn_id!r} with request {request!r} in {tenant}")
        finally:
            await store.close()

    async def labels(self, tenant: str) -> dict[str, Any]:
        """Every stored label of `tenant`'s tools, as the store holds it."""
        store = await open_store(self.service.settings, tenant=tenant)
        try:
            return {
                t.name: sorted(
                    (e.id, e.query, e.tool, e.tier, e.count)
                    for e in await store.exemplars_for_tool(t.name)
                )
                for t in await store.list_tools()
            }
        finally:
            await store.close()


async def search(client: Client, query: str, k: int = 5) -> dict[str, Any]:
    result = await client.call_tool("search_tools", {"query": query, "k": k})
    assert not result.is_error, text(result)
    found: dict[str, Any] | None = result.structured_content
    assert found is not None
    return found


async def analyses(client: Client, since: str | None = None) -> dict[str, Any]:
    """Every analysis resource (and the learning fit), or each store analysis with `since`."""
    if since is None:
        uris = [f"{ANALYTICS_URI}/{name}" for name in (*NAMES, LEARNING)]
    else:
        uris = [f"{ANALYTICS_URI}/{name}?since={since}" for name in NAMES]
    return {uri: await read_json(client, uri) for uri in uris}


async def snapshot(world: World, tenant: str) -> Any:
    """Everything `tenant` can be seen to hold: rankings of QUERIES and of B's label with
    scores and margins (search ids left out: each search has its own), the catalog, every
    analysis, the stored labels and B's turn id."""
    async with world.as_(tenant) as client:
        ranked = []
        for query in (*QUERIES, B_LABEL):
            found = await search(client, query)
            ranked.append((found["tools"], found["margin"], found["embedder"]))
        seen = (ranked, await read_json(client, CATALOG_URI), await analyses(client))
    return seen, await world.labels(tenant), await world.turn(tenant, B_TURN)


async def make_world(url: str, service: Service) -> World:
    """Tenants A and B with an agent and an editor key each and their catalogs (the same
    names; B also `ledger_lookup`); B has labelled a query and reported a turn it searched."""
    keys: dict[str, dict[str, str]] = {}
    for tenant, tools in ((A, CATALOGS[A]), (B, [*CATALOGS[B], B_ONLY])):
        store = await open_store(service.settings, tenant=tenant)
        try:
            await store.migrate()
            await store.upsert_tools(tools)
        finally:
            await store.close()
        keys[tenant] = {}
        for role in ROLES:
            secret, record = new_key(tenant, role, utc_now())
            await service.store.save_key(record)
            service.keys.add(record)
            keys[tenant][role] = secret
    world = World(url, service, keys)
    async with world.as_(B) as client:
        labelled = await client.call_tool("label_turn", {"query": B_LABEL, "tool": B_ONLY.name})
        assert not labelled.is_error, text(labelled)
        world.b_search_id = (await search(client, QUERIES[0]))["search_id"]
    b_request = f"{MARK} invoices of Ada, {QUERIES[0]}"
    async with world.as_(B, "agent") as client:
        turn = {"request": b_request, "used_tool": "get_weather", "outcome": "ok",
                "search_id": world.b_search_id, "turn_id": B_TURN}  # fmt: skip
        reported = await client.call_tool("report_turn", turn)
        assert not reported.is_error, text(reported)
    stored = await world.turn(B, B_TURN, b_request)
    assert stored is not None and stored.search_status == "shown"
    await settled(world, B)
    return world


async def settled(world: World, tenant: str) -> None:
    """Wait until `tenant`'s own background work is over (its turn's usage label saved and
    folded after the turn itself was stored): two snapshots 0.2 s apart alike. Otherwise a
    case's `before` may be read mid-fold, on a busy machine, and B's own label taken for A's
    doing."""
    last = await snapshot(world, tenant)
    for _ in range(50):
        await asyncio.sleep(0.2)
        now = await snapshot(world, tenant)
        if now == last:
            return
        last = now
    raise AssertionError(f"{tenant} never settled")


def a_catalog() -> dict[str, str]:
    return {t.name: t.description for t in CATALOGS[A]}


def b_texts() -> list[str]:
    """What of B's must never reach A: its descriptions, its own tool and its marker."""
    return [*(t.description for t in CATALOGS[B]), B_ONLY.name, MARK]


def assert_none_of_bs(seen: Any) -> None:
    dumped = json.dumps(seen)
    assert [t for t in b_texts() if t in dumped] == []


async def search_tools_case(world: World) -> None:
    """`search_tools` with A's agent key ranks A's catalog only: A's descriptions under the
    shared names, never B's nor B's own tool, whatever the query (B's label's among them);
    B's rankings, catalog, analyses and labels stay as they were."""
    before = await snapshot(world, B)
    async with world.as_(A, "agent") as client:
        for query in (*QUERIES, B_LABEL, B_ONLY.description):
            found = await search(client, query, k=10)
            assert {t["name"]: t["description"] for t in found["tools"]} == a_catalog()
            assert_none_of_bs(found)
    assert await snapshot(world, B) == before


async def report_turn_case(world: World) -> None:
    """`report_turn` with A's agent key, naming B's turn id and B's search id, stores the turn
    in A (B's search id unknown there) and leaves B's turn of that id, B's analyses, rankings
    and labels as they were."""
    before = await snapshot(world, B)
    request = "owl pages for tenant a"
    async with world.as_(A, "agent") as client:
        turn = {"request": request, "used_tool": "web_search", "outcome": "ok",
                "search_id": world.b_search_id, "turn_id": B_TURN}  # fmt: skip
        reported = await client.call_tool("report_turn", turn)
    assert reported.structured_content == {"queued": True, "reason": None}, text(reported)
    stored = await world.turn(A, B_TURN, request)
    assert stored is not None and stored.search_status == "unknown"
    assert await snapshot(world, B) == before


async def label_turn_case(world: World) -> None:
    """`label_turn` with A's editor key labels in A only: B's very query labelled to another
    tool takes in A and leaves B's rankings bit for bit (scores and margins), labels and
    analyses unchanged; a label naming B's own tool is an unknown tool in A and stores
    nothing anywhere."""
    before = await snapshot(world, B)
    a_labels = await world.labels(A)
    async with world.as_(A) as client:
        refused = await client.call_tool("label_turn", {"query": B_LABEL, "tool": B_ONLY.name})
        assert refused.is_error and B_ONLY.name in text(refused), text(refused)
        assert await world.labels(A) == a_labels
        labelled = await client.call_tool("label_turn", {"query": B_LABEL, "tool": "send_email"})
        assert not labelled.is_error, text(labelled)
        assert (await search(client, B_LABEL))["tools"][0]["name"] == "send_email"
    assert await snapshot(world, B) == before


async def catalog_case(world: World) -> None:
    """The catalog resource read with A's editor key is A's catalog, B's descriptions and own
    tool nowhere in it; read with B's, B's."""
    async with world.as_(A) as client:
        catalog = await read_json(client, CATALOG_URI)
    assert {t["name"]: t["description"] for t in catalog["tools"]} == a_catalog()
    assert_none_of_bs(catalog)
    async with world.as_(B) as client:
        theirs = await read_json(client, CATALOG_URI)
    assert {t["name"] for t in theirs["tools"]} == {*a_catalog(), B_ONLY.name}


async def analytics_index_case(world: World) -> None:
    """The analyses' index is the same list of URIs for A and B, holding no tenant's data."""
    async with world.as_(A) as client:
        index = await read_json(client, ANALYTICS_URI)
    async with world.as_(B) as client:
        assert await read_json(client, ANALYTICS_URI) == index
    assert index == {"analyses": [f"{ANALYTICS_URI}/{name}" for name in (*NAMES, LEARNING)]}


async def analysis_case(world: World) -> None:
    """Every analysis, as a resource and through the `since` template, read with A's editor
    key holds nothing of B's (B's own tool and marker are in B's); and B's next label and
    turn leave all of A's analyses as they were."""
    async with world.as_(A) as client:
        a_before = (await analyses(client), await analyses(client, "2000-01-01"))
    assert_none_of_bs(a_before)
    async with world.as_(B) as client:
        labelled = await client.call_tool(
            "label_turn", {"query": f"{MARK} ledger for May", "tool": B_ONLY.name}
        )
        assert not labelled.is_error, text(labelled)
        request = f"{MARK} weather of the ledger"
        turn = {"request": request, "used_tool": "web_search", "turn_id": "b-turn-2",
                "outcome": "error"}  # fmt: skip
        assert not (await client.call_tool("report_turn", turn)).is_error
    await world.turn(B, "b-turn-2", request)
    async with world.as_(B) as client:
        b_seen = json.dumps(await analyses(client))
    assert B_ONLY.name in b_seen
    async with world.as_(A) as client:
        assert (await analyses(client), await analyses(client, "2000-01-01")) == a_before


CASES: dict[tuple[str, str], Callable[[World], Awaitable[None]]] = {
    ("tool", "search_tools"): search_tools_case,
    ("tool", "report_turn"): report_turn_case,
    ("tool", "label_turn"): label_turn_case,
    ("resource", "toolselect://catalog"): catalog_case,
    ("resource", "toolselect://analytics"): analytics_index_case,
    ("resource", "toolselect://analytics/{name}"): analysis_case,
}


def test_every_mcp_tool_and_resource_has_an_isolation_case() -> None:
    """A tool or resource added to `MCP_ROLES` needs its case here (and a case of something
    gone from it goes)."""
    assert set(CASES) == set(MCP_ROLES)


async def test_a_tenants_key_never_sees_changes_or_influences_another(
    services: ServiceFactory,
) -> None:
    """Every entry of `MCP_ROLES`, in the table's order, attacked by A's keys on one server
    (see each case); an entry without a case fails here too."""
    async with in_process(services, api_keys=(ADMIN,)) as url:
        world = await make_world(url, services.started[0])
        done = []
        for entry in MCP_ROLES:
            case = CASES.get(entry)
            assert case is not None, f"no isolation case for {entry}"
            await case(world)
            done.append(entry)
    assert done == list(MCP_ROLES)
