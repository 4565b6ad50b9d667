"""Sessions expire (`TOOLSELECT_SESSION_IDLE`, an hour by default), by the service's clock,
over the real app on both stores: a session whose last turn is older than the limit lends a
ranking no previous tools, whether this process noted the turn or read it from the store, and
its next turn starts it afresh: no step is counted across the gap (`tool_transitions`), while
turns within the limit go on as one conversation."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from aiohttp.test_utils import TestClient

from tests.api.conftest import HAND_CATALOG
from tests.e2e.test_learning import eventually
from tests.services import ClientFactory, ServiceFactory
from toolselect.service import Service
from toolselect.testing import FakeClock

VAGUE = "set it up for tomorrow at ten"
# A session of the store's (seeded) went from send_email to create_calendar_event: with the
# prior's weight pinned, a session whose last turn used send_email ranks it first.
PRIOR = "create_calendar_event"
SEEDED = ("send_email", PRIOR, 1)

Client = TestClient[Any, Any]


async def serve(
    services: ServiceFactory, aiohttp_client: ClientFactory, clock: FakeClock, **settings: Any
) -> tuple[Client, Service]:
    """The app over a service on `clock` (the prior's weight pinned at 1, no teacher) whose
    store holds the hand-made catalog and one session's step, send_email -> PRIOR, read into
    the signals' relations."""
    client, service = await services.serve(
        aiohttp_client, clock=clock, oracle="off", session_prior_weight=1.0, **settings
    )
    await service.catalog.upsert_tools(HAND_CATALOG)
    await observe(client, service, "seed", "s1", "send_email")
    clock.advance(minutes=1)
    await observe(client, service, "seed", "s2", PRIOR)
    running = service.sessions._task  # the upkeep's refresh, maybe begun before the step
    if running is not None:
        await asyncio.gather(running, return_exceptions=True)
    await service.sessions.refresh()
    assert service.sessions.relations.prior(("send_email",)) == {PRIOR: 1.0}
    return client, service


async def rank(client: Client, **conversation: Any) -> list[dict[str, Any]]:
    resp = await client.post("/v1/rank", json={"query": VAGUE, "k": 3, **conversation})
    assert resp.status == 200, await resp.text()
    results: list[dict[str, Any]] = (await resp.json())["results"]
    return results


async def observe(client: Client, service: Service, session: str, turn_id: str, tool: str) -> None:
    # No outcome: the turn labels nothing (the scores stay comparable), its tool only counts.
    turn = {"request": f"turn {turn_id}", "used_tool": tool, "session_id": session,
            "turn_id": turn_id}  # fmt: skip
    assert (await client.post("/v1/observe", json=turn)).status == 202
    assert await service.learning.turn_when_done(turn_id, 15.0) is not None


async def steps(client: Client) -> list[tuple[str, str, int]]:
    resp = await client.get("/v1/analytics/tool_transitions")
    assert resp.status == 200, await resp.text()
    return [(row[0], row[1], row[2]) for row in (await resp.json())["rows"]]


async def from_the_store(service: Service) -> tuple[str, ...]:
    """The session's previous tools once this process forgot its turn and read the store's
    tail in the background (as a process that never noted it does)."""
    service.sessions._recent.clear()
    service.sessions.previous("chat-1")  # starts the read

    async def read() -> bool:
        return "chat-1" in service.sessions._recent and not service.sessions._wanted

    await eventually(read, within=10.0)
    return service.sessions.previous("chat-1")


async def test_a_session_idle_past_the_limit_starts_afresh(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    client, service = await serve(services, aiohttp_client, clock)
    alone = await rank(client)
    assert alone[0]["tool"] != PRIOR

    await observe(client, service, "chat-1", "t1", "send_email")
    clock.advance(minutes=59)  # within the hour: the session goes on
    assert (await rank(client, session_id="chat-1"))[0]["tool"] == PRIOR
    assert await from_the_store(service) == ("send_email",)
    assert (await rank(client, session_id="chat-1"))[0]["tool"] == PRIOR

    clock.advance(minutes=2)  # 61 minutes without a turn: expired
    assert await rank(client, session_id="chat-1") == await rank(client) == alone
    assert await from_the_store(service) == ()
    assert await rank(client, session_id="chat-1") == alone

    # Its next turn starts it afresh: no step from send_email; the turn after it is one.
    await observe(client, service, "chat-1", "t2", PRIOR)
    clock.advance(minutes=5)
    await observe(client, service, "chat-1", "t3", "send_email")
    assert await steps(client) == [(PRIOR, "send_email", 1), SEEDED]
    assert (await rank(client, session_id="chat-1"))[0]["tool"] == PRIOR


async def test_with_no_idle_limit_a_session_never_expires(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """`TOOLSELECT_SESSION_IDLE=0`: a session picked up days later continues, its first turn a
    step after the old one's last."""
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    client, service = await serve(services, aiohttp_client, clock, session_idle_s=0.0)
    await observe(client, service, "chat-1", "t1", "send_email")
    clock.advance(days=3)
    assert (await rank(client, session_id="chat-1"))[0]["tool"] == PRIOR
    assert await from_the_store(service) == ("send_email",)
    await observe(client, service, "chat-1", "t2", PRIOR)
    assert await steps(client) == [("send_email", PRIOR, 2)]
