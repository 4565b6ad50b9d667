"""One store outage, one pair of log lines per process, however many tenants are live: a real
server on the session's Neo4j through a relay the test cuts and heals, several tenants made
live through the HTTP API with their own keys, all on the `default` service's driver."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.api.test_keys import ADMIN, bearer, create
from tests.faults.test_neo4j_faults import (
    CATALOG,
    ClientFactory,
    eventually,
    readiness,
    settings_for,
)
from tests.neo4j_server import Neo4jServer
from tests.partition import Partition
from toolselect.api.app import create_app_from_settings
from toolselect.api.http import TENANTS
from toolselect.errors import NotReady
from toolselect.service import Service

pytestmark = [pytest.mark.neo4j, pytest.mark.slow]

TEAMS = ("team-a", "team-b", "team-c")
LATE = "team-late"  # a key made before the outage, its service started during it
OUTAGE_LINES = ("store_unreachable", "store_reachable")


def every(services: list[Service], down: bool) -> Callable[[], Awaitable[bool]]:
    """Whether each of `services` found the store down (or answering), by its own ping."""

    async def check() -> bool:
        return all(s.reachability.down == down for s in services)

    return check


def store_up(service: Service) -> Callable[[], Awaitable[bool]]:
    """Whether `service`'s `toolselect_store_up` (its own, on /metrics) says the store answers."""

    async def check() -> bool:
        return service.metrics.value("toolselect_store_up", {}) == 1.0

    return check


def ready(service: Service) -> Callable[[], Awaitable[bool]]:
    """Whether `service` is ready (what `/readyz` asks of `default`'s)."""

    async def check() -> bool:
        try:
            await service.check_ready()
        except NotReady:
            return False
        return True

    return check


async def test_one_outage_is_one_pair_of_lines_whatever_the_tenants(
    relay: Partition, neo4j_server: Neo4jServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    """Neo4j lost under a process serving `default` and three tenants, a fourth tenant started
    and a third closed while it is away: the outage is one `store_unreachable` line, naming
    the tenants served from the store, and one `store_reachable` line, naming the tenants it
    touched and the requests refused and writes spooled across them (it was one pair per
    tenant: four of each). Each tenant's readiness and `toolselect_store_up` stay its own."""
    settings = settings_for(relay.uri, tmp_path, neo4j_server).override(api_keys=(ADMIN,))
    client = await aiohttp_client(create_app_from_settings(settings))
    await eventually(readiness(client), within=60)
    editors: dict[str, str] = {}
    for team in (*TEAMS, LATE):
        editors[team] = (await create(client, team, "editor"))["key"]
    for team in TEAMS:
        put = await client.put("/v1/tools", json=CATALOG, headers=bearer(editors[team]))
        assert put.status == 200, await put.text()
    tenants = client.app[TENANTS]
    assert tenants.live == list(TEAMS)
    services = [tenants.default, *[await tenants.get(team) for team in TEAMS]]
    spooled_before = sum(s.store.spool.appended for s in services)

    with capture_logs() as logs:
        await relay.cut()
        await eventually(every(services, down=True), within=30)
        refused = 0
        for team in TEAMS:
            put = await client.put("/v1/tools", json=CATALOG, headers=bearer(editors[team]))
            assert put.status == 503, await put.text()
            assert (await put.json())["error"]["code"] == "store_unavailable"
            refused += 1
            turn = {"request": f"mail for {team}", "used_tool": "send_email", "outcome": "ok"}
            observed = await client.post("/v1/observe", json=turn, headers=bearer(editors[team]))
            assert observed.status == 202, await observed.text()
        # A tenant started while the store is away joins the outage: no line of its own.
        late_turn = {"request": "mail", "used_tool": "send_email", "turn_id": "late-1"}
        late = await client.post("/v1/observe", json=late_turn, headers=bearer(editors[LATE]))
        assert late.status == 202, await late.text()
        services.append(await tenants.get(LATE))
        await eventually(every(services, down=True), within=30)
        for service in services[:-1]:  # the late one's waits for its catalog, in memory
            assert await service.learner.drain(30.0)
        # A tenant closed while the store is away leaves it: the outage ends without it.
        closed = services.pop(3)
        await tenants.close_tenant(TEAMS[2])
        spooled_by_closed = closed.store.spool.appended
        await relay.heal()
        await eventually(every(services, down=False), within=90)
        await eventually(readiness(client), within=30)
    spooled = sum(s.store.spool.appended for s in services) + spooled_by_closed - spooled_before

    lines = [e for e in logs if e["event"] in OUTAGE_LINES]
    assert [e["event"] for e in lines] == list(OUTAGE_LINES), lines
    lost, back = lines
    assert lost["store"] == back["store"] == relay.uri and "tenant" not in lost
    assert lost["tenants"] == 1 + len(TEAMS)  # served from the store when it was lost
    assert back["tenants"] == 2 + len(TEAMS)  # touched: the late and the closed ones too
    assert back["refused"] == refused and back["spooled"] == spooled > 0
    # /metrics keeps each tenant's own gauge, and each live tenant is ready again on its own.
    for service in services:
        await eventually(store_up(service), within=30)
        await eventually(ready(service), within=60)
