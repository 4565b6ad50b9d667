"""What `/metrics` keeps of tenants a process closed, against the real app on a real socket, on
both stores: with `TOOLSELECT_TENANTS_LIVE` tenants live, the live ones (and `default`) show
their gauges, a closed one none (its last values would be stale); the counters and histograms
of the `TOOLSELECT_TENANTS_LIVE` tenants closed last stay, those of tenants closed before go, so
serving tenants in turn keeps the series of at most 1 + 2 x TOOLSELECT_TENANTS_LIVE tenants; a
tenant started again shows its gauges with its own values."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_keys import ADMIN, bearer
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS

TENANTS_SERVED = [f"team-{i}" for i in range(6)]
LIVE = 2
# Gauges every started tenant sets as it loads its catalog, whatever it does next.
LOADED = ("toolselect_catalog_tools", "toolselect_exemplars", "toolselect_serving_from_snapshot")

Series = dict[str, dict[str, dict[str, float]]]  # tenant -> type -> sample name -> value


def catalog(tenant: str) -> dict[str, Any]:
    """`tenant`'s catalog: as many tools as its number plus one, so its size is its own."""
    count = TENANTS_SERVED.index(tenant) + 1
    return {"tools": [{"name": f"tool_{i}", "description": f"Tool {i}"} for i in range(count)]}


async def series(client: TestClient[Any, Any]) -> Series:
    """Every tenant's samples at `/metrics` as an admin scrapes it, by tenant and by the type of
    their family (a counter's `_created` counted with it), with their labels but `tenant`."""
    resp = await client.get("/metrics", headers=bearer(ADMIN))
    assert resp.status == 200, await resp.text()
    found: Series = defaultdict(lambda: defaultdict(dict))
    for family in text_string_to_metric_families(await resp.text()):
        kind = "counter" if family.name.endswith("_created") else family.type
        for s in family.samples:
            if "tenant" in s.labels:
                rest = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "tenant")
                found[s.labels["tenant"]][kind][f"{s.name}{{{rest}}}"] = s.value
    return found


def with_kind(seen: Series, kind: str) -> set[str]:
    return {tenant for tenant, kinds in seen.items() if kinds.get(kind)}


async def serve_once(client: TestClient[Any, Any], tenant: str) -> None:
    """Upload `tenant`'s catalog, rank once, report a turn: gauges, counters and histograms."""
    headers = bearer(ADMIN, tenant)
    put = await client.put("/v1/tools", json=catalog(tenant), headers=headers)
    assert put.status == 200, await put.text()
    ranked = await client.post("/v1/rank", json={"query": "tool"}, headers=headers)
    assert ranked.status == 200, await ranked.text()
    turn = {"request": "tool", "used_tool": "tool_0", "turn_id": f"{tenant}-1"}
    observed = await client.post("/v1/observe", json=turn, headers=headers)
    assert observed.status == 202, await observed.text()


async def test_closed_tenants_leave_no_gauges_and_bounded_counters(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Six tenants served in turn, two live at once: gauges of `default` and the two live only,
    counters of the two live and the two closed last, nothing of the first two; a closed
    tenant started again shows its gauges with its own catalog's size, and one whose counters
    stayed counts on from them."""
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,), tenants_live=LIVE)
    tenants = client.app[TENANTS]
    for tenant in TENANTS_SERVED:
        await serve_once(client, tenant)
    assert tenants.live == TENANTS_SERVED[-2:]
    seen = await series(client)
    assert with_kind(seen, "gauge") == {"default", *TENANTS_SERVED[-2:]}
    assert with_kind(seen, "counter") - {"default"} == set(TENANTS_SERVED[-4:])
    assert with_kind(seen, "histogram") == set(TENANTS_SERVED[-4:])
    assert set(seen) - {"default"} == set(TENANTS_SERVED[-4:])
    for tenant in TENANTS_SERVED[-2:]:
        gauges = seen[tenant]["gauge"]
        assert gauges["toolselect_catalog_tools{}"] == len(catalog(tenant)["tools"])
        assert all(f"{name}{{}}" in gauges for name in LOADED), gauges
    assert seen["team-3"]["histogram"]["toolselect_rank_seconds_count{}"] == 1.0

    # team-3 (its counters kept) and team-0 (all its series gone) start again on a read.
    for tenant in ("team-3", "team-0"):
        listed = await client.get("/v1/tools", headers=bearer(ADMIN, tenant))
        assert listed.status == 200, await listed.text()
    ranked = await client.post("/v1/rank", json={"query": "tool"}, headers=bearer(ADMIN, "team-3"))
    assert ranked.status == 200, await ranked.text()
    assert tenants.live == ["team-0", "team-3"]
    seen = await series(client)
    assert with_kind(seen, "gauge") == {"default", "team-0", "team-3"}
    assert seen["team-0"]["gauge"]["toolselect_catalog_tools{}"] == 1.0
    assert seen["team-3"]["gauge"]["toolselect_catalog_tools{}"] == 4.0
    for tenant in ("team-0", "team-3"):
        assert seen[tenant]["gauge"]["toolselect_exemplars{}"] == 0.0
        assert seen[tenant]["gauge"]["toolselect_serving_from_snapshot{}"] == 0.0
    assert seen["team-3"]["histogram"]["toolselect_rank_seconds_count{}"] == 2.0
    # The two closed last are now team-4 and team-5: team-2's counters went.
    assert set(seen) - {"default"} == {"team-0", "team-3", "team-4", "team-5"}


async def test_refusals_for_tenants_never_started_keep_bounded_series(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """At one request per tenant now and then, five tenants that never start are each refused
    `429 rate_limited` on their second read: `toolselect_rate_limited_total` keeps the series
    of the last two only, as of tenants closed, rather than one for every name ever refused."""
    client, _ = await services.serve(
        aiohttp_client, api_keys=(ADMIN,), tenants_live=LIVE, tenant_rps=0.01, tenant_burst=1
    )
    ghosts = [f"ghost-{i}" for i in range(5)]
    for ghost in ghosts:
        first = await client.get("/v1/tools", headers=bearer(ADMIN, ghost))
        assert first.status == 404, await first.text()
        second = await client.get("/v1/tools", headers=bearer(ADMIN, ghost))
        assert second.status == 429, await second.text()
    seen = await series(client)
    assert set(seen) - {"default"} == set(ghosts[-LIVE:])
    assert seen["ghost-4"]["counter"]["toolselect_rate_limited_total{scope=tenant}"] == 1.0
