"""One service per tenant, whatever the order requests arrive in while it is closed and started
again. Closing a tenant dropped its start lock as soon as it let go of it, though a request was
already waiting on it: that request started the tenant under the dropped lock, and one arriving
during that start made a new lock and started a second service. Seen on a served process
(`TOOLSELECT_TENANTS_LIVE=2`, eight tenants under mixed requests for 15 s): 143 tenant starts
against 110 closes, 33 services nobody held any more still running their upkeep, their store and
spool threads (43 threads in the process) and the gauges of tenants all closed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from structlog.testing import capture_logs

from tests.services import ServiceFactory
from toolselect.service import TenantServices


async def until(condition: Callable[[], bool], within_s: float = 60.0) -> None:
    """Yield to the loop until `condition()` holds: checked at every loop turn, since the
    windows below are a few turns long, for up to `within_s` (a start on a busy Neo4j lasts
    longer than 100,000 idle turns, the bound this had)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def test_requests_during_a_tenants_close_and_start_share_one_service(
    services: ServiceFactory,
) -> None:
    """With one tenant live, B's start evicts A; a request for A arriving while A closes waits,
    then starts A; another arriving during that start gets the same service, and every service
    started is closed at the end."""
    default = await services.start(tenants_live=1)
    tenants = TenantServices(default)
    with capture_logs() as logs:
        try:
            await tenants.get("a")
            b = asyncio.create_task(tenants.get("b"))
            await until(lambda: "a" not in tenants.live)  # A's close has begun
            first = asyncio.create_task(tenants.get("a"))  # waits for A's close
            await b
            await until(lambda: not first.done() and "a" not in tenants.live)
            second = asyncio.create_task(tenants.get("a"))  # during A's new start
            assert await first is await second
        finally:
            await tenants.close_others()
    events = [log["event"] for log in logs if log.get("tenant") == "a"]
    assert events.count("tenant_started") == events.count("tenant_closed") == 2
