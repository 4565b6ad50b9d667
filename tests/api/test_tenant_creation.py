"""Which requests make a tenant, against the real app on a real socket, on both stores (SQLite
files, then a real Neo4j): a request for a tenant that does not exist yet leaves no trace of it
(no file in the data folder, no node in the graph, no live tenant) unless it is a write that
makes the tenant's data (a catalog upload, a reported turn), whatever it sends; a tenant with a
key, or with data, is served as before, by a new process too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import neo4j
from aiohttp.test_utils import TestClient

from tests.api.test_keys import ADMIN, TOOLS, bearer, create, error_of
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS
from toolselect.keys import TENANT_HEADER

NEW = "zz-bad-body-tenant"
RANK = {"query": "weather in Turin"}
TURN = {"request": "weather in Turin", "used_tool": "get_weather"}


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def nodes(services: ServiceFactory, tenant: str) -> int:
    """How many nodes of `tenant` the graph holds (none on SQLite, which has no graph)."""
    server = services.server
    if server is None:
        return 0
    async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=server.auth) as driver:
        result = await driver.execute_query(
            "MATCH (n) WHERE n.tenant = $tenant RETURN count(n) AS n",
            {"tenant": tenant},
            database_=server.database,
        )
    return int(result.records[0]["n"])


async def serve(
    services: ServiceFactory, aiohttp_client: ClientFactory, **overrides: Any
) -> TestClient[Any, Any]:
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,), **overrides)
    return client


# Every request that makes none of a tenant's data: reads, rankings, deletes, a label.
UNKNOWN: list[tuple[str, str, Any]] = [
    ("HEAD", "/v1/tools", None),
    ("GET", "/v1/tools", None),
    ("GET", "/v1/tools/get_weather", None),
    ("GET", "/v1/tools/get_weather/exemplars", None),
    ("DELETE", "/v1/tools/get_weather", None),
    ("DELETE", "/v1/exemplars/0123456789abcdef", None),
    ("GET", "/v1/analytics/drift", None),
    ("GET", "/v1/analytics/learning", None),
    ("POST", "/v1/rank", RANK),
    ("POST", "/v1/select", {"query": {"Text": "weather", "K": 1}, "candidates": [{"ID": "get_weather"}]}),
    ("POST", "/v1/exemplars", {"query": "x", "tool": "get_weather"}),
]  # fmt: skip


async def assert_unknown(client: TestClient[Any, Any], headers: dict[str, str]) -> None:
    """Each request of `UNKNOWN` is `404 unknown_tenant` naming the header and the tenant."""
    for method, path, body in UNKNOWN:
        resp = await client.request(method, path, json=body, headers=headers)
        assert resp.status == 404, (method, path, await resp.text())
        if method != "HEAD":
            error = (await resp.json())["error"]
            assert (error["code"], error["field"]) == ("unknown_tenant", TENANT_HEADER)
            assert repr(headers[TENANT_HEADER]) in error["message"]


async def test_refused_and_reading_requests_make_no_tenant(
    services: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """For a tenant with no key and no data: bad bodies are refused as ever, and every request
    that makes none of its data is `404 unknown_tenant` naming the header; no file appears in
    the data folder, no node of it in the graph, and no tenant starts."""
    client = await serve(services, aiohttp_client)
    before = files(tmp_path)
    headers = bearer(ADMIN, NEW)
    json_headers = {**headers, "Content-Type": "application/json"}
    refused = [
        (client.post("/v1/rank", data=b"{bad json", headers=json_headers), 400),
        (client.put("/v1/tools", data=b"{bad json", headers=json_headers), 400),
        (client.put("/v1/tools", json={"tools": [{"name": ""}]}, headers=headers), 422),
        (client.put("/v1/tools?pack=%20", json=TOOLS, headers=headers), 422),
        (client.post("/v1/observe", json={"request": "x"}, headers=headers), 422),
        (client.post("/v1/observe/batch", json={"turns": [{}]}, headers=headers), 422),
        (client.post("/v1/exemplars", json={"query": "x"}, headers=headers), 422),
        (client.get("/v1/analytics/drift?since=yesterday", headers=headers), 422),
    ]
    for call, status in refused:
        await error_of(await call, status)
    assert files(tmp_path) == before
    await assert_unknown(client, headers)
    assert files(tmp_path) == before
    assert await nodes(services, NEW) == 0
    assert client.app[TENANTS].live == []


async def test_a_keyless_server_makes_no_tenant_for_a_read(
    services: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """Without keys any caller may name a tenant: a mistyped one is `404 unknown_tenant` for a
    read or a ranking and leaves no trace, as with a key."""
    client, _ = await services.serve(aiohttp_client)
    before = files(tmp_path)
    await assert_unknown(client, {TENANT_HEADER: "team-aa"})
    assert files(tmp_path) == before
    assert await nodes(services, "team-aa") == 0
    assert client.app[TENANTS].live == []


async def test_a_write_or_a_key_makes_a_tenant_which_reads_then_find(
    services: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """A catalog upload or a reported turn starts a new tenant (its store file appears, or its
    nodes); a key made for a tenant makes it known, so its own key's first read starts it; a
    tenant closed since is found again by its file or its nodes."""
    client = await serve(services, aiohttp_client)
    put = await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, "team-put"))
    assert put.status == 200, await put.text()
    observed = await client.post("/v1/observe", json=TURN, headers=bearer(ADMIN, "team-turn"))
    assert observed.status == 202, await observed.text()
    editor = (await create(client, "team-key", "editor"))["key"]
    listed = await client.get("/v1/tools", headers=bearer(editor))
    assert listed.status == 200 and await listed.json() == {"tools": []}
    for tenant in ("team-put", "team-turn", "team-key"):
        if services.server is None:
            assert f"toolselect.tenant-{tenant}.db" in files(tmp_path)
        else:
            assert await nodes(services, tenant) > 0
    await client.app[TENANTS].close_tenant("team-put")
    again = await client.get("/v1/tools", headers=bearer(ADMIN, "team-put"))
    assert [t["name"] for t in (await again.json())["tools"]] == ["get_weather"]


async def test_a_new_process_knows_the_tenants_with_data_and_no_other(
    services: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """A process started later over the same store, with a data folder of its own (no spool
    of the first one's), serves the reads of a tenant that has only a catalog, only turns or
    only a key, and still answers `404 unknown_tenant` for one that has none of them."""
    first = await serve(services, aiohttp_client)
    put = await first.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, "team-put"))
    assert put.status == 200, await put.text()
    observed = await first.post("/v1/observe", json=TURN, headers=bearer(ADMIN, "team-turn"))
    assert observed.status == 202, await observed.text()
    await create(first, "team-key", "editor")
    await first.app[TENANTS].close_others()  # the turn is stored by then: the learner drained
    folder = tmp_path / "second"
    folder.mkdir()
    second = await serve(services, aiohttp_client, data_dir=str(folder))
    for tenant in ("team-put", "team-turn", "team-key"):
        listed = await second.get("/v1/tools", headers=bearer(ADMIN, tenant))
        assert listed.status == 200, (tenant, await listed.text())
    assert sorted(second.app[TENANTS].live) == ["team-key", "team-put", "team-turn"]
    before = files(folder)
    await assert_unknown(second, bearer(ADMIN, NEW))
    assert files(folder) == before
    assert await nodes(services, NEW) == 0
    assert sorted(second.app[TENANTS].live) == ["team-key", "team-put", "team-turn"]
