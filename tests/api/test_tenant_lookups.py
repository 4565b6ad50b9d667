"""Unknown tenants are looked up in the store once a poll interval, against the real app on a
real socket, on both stores: repeated reads for a tenant that does not exist are answered
`404 unknown_tenant` from what the first lookup found (`toolselect_tenant_lookups_total` says
which), while a tenant this process makes meanwhile (its first catalog upload, a key made for
it) is served at once; one another process makes is served once the poll interval passed."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_keys import ADMIN, TOOLS, bearer, create, error_of
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS
from toolselect.clock import utc_now
from toolselect.keys import new_key
from toolselect.service import TenantServices


async def lookups(client: TestClient[Any, Any]) -> dict[str, float]:
    """`toolselect_tenant_lookups_total` by result, as an admin scrapes it."""
    resp = await client.get("/metrics", headers=bearer(ADMIN))
    assert resp.status == 200, await resp.text()
    return {
        s.labels["result"]: s.value
        for family in text_string_to_metric_families(await resp.text())
        for s in family.samples
        if s.name == "toolselect_tenant_lookups_total"
    }


async def tools_of(client: TestClient[Any, Any], tenant: str) -> Any:
    """The response to an admin listing `tenant`'s tools."""
    return await client.get("/v1/tools", headers=bearer(ADMIN, tenant))


async def test_an_unknown_tenant_is_looked_up_once_a_poll_interval(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Twenty reads for a tenant with no data and no key are each `404 unknown_tenant`; the
    store is asked on the first only (the others `cached`), and reads of `default` or of a
    live tenant ask nothing."""
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,), poll_interval_s=60.0)
    put = await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, "team-live"))
    assert put.status == 200, await put.text()
    for _ in range(20):
        error = await error_of(await tools_of(client, "ghost"), 404)
        assert error["code"] == "unknown_tenant"
        assert (await tools_of(client, "team-live")).status == 200
        assert (await client.get("/v1/tools", headers=bearer(ADMIN))).status == 200
    assert await lookups(client) == {"store": 1.0, "cached": 19.0}
    assert client.app[TENANTS].live == ["team-live"]


async def test_requests_at_once_for_an_unknown_tenant_share_one_lookup(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Twenty reads for an unknown tenant sent at once are each `404 unknown_tenant` and ask
    the store once: those arriving during the lookup wait for its answer (`joined`)."""
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,), poll_interval_s=60.0)
    answers = await asyncio.gather(*(tools_of(client, "ghost") for _ in range(20)))
    for resp in answers:
        assert (await error_of(resp, 404))["code"] == "unknown_tenant"
    counted = await lookups(client)
    assert counted["store"] == 1.0
    assert counted.get("joined", 0.0) + counted.get("cached", 0.0) == 19.0
    assert counted.get("joined", 0.0) > 0  # the requests did overlap the lookup


async def test_a_tenant_made_here_is_served_at_once(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A tenant found unknown a moment ago is served as soon as this process makes it: by its
    first catalog upload (read again once it was closed, from the store) or by a key made for
    it (its own key's first read starts it)."""
    client, _ = await services.serve(
        aiohttp_client, api_keys=(ADMIN,), poll_interval_s=60.0, tenants_live=1
    )
    for tenant in ("team-put", "team-key"):
        await error_of(await tools_of(client, tenant), 404)
    put = await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, "team-put"))
    assert put.status == 200, await put.text()
    other = await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, "team-other"))
    assert other.status == 200, await other.text()
    assert client.app[TENANTS].live == ["team-other"]  # team-put closed: known from the store
    again = await tools_of(client, "team-put")
    assert again.status == 200, await again.text()
    assert [t["name"] for t in (await again.json())["tools"]] == ["get_weather"]

    editor = (await create(client, "team-key", "editor"))["key"]
    listed = await client.get("/v1/tools", headers=bearer(editor))
    assert listed.status == 200, await listed.text()
    assert await listed.json() == {"tools": []}
    # Two first lookups, then each made tenant read again while closed: from the store.
    assert await lookups(client) == {"store": 4.0}


async def test_a_tenant_made_elsewhere_is_served_after_the_poll_interval(
    services: ServiceFactory,
) -> None:
    """A tenant another process makes (here its key written to the store, as `toolselect keys
    create` or another replica does) stays unknown here until the poll interval since the
    lookup passed, then is found in the store."""
    service = await services.start(poll_interval_s=5.0)
    now = [0.0]
    tenants = TenantServices(service, now=lambda: now[0])

    def lookups(result: str) -> float | None:
        return service.metrics.value("toolselect_tenant_lookups_total", {"result": result})

    try:
        assert not await tenants.known("team-later")
        _, key = new_key("team-later", "editor", utc_now())
        await service.store.save_key(key)
        now[0] = 4.9
        assert not await tenants.known("team-later")
        assert (lookups("store"), lookups("cached")) == (1.0, 1.0)
        now[0] = 5.0
        assert await tenants.known("team-later")
        assert lookups("store") == 2.0
    finally:
        await tenants.close_others()
