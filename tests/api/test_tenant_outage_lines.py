"""Which services of a process share an outage's two log lines: those on one store. On Neo4j
every tenant's store is the shared database on the `default` service's driver, one outage for
all; on SQLite each tenant has a file of its own, which its disk, lock or permissions may lose
alone. (A real Neo4j outage under several tenants: tests/faults/test_outage_tenants.py.)"""

from __future__ import annotations

from structlog.testing import capture_logs

from tests.api.test_keys import ADMIN, bearer
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS
from toolselect.keys import DEFAULT_TENANT

A, B = "team-a", "team-b"
TOOLS = {"tools": [{"name": "get_weather", "description": "Weather for a city"}]}
OUTAGE_LINES = ("store_unreachable", "store_reachable")


async def test_an_outage_is_one_pair_of_lines_per_store(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Tenants A and B find their store down (as a failed ping or start tells them), B's ping
    then answers, A is closed, and `default`'s ping answers. On Neo4j that is one pair for the
    process: `store_unreachable` naming the three tenants served, `store_reachable` once no
    service that found it down waits for an answer (A's close left it, `default`'s answer
    ended it), naming the two it touched. On SQLite each tenant's is its own pair, naming it,
    and A's, closed while down, ends unlogged (as a service closed in an outage always did)."""
    # No watch ping after the first: the store answers only when this test asks it.
    client, default = await services.serve(aiohttp_client, api_keys=(ADMIN,), poll_interval_s=60)
    for team in (A, B):
        put = await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN, team))
        assert put.status == 200, await put.text()
    tenants = client.app[TENANTS]
    a, b = [await tenants.get(team) for team in (A, B)]
    for service in (default, a, b):
        await service.reachability.check()  # the watch's first ping, done
    with capture_logs() as logs:
        a.reachability.lost("gone")
        b.reachability.lost("gone")
        await b.reachability.check()
        await tenants.close_tenant(A)
        await default.reachability.check()
    lines = [
        (e["event"], e.get("tenant", DEFAULT_TENANT), e["tenants"])
        for e in logs
        if e["event"] in OUTAGE_LINES
    ]
    if services.kind == "sqlite":
        assert lines == [
            ("store_unreachable", A, 1),
            ("store_unreachable", B, 1),
            ("store_reachable", B, 1),
        ]
    else:
        assert lines == [
            ("store_unreachable", DEFAULT_TENANT, 3),
            ("store_reachable", DEFAULT_TENANT, 2),
        ]
    # Each service's readiness is its own: B answered, so did `default`.
    assert not b.reachability.down and not default.reachability.down
