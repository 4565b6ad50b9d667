"""Which requests make a tenant, against the real app on a real socket and real SQLite files:
a request for a tenant that does not exist yet makes no file in the data folder unless it is a
write that makes the tenant's data (a catalog upload, a reported turn), whatever it sends; a
tenant with a key, or with data, is served as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from tests.api.test_keys import ADMIN, TOOLS, bearer, create, error_of, sqlite
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS
from toolselect.keys import TENANT_HEADER

__all__ = ["sqlite"]  # the fixture, imported for these tests

NEW = "zz-bad-body-tenant"
RANK = {"query": "weather in Turin"}
TURN = {"request": "weather in Turin", "used_tool": "get_weather"}


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def serve(sqlite: ServiceFactory, aiohttp_client: ClientFactory) -> TestClient[Any, Any]:
    client, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    return client


async def test_refused_and_reading_requests_make_no_tenant(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """For a tenant with no key and no data: bad bodies are refused as ever, and every request
    that makes none of its data is `404 unknown_tenant` naming the header; no file appears in
    the data folder and no tenant starts."""
    client = await serve(sqlite, aiohttp_client)
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
    unknown = [
        client.head("/v1/tools", headers=headers),
        client.get("/v1/tools", headers=headers),
        client.get("/v1/tools/get_weather", headers=headers),
        client.get("/v1/tools/get_weather/exemplars", headers=headers),
        client.delete("/v1/tools/get_weather", headers=headers),
        client.delete("/v1/exemplars/0123456789abcdef", headers=headers),
        client.get("/v1/analytics/drift", headers=headers),
        client.get("/v1/analytics/learning", headers=headers),
        client.post("/v1/rank", json=RANK, headers=headers),
        client.post(
            "/v1/select",
            json={"query": {"Text": "weather", "K": 1}, "candidates": [{"ID": "get_weather"}]},
            headers=headers,
        ),
        client.post("/v1/exemplars", json={"query": "x", "tool": "get_weather"}, headers=headers),
    ]
    for call in unknown:
        resp = await call
        assert resp.status == 404, await resp.text()
        if resp.method != "HEAD":
            error = (await resp.json())["error"]
            assert (error["code"], error["field"]) == ("unknown_tenant", TENANT_HEADER)
            assert repr(NEW) in error["message"]
    assert files(tmp_path) == before
    assert client.app[TENANTS].live == []


async def test_a_write_or_a_key_makes_a_tenant_which_reads_then_find(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """A catalog upload or a reported turn starts a new tenant (its store file appears); a key
    made for a tenant makes it known, so its own key's first read starts it; a tenant closed
    since is found again by its file."""
    client = await serve(sqlite, aiohttp_client)
    put = await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, "team-put"))
    assert put.status == 200, await put.text()
    observed = await client.post("/v1/observe", json=TURN, headers=bearer(ADMIN, "team-turn"))
    assert observed.status == 202, await observed.text()
    editor = (await create(client, "team-key", "editor"))["key"]
    listed = await client.get("/v1/tools", headers=bearer(editor))
    assert listed.status == 200 and await listed.json() == {"tools": []}
    for tenant in ("team-put", "team-turn", "team-key"):
        assert f"toolselect.tenant-{tenant}.db" in files(tmp_path)
    await client.app[TENANTS].close_tenant("team-put")
    again = await client.get("/v1/tools", headers=bearer(ADMIN, "team-put"))
    assert [t["name"] for t in (await again.json())["tools"]] == ["get_weather"]
