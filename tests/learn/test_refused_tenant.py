"""The turns a tenant's spent teacher budget refused outlive its service, as the budget does:
closed for being idle and started again, the tenant asks about them once the hour frees slots."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.learn.test_learner import TOOLS
from tests.services import ServiceFactory
from tests.stubs import Reply, Stub, anthropic_message
from toolselect.service import TenantServices
from toolselect.testing import FakeClock

TENANT = "team-a"
CITIES = ("Rome", "Oslo", "Lima", "Kyiv")


async def test_turns_refused_by_the_budget_are_asked_about_after_an_idle_restart(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """Budget 2, four fallback turns: two `labeled`, two `limit_reached`; the tenant is closed
    idle and started again; an hour later the two refused turns are labelled too."""
    anthropic_stub.reply(Reply(body=anthropic_message("shell_exec")))
    default = await services.start(
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
        teacher_budget_per_hour=2,
        teacher_retries=0,
    )
    clock = FakeClock()
    tenants = TenantServices(default, clock=clock)
    try:
        first = await tenants.get(TENANT)
        await first.store.upsert_tools(TOOLS)
        await first.index.reload()
        for i, city in enumerate(CITIES):
            request = f"run the backup script for {city}"
            assert first.learner.observe(request, "shell_exec", turn_id=f"r{i}")
        assert await first.learner.drain(30.0)
        results = [(await first.store.get_turn(f"r{i}")) for i in range(len(CITIES))]
        refused = sorted(t.id for t in results if t is not None and t.result == "limit_reached")
        assert len(refused) == 2 and len(anthropic_stub.received) == 2

        await tenants.close_tenant(TENANT, idle=True)
        again = await tenants.get(TENANT)
        assert again is not first
        clock.advance(timedelta(hours=1, seconds=1))  # the hour frees both slots
        await again.learner.ask_again()  # or the service's upkeep did, every tick
        for _ in range(500):
            turns = [await again.store.get_turn(turn_id) for turn_id in refused]
            if all(t is not None and t.result == "labeled" for t in turns):
                break
            await asyncio.sleep(0.02)
        assert [(t.tier, t.result, t.label) for t in turns if t is not None] == [
            ("teacher", "labeled", "shell_exec")
        ] * 2
        assert len(anthropic_stub.received) == 4
    finally:
        await tenants.close_others()  # `default` is closed by the fixture
